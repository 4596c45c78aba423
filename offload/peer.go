package offload

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/nearstore/nearstore/host"
	"github.com/nearstore/nearstore/offloadfs"
)

// RegisterTaskHost registers the engine's host as a reservation
// registrant on the namespace a peer engine reaches over NVMe/TCP: the
// owner holds a Write Exclusive – Registrants Only reservation, under
// which only registrants may write (offloadfs, owner.go); the grants
// still confine the engine to its blocks. The key is a function of
// hostNQN, so registering again (a restarted engine) changes nothing.
func RegisterTaskHost(ctx context.Context, ns offloadfs.Reserver, hostNQN string) error {
	h := fnv.New64a()
	h.Write([]byte(hostNQN))
	if err := ns.Register(ctx, host.RegisterOpts{Action: host.RegisterKey, NewKey: h.Sum64() | 1}); err != nil {
		return fmt.Errorf("offload: registering %s as a writer of the namespace: %w", hostNQN, err)
	}
	return nil
}
