package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/storage"
)

// Republished is what Republish did.
type Republished struct {
	// Events is how many events had outputs their broker lost, now marked
	// not delivered: a delivered event is pending again, a pending one
	// publishes them at its next attempt, a dead letter when retried.
	Events int
	// Recalled is how many outputs of pending events their broker stored
	// without the router recording it, as far as the message ids say; the
	// loops mark these delivered instead of sending them again, each one
	// whose stored event id is the id the output has when made.
	Recalled int
}

// Republish sets right, after an unclean stop and before Open, what the
// data file and the brokers of the named sinks disagree on
// (docs/decisions/power-loss.md, docs/decisions/dedup-window.md):
//
//   - Outputs delivered within window before the router last stopped that
//     the broker no longer holds: a broker that acknowledges before it
//     fsyncs (the embedded JetStream) can lose them in a power cut. They
//     are marked not delivered, and go out again under the same message
//     ids: a delivered event is pending again, a pending one sends them at
//     its next attempt, a dead letter when it is retried.
//   - Outputs of pending events that the broker stored and the router never
//     recorded: the crash fell between acknowledgement and commit. The loops
//     record these as delivered, at the broker's position, instead of
//     sending them again — whatever the broker's dedup window, and however
//     long the router was down.
//
// A sink that is a switchyard.Keeper is asked; for any other sink every
// output of the window counts as lost and nothing is recalled. It runs
// before Open, which then starts the loops: a loop that published meanwhile
// could take a sequence the broker lost, and the window is counted back
// from the newest delivery.
func (e *Engine) Republish(ctx context.Context, sinks []string, window time.Duration) (Republished, error) {
	e.mu.Lock()
	open := e.ctx != nil
	e.mu.Unlock()
	if open {
		return Republished{}, errors.New("engine: Republish after Open")
	}
	if len(sinks) == 0 {
		return Republished{}, nil
	}
	recs, err := e.deliveredLast(window)
	if err != nil {
		return Republished{}, err
	}
	lost, others := e.askKeepers(ctx, recs, sinks, window)
	var done Republished
	// Before the requeue: an event it makes pending again is one whose
	// outputs were recorded, and must not be taken for one that was not.
	if done.Recalled, err = e.recallStored(others); err != nil {
		return done, err
	}
	done.Events, err = e.requeue(ctx, recs, lost)
	return done, err
}

// deliveredLast is the records with an output delivered within window
// before the newest delivery: delivered ones, and pending ones and dead
// letters whose other outputs failed.
func (e *Engine) deliveredLast(window time.Duration) ([]*storage.Record, error) {
	var recs []*storage.Record
	err := e.store.View(func(tx *storage.Tx) error {
		delivered, err := tx.RecentlyDelivered(window, e.now())
		if err != nil {
			return err
		}
		since := time.Time{} // nothing delivered in full: every partly delivered event
		if newest := newestDelivery(delivered); !newest.IsZero() {
			since = newest.Add(-window)
		}
		partly, err := tx.PartlyDelivered(since)
		recs = append(delivered, partly...)
		return err
	})
	return recs, err
}

// outputRef names one output of one record.
type outputRef struct{ key, dest, msgID string }

