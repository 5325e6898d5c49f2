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
	"unique"

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
	now := e.now()
	sent, err := e.sentLast(window, now, sinks)
	if err != nil {
		return Republished{}, err
	}
	lost, others := e.askKeepers(ctx, sent, sinks, window)
	var done Republished
	// Before the requeue: an event it makes pending again is one whose
	// outputs were recorded, and must not be taken for one that was not.
	if done.Recalled, err = e.recallStored(others); err != nil {
		return done, err
	}
	done.Events, err = e.requeue(ctx, window, now, lost)
	return done, err
}

// deliveredLast calls fn with each record with an output delivered within
// window before the newest delivery: delivered ones, and pending ones and
// dead letters whose other outputs failed. It reads the same records for
// the same now and file.
func deliveredLast(tx *storage.Tx, window time.Duration, now time.Time, fn func(*storage.Record)) error {
	var newest time.Time
	err := tx.RecentlyDelivered(window, now, func(r *storage.Record) error {
		if d := r.LastDelivered(); d.After(newest) {
			newest = d
		}
		fn(r)
		return nil
	})
	if err != nil {
		return err
	}
	since := time.Time{} // nothing delivered in full: every partly delivered event
	if !newest.IsZero() {
		since = newest.Add(-window)
	}
	return tx.PartlyDelivered(since, func(r *storage.Record) error {
		fn(r)
		return nil
	})
}

// sentTo is what the router recorded as delivered to one sink within the
// window: the message ids and positions alone, no record, for a crash
// under load leaves hundreds of thousands of them
// (docs/decisions/power-loss.md).
type sentTo struct {
	acked []switchyard.Acked
	at    []time.Time // at[i]: when acked[i] was delivered
}

// sentLast is, by sink, the outputs delivered to the named sinks within
// window before the newest delivery (deliveredLast), and when. Older
// outputs were synced long before the stop.
func (e *Engine) sentLast(window time.Duration, now time.Time, sinks []string) (map[string]*sentTo, error) {
	bySink := map[string]*sentTo{}
	for _, sink := range sinks {
		bySink[sink] = &sentTo{}
	}
	keep := func(s string) string { return unique.Make(s).Value() } // one copy of each stream's or topic's name
	var newest time.Time
	err := e.store.View(func(tx *storage.Tx) error {
		return deliveredLast(tx, window, now, func(r *storage.Record) {
			// The newest delivery of any output: one to another sink
			// last before the stop (a review) leaves older ones out.
			if d := r.LastDelivered(); d.After(newest) {
				newest = d
			}
			for _, o := range r.Outputs {
				sink, _, _ := strings.Cut(o.Destination, ":")
				if to := bySink[sink]; o.Delivered && to != nil {
					a := ackedOf(o, keep)
					a.MsgID = strings.Clone(o.MsgID) // no string holds the record's bytes
					to.acked, to.at = append(to.acked, a), append(to.at, o.DeliveredAt)
				}
			}
		})
	})
	for _, to := range bySink {
		to.keepSince(newest.Add(-window))
	}
	return bySink, err
}

// keepSince keeps the outputs delivered at or after since.
func (s *sentTo) keepSince(since time.Time) {
	n := 0
	for i, at := range s.at {
		if !at.Before(since) {
			s.acked[n], s.at[n] = s.acked[i], at
			n++
		}
	}
	s.acked, s.at = s.acked[:n], s.at[:n]
}

// outputRef names one output of one record.
type outputRef struct{ key, dest, msgID string }

// lostOutput names an output a broker lost: its sink, message id and
// recorded position (what one broker's message is told apart by).
type lostOutput struct {
	sink string
	switchyard.Acked
}

