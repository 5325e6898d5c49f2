package engine

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-router/switchyard/storage"
)

// Republish makes the events delivered within window before the router
// last stopped pending again, for their outputs to the named sinks only;
// the loops then publish those once more under the same message ids. It is
// run after an unclean stop, for brokers that acknowledge before they
// fsync (the embedded JetStream): what they lost in a power cut is
// published again, and what they kept they drop as a duplicate
// (docs/decisions/power-loss.md). It returns how many events it requeued.
func (e *Engine) Republish(ctx context.Context, sinks []string, window time.Duration) (int, error) {
	if len(sinks) == 0 {
		return 0, nil
	}
	again := func(o storage.Output) bool {
		sink, _, _ := strings.Cut(o.Destination, ":")
		return slices.Contains(sinks, sink)
	}
	n := 0
	types := map[string]bool{}
	err := e.store.Update(ctx, func(tx *storage.Tx) error {
		n = 0 // the group commit may run this more than once
		clear(types)
		recs, err := tx.RecentlyDelivered(window)
		if err != nil {
			return err
		}
		now := e.now()
		for _, r := range recs {
			pol, _ := e.policyOf(r.QueueName())
			picked, err := tx.Redeliver(r, again, pol.ByKey(), now)
			if err != nil {
				return err
			}
			if picked {
				n++
				types[r.QueueName()] = true
			}
		}
		return nil
	})
	e.mu.Lock()
	open := e.ctx != nil
	e.mu.Unlock()
	for t := range types {
		if open { // before Open, Open starts the loops of stored events
			e.wake(t)
		}
	}
	return n, err
}
