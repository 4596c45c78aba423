package chain

// LogLen is the number of writes n keeps for re-shipping.
func LogLen(n *Node) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.entries)
}