// askKeepers asks each named sink what its broker holds: of the outputs of
// recs delivered to it within window before the newest delivery, which it
// lost (as far as it can tell: an output to a sink that cannot tell, or
// fails to, counts as lost — a duplicate at worst), and what else it
// stored lately, by sink. Older outputs were synced long before the stop.
func (e *Engine) askKeepers(ctx context.Context, recs []*storage.Record, sinks []string, window time.Duration) (map[outputRef]bool, map[string][]switchyard.Stored) {
	bySink := map[string][]outputRef{}
	acked := map[string][]switchyard.Acked{}
	since := newestDelivery(recs).Add(-window)
	for _, r := range recs {
		for _, o := range r.Outputs {
			sink, _, _ := strings.Cut(o.Destination, ":")
			if !o.Delivered || o.DeliveredAt.Before(since) || !slices.Contains(sinks, sink) {
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
	othersBySink := map[string][]switchyard.Stored{}
	for _, sink := range sinks {
		refs := bySink[sink]
		kept := make([]bool, len(refs))
		if k, ok := e.sinks()[sink].(switchyard.Keeper); ok {
			got, others, err := k.Kept(ctx, acked[sink], window)
			if err == nil && len(got) != len(refs) {
				err = fmt.Errorf("%d answers for %d messages", len(got), len(refs))
			}
			if err == nil {
				kept, othersBySink[sink] = got, others
			} else {
				e.log.Warn("could not ask the broker what it holds; republishing what the router delivered to it last, and sending again what it may have stored unrecorded (it drops those within its duplicates window)", "sink", sink, "error", err)
			}
		}
		for i, ref := range refs {
			if !kept[i] {
				lost[ref] = true
			}
		}
	}
	return lost, othersBySink
}

// newestDelivery is the time of the newest delivered output of recs.
func newestDelivery(recs []*storage.Record) time.Time {
	var t time.Time
	for _, r := range recs {
		if d := r.LastDelivered(); d.After(t) {
			t = d
		}
	}
	return t
}

// recallStored finds, for each message a broker stored (by sink), the
// pending event that would publish it — and records where the broker holds
// it and the event id it carries, for the loops (recall.take) — and says
// how many it found. A message its event recorded as delivered is not
// recalled (sent again, a message is a duplicate at worst; recalled
// wrongly, it would be a loss).
func (e *Engine) recallStored(others map[string][]switchyard.Stored) (int, error) {
	at := map[outputRef]recalled{}
	err := e.store.View(func(tx *storage.Tx) error {
		for sink, msgs := range others {
			for _, m := range msgs {
				dest := sink + ":" + m.Topic
				key, err := pendingPublisher(tx, dest, m)
				if err != nil {
					return err
				}
				if key != "" {
					at[outputRef{key, dest, m.MsgID}] = recalled{m.Position, m.EventID}
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	e.recall.set(at, e.now())
	return len(at), nil
}

// pendingPublisher is the key of the pending outbound event that would
// publish message m to dest, or "" if there is none or it recorded the
// message as delivered. The message must carry the event's source and be
// younger than the event (an event sent again after its first was deleted
// is not taken for its predecessor). Its event id is compared when the
// loop makes the output again (recall.take), with the id the output then
// has, the input's or one a plugin gave it (docs/decisions/output-ids.md):
// a message id that two events' outputs share (one written before
// OutputMsgID, "x-1"; an inbox plugin's output "<source>#<id>/<n>/") is
// then not taken for the wrong one. The broker's time is its system
// clock's, the event's the router's: when the router's clock ran ahead of
// the system's (engine/clock.go), a message stored just after its event
// reads as older and is sent again, a duplicate. Reading brokers' times by
// the lead instead was tried and taken back: a lead that changed (across
// a restart, a step of the clock) could make an earlier event's message
// read as the pending one's, a loss; so was taking a message that carries
// the event's time attribute for its own (a corrected resend keeps source,
// id and time: TestRepublishDoesNotTakeAnEarlierMessageForANewEvent).
func pendingPublisher(tx *storage.Tx, dest string, m switchyard.Stored) (string, error) {
	msgID := m.MsgID
	key, _ := storage.OutputOf(msgID)
	r, err := tx.Record(key)
	if errors.Is(err, storage.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if r.State != storage.StatePending || delivered(r, dest, msgID) ||
		r.Event.Source != m.Source || m.Time.Before(r.CreatedAt) {
		return "", nil
	}
	return key, nil
}

// recall is where brokers hold outputs of pending events that the router
// did not record (Republish), until the loops take them or recallFor has
// passed since the start: those events were in flight at the stop, at the
// head of their queues, and go out in the first rounds. The limit keeps an
// entry from outliving its event (an operator who deletes it) and answering
// for a new event of the same id.
type recall struct {
	any   atomic.Bool // at is not empty: spares the loops the lock
	mu    sync.Mutex
	at    map[outputRef]recalled
	until time.Time
}

// recalled is where a broker holds an output, and the event id it carries.
type recalled struct {
	pos     switchyard.Position
	eventID string
}

// recallFor is how long recall answers after Republish.
const recallFor = 10 * time.Minute

func (r *recall) set(at map[outputRef]recalled, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at, r.until = at, now.Add(recallFor)
	r.any.Store(len(at) > 0)
}

// take is where a broker holds the output msgID of the event key to dest,
// if Republish found it there unrecorded and it carries eventID, the id
// the output has now; each is taken once. One that carries another id is
// another's message, or the plugin gave the output another id this time:
// it is sent (a duplicate at worst).
func (r *recall) take(key, dest, msgID, eventID string, now time.Time) (switchyard.Position, bool) {
	if !r.any.Load() {
		return switchyard.Position{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.After(r.until) {
		r.at = nil
	}
	ref := outputRef{key, dest, msgID}
	at, ok := r.at[ref]
	delete(r.at, ref)
	r.any.Store(len(r.at) > 0)
	if !ok || at.eventID != eventID {
		return switchyard.Position{}, false
	}
	return at.pos, true
}

// putBack returns what take gave for outputs that were not recorded (the
// event failed before its commit, or the commit failed), for the next
// attempt.
func (r *recall) putBack(key string, outs []*output) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range outs {
		if o.recalled && r.at != nil {
			r.at[outputRef{key, o.dest, o.msg.MsgID}] = recalled{o.result.Position, o.event.ID}
			r.any.Store(true)
		}
	}
}

// requeue marks the lost outputs of each of recs not delivered — making a
// delivered one pending again; a pending one or a dead letter stays where
// it is — and says how many events it changed.
func (e *Engine) requeue(ctx context.Context, recs []*storage.Record, lost map[outputRef]bool) (int, error) {
	n := 0
	if len(lost) == 0 {
		return 0, nil
	}
	// Newest first, as Tx.Redeliver needs: the recall reads them by the
	// delivered index, oldest first where a reload lowered the ttl
	// between two deliveries (a review).
	recs = slices.SortedFunc(slices.Values(recs), func(a, b *storage.Record) int { return cmp.Compare(b.QueueSeq, a.QueueSeq) })
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
			again := func(o storage.Output) bool { return lost[outputRef{r.Key(), o.Destination, o.MsgID}] }
			var picked bool
			switch r.State {
			case storage.StateDelivered:
				pol, _ := e.policyOf(r.QueueName())
				picked, err = tx.Redeliver(r, again, pol.ByKey(), now)
			case storage.StatePending, storage.StateDLQ:
				picked, err = tx.Forget(r, again, now)
			}
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
