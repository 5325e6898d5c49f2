package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/storage"
)

// Republish makes the events delivered within window before the router
// last stopped pending again, for their outputs to the named sinks that
// the broker no longer holds; the loops then publish those once more under
// the same message ids. It is run after an unclean stop, for brokers that
// acknowledge before they fsync (the embedded JetStream): what they lost in
// a power cut is published again. A sink that is a switchyard.Keeper is
// asked what it kept, so a kept message is not stored twice however long
// the machine was off; for any other sink every such output goes out again
// and the broker's dedup window must drop what it kept
// (docs/decisions/power-loss.md). It runs before Open, which then starts the
// loops of the types it requeued: a loop that published meanwhile could
// take a sequence the broker lost, and the window is counted back from the
// newest delivery. It returns how many events it requeued.
func (e *Engine) Republish(ctx context.Context, sinks []string, window time.Duration) (int, error) {
	e.mu.Lock()
	open := e.ctx != nil
	e.mu.Unlock()
	if open {
		return 0, errors.New("engine: Republish after Open")
	}
	if len(sinks) == 0 {
		return 0, nil
	}
	var recs []*storage.Record
	err := e.store.View(func(tx *storage.Tx) (err error) {
		recs, err = tx.RecentlyDelivered(window)
		return err
	})
	if err != nil {
		return 0, err
	}
	return e.requeue(ctx, recs, e.lostOutputs(ctx, recs, sinks))
}

// outputRef names one output of one record.
type outputRef struct{ key, dest, msgID string }

// lostOutputs is the delivered outputs of recs to the named sinks that
// their broker no longer holds, as far as it can tell (switchyard.Keeper);
// an output to a sink that cannot tell, or fails to, counts as lost: a
// duplicate at worst, where the broker's dedup window has passed.
func (e *Engine) lostOutputs(ctx context.Context, recs []*storage.Record, sinks []string) map[outputRef]bool {
	bySink := map[string][]outputRef{}
	acked := map[string][]switchyard.Acked{}
	for _, r := range recs {
		for _, o := range r.Outputs {
			sink, _, _ := strings.Cut(o.Destination, ":")
			if !o.Delivered || !slices.Contains(sinks, sink) {
				continue
			}
			bySink[sink] = append(bySink[sink], outputRef{r.Key(), o.Destination, o.MsgID})
			a := switchyard.Acked{MsgID: o.MsgID}
			if o.Position != nil {
				a.Position = *o.Position
			}
			acked[sink] = append(acked[sink], a)
		}
	}
	lost := map[outputRef]bool{}
	for sink, refs := range bySink {
		kept := make([]bool, len(refs))
		if k, ok := e.sinks()[sink].(switchyard.Keeper); ok {
			got, err := k.Kept(ctx, acked[sink])
			if err == nil && len(got) != len(refs) {
				err = fmt.Errorf("%d answers for %d messages", len(got), len(refs))
			}
			if err == nil {
				kept = got
			} else {
				e.log.Warn("could not ask the broker which messages it kept; republishing them all (it drops those it kept within its duplicates window)", "sink", sink, "error", err)
			}
		}
		for i, ref := range refs {
			if !kept[i] {
				lost[ref] = true
			}
		}
	}
	return lost
}

// requeue makes each of recs pending again with its lost outputs marked
// not delivered, and says how many it requeued.
func (e *Engine) requeue(ctx context.Context, recs []*storage.Record, lost map[outputRef]bool) (int, error) {
	n := 0
	if len(lost) == 0 {
		return 0, nil
	}
	err := e.store.Update(ctx, func(tx *storage.Tx) error {
		n = 0 // the group commit may run this more than once
		now := e.now()
		for _, old := range recs {
			r, err := tx.Record(old.Key())
			if errors.Is(err, storage.ErrNotFound) {
				continue // removed since (TTL)
			}
			if err != nil {
				return err
			}
			if r.State != storage.StateDelivered {
				continue
			}
			again := func(o storage.Output) bool { return lost[outputRef{r.Key(), o.Destination, o.MsgID}] }
			pol, _ := e.policyOf(r.QueueName())
			picked, err := tx.Redeliver(r, again, pol.ByKey(), now)
			if err != nil {
				return err
			}
			if picked {
				n++
			}
		}
		return nil
	})
	return n, err
}