// askKeepers asks each named sink what its broker holds of what it was
// sent: which outputs it lost (as far as it can tell: an output to a sink
// that cannot tell, or fails to, counts as lost — a duplicate at worst),
// and what else it stored lately, by sink.
func (e *Engine) askKeepers(ctx context.Context, sent map[string]*sentTo, sinks []string, window time.Duration) (map[lostOutput]bool, map[string][]switchyard.Stored) {
	lost := map[lostOutput]bool{}
	othersBySink := map[string][]switchyard.Stored{}
	for _, sink := range sinks {
		acked := sent[sink].acked
		kept := make([]bool, len(acked))
		if k, ok := e.sinks()[sink].(switchyard.Keeper); ok {
			got, others, err := k.Kept(ctx, acked, window)
			if err == nil && len(got) != len(acked) {
				err = fmt.Errorf("%d answers for %d messages", len(got), len(acked))
			}
			if err == nil {
				kept, othersBySink[sink] = got, others
			} else {
				e.log.Warn("could not ask the broker what it holds; republishing what the router delivered to it last, and sending again what it may have stored unrecorded (it drops those within its duplicates window)", "sink", sink, "error", err)
			}
		}
		for i, a := range acked {
			if !kept[i] {
				lost[lostOutput{sink, a}] = true
			}
		}
	}
	return lost, othersBySink
}

// isLost says whether o is one of lost.
func isLost(lost map[lostOutput]bool, o storage.Output) bool {
	sink, _, _ := strings.Cut(o.Destination, ":")
	return o.Delivered && lost[lostOutput{sink, ackedOf(o, func(s string) string { return s })}]
}

// ackedOf is output o as its broker acknowledged it: its message id and
// the whole position recorded, the position's names through keep. One
// home for what the sinks are asked of and the requeue looks up (a review:
// the two had left a Kafka position's topic out of one of them).
func ackedOf(o storage.Output, keep func(string) string) switchyard.Acked {
	a := switchyard.Acked{MsgID: o.MsgID}
	if p := o.Position; p != nil {
		a.Position = *p
		a.Position.Stream, a.Position.Topic = keep(p.Stream), keep(p.Topic)
	}
	return a
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

// requeue marks the lost outputs of the records delivered last
// (deliveredLast, read again) not delivered — making a delivered one
// pending again; a pending one or a dead letter stays where it is — and
// says how many events it changed.
func (e *Engine) requeue(ctx context.Context, window time.Duration, now time.Time, lost map[lostOutput]bool) (int, error) {
	n := 0
	if len(lost) == 0 {
		return 0, nil
	}
	again := func(o storage.Output) bool { return isLost(lost, o) }
	err := e.store.Update(ctx, func(tx *storage.Tx) error {
		n = 0 // the group commit may run this more than once
		at := e.now()
		keys, err := withLostOutputs(tx, window, now, again)
		if err != nil {
			return err
		}
		for _, key := range keys {
			r, err := tx.Record(key)
			if err != nil {
				return err
			}
			var picked bool
			switch r.State {
			case storage.StateDelivered:
				pol, _ := e.policyOf(r.QueueName())
				picked, err = tx.Redeliver(r, again, pol.ByKey(), at)
			case storage.StatePending, storage.StateDLQ:
				picked, err = tx.Forget(r, again, at)
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

// withLostOutputs is the keys of the records delivered last with an output
// again says was lost, each once, newest first (the highest queue sequence
// first), as Tx.Redeliver needs: the recall reads them by the delivered
// index, oldest first where a reload lowered the ttl between two
// deliveries (a review).
func withLostOutputs(tx *storage.Tx, window time.Duration, now time.Time, again func(storage.Output) bool) ([]string, error) {
	type queued struct {
		key string
		seq uint64
	}
	var found []queued
	seen := map[string]bool{}
	err := deliveredLast(tx, window, now, func(r *storage.Record) {
		if key := r.Key(); !seen[key] && slices.ContainsFunc(r.Outputs, again) {
			seen[key] = true
			found = append(found, queued{key, r.QueueSeq})
		}
	})
	slices.SortFunc(found, func(a, b queued) int { return cmp.Compare(b.seq, a.seq) })
	keys := make([]string, len(found))
	for i, q := range found {
		keys[i] = q.key
	}
	return keys, err
}
