package host

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Identity is a host's NVMe identity: its host NQN and 128-bit host ID,
// which a target uses to tell hosts apart (reservations, grants, extent
// maps are all the host's).
type Identity struct {
	NQN string
	ID  [16]byte
	// Source says where it came from, for messages.
	Source string
}

// Files nvme-cli keeps the host's identity in.
const (
	HostNQNFile = "/etc/nvme/hostnqn"
	HostIDFile  = "/etc/nvme/hostid"
	machineID   = "/etc/machine-id"
)

// SystemIdentity returns this machine's host identity, stable across runs,
// as nvme-cli finds it: /etc/nvme/hostnqn and /etc/nvme/hostid when
// present; else one derived from /etc/machine-id, so every process on the
// machine is the same host. A host NQN of the uuid form without a hostid
// file takes its ID from the NQN, as nvme-cli does.
func SystemIdentity() (Identity, error) { return identityUnder("/") }

// identityUnder is SystemIdentity with the files under root.
func identityUnder(root string) (Identity, error) {
	read := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(root, name)) }
	if b, err := read(HostNQNFile); err == nil {
		id := Identity{NQN: strings.TrimSpace(string(b)), Source: HostNQNFile}
		if id.NQN == "" {
			return Identity{}, fmt.Errorf("host: %s is empty", HostNQNFile)
		}
		switch raw, err := read(HostIDFile); {
		case err == nil:
			if id.ID, err = ParseHostID(strings.TrimSpace(string(raw))); err != nil {
				return Identity{}, fmt.Errorf("host: %s: %w", HostIDFile, err)
			}
		case errors.Is(err, os.ErrNotExist):
			u, ok := strings.CutPrefix(id.NQN, "nqn.2014-08.org.nvmexpress:uuid:")
			if id.ID, err = ParseHostID(u); !ok || err != nil {
				return Identity{}, fmt.Errorf("host: %s names no UUID and %s is missing: give a host ID", HostNQNFile, HostIDFile)
			}
		default:
			return Identity{}, fmt.Errorf("host: %w", err)
		}
		return id, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return Identity{}, fmt.Errorf("host: %w", err)
	}
	m, err := read(machineID)
	if err != nil || len(strings.TrimSpace(string(m))) == 0 {
		return Identity{}, fmt.Errorf("host: no %s and no %s to derive a host identity from: give one (--hostnqn, --hostid)", HostNQNFile, machineID)
	}
	sum := sha256.Sum256([]byte("nearstore host id\x00" + strings.TrimSpace(string(m))))
	var id Identity
	copy(id.ID[:], sum[:16])
	id.ID[6] = id.ID[6]&0x0f | 0x50 // a name-based (version 5) UUID
	id.ID[8] = id.ID[8]&0x3f | 0x80
	id.NQN = "nqn.2014-08.org.nvmexpress:uuid:" + uuidString(id.ID)
	id.Source = machineID
	return id, nil
}

// ParseHostID parses a host ID written as a UUID
// (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx) or as 32 hex digits.
func ParseHostID(s string) ([16]byte, error) {
	var id [16]byte
	h := strings.ReplaceAll(s, "-", "")
	if len(h) != 32 {
		return id, fmt.Errorf("host ID %q: want a UUID", s)
	}
	if _, err := hex.Decode(id[:], []byte(h)); err != nil {
		return id, fmt.Errorf("host ID %q: want a UUID: %w", s, err)
	}
	return id, nil
}
