package offload

import (
	"context"
	"errors"
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
// hostNQN, and registering again when registered changes nothing, so a
// peer engine calls it before every task (Config.BeforeTask).
func RegisterTaskHost(ctx context.Context, ns offloadfs.Reserver, hostNQN string) error {
	h := fnv.New64a()
	h.Write([]byte(hostNQN))
	key := h.Sum64() | 1
	err := ns.Register(ctx, host.RegisterOpts{Action: host.RegisterKey, NewKey: key})
	if errors.Is(err, host.ErrReservationConflict) {
		// Registered already (under this key, or an older one).
		err = ns.Register(ctx, host.RegisterOpts{Action: host.ReplaceKey, NewKey: key, IgnoreExistingKey: true})
	}
	if err != nil {
		return fmt.Errorf("offload: registering %s as a writer of the namespace: %w", hostNQN, err)
	}
	return nil
}
