package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/storage"
)

// abandonGrace is how long a loop waits, after a batch's deadline, for a
// sink that ignores its context, before it gives the batch up as unknown.
const abandonGrace = 5 * time.Second

// Loop is the scheduler of one event type. run drives it; tests can call
// Poll by hand.
type Loop struct {
	e     *Engine
	typ   string
	pol   *config.Policy
	wakeC chan struct{}

	mu    sync.Mutex
	delay *Delay
	claimed map[string]struct{} // ids claimed by the batch in flight
}

func newLoop(e *Engine, t string, pol *config.Policy) *Loop {
	return &Loop{
		e:     e,
		typ:   t,
		pol:   pol,
		wakeC: make(chan struct{}, 1),
		delay: NewDelay(pol.Polling),
		claimed: make(map[string]struct{}),
	}
}

func (l *Loop) wake() {
	select {
	case l.wakeC <- struct{}{}:
	default:
	}
}

func (l *Loop) holds(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.claimed[id]
	return ok
}

func (l *Loop) inProcess() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.claimed)
}

func (l *Loop) currentDelay() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.delay.Current()
}

// run polls until ctx ends: after each poll it waits the adaptive delay, or
// less when a commit of this type wakes it. After a poll that hit sink
// errors it waits the full delay, so a broker outage makes it back off
// instead of spinning on every new event.
func (l *Loop) run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		res, err := l.Poll(ctx)
		if err != nil && ctx.Err() == nil {
			l.e.log.Error("poll failed", "type", l.typ, "error", err)
		}
		l.mu.Lock()
		d := l.delay.Next(res.Claimed == l.pol.BatchSize)
		l.mu.Unlock()
		l.e.metrics.polled(l.typ, res.Claimed, l.pol.BatchSize, d)
		timer.Reset(d)
		wake := l.wakeC
		if res.Failed > 0 || err != nil {
			wake = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-wake:
			if !timer.Stop() {
				<-timer.C
			}
		}
	}
}

// PollResult counts what one poll did.
type PollResult struct {
	Claimed      int // events taken from the queue
	Delivered    int // every output acknowledged
	Retried      int // rescheduled with backoff
	DeadLettered int // moved to the DLQ
	Released     int // outcome unknown: back to pending, no attempt counted
	Failed       int // outputs that failed, any reason
}

// Poll claims one batch of due events, publishes their outputs and commits
// the outcome.
func (l *Loop) Poll(ctx context.Context) (PollResult, error) {
	var res PollResult
	now := l.e.now()
	var recs []*storage.Record
	err := l.e.store.View(func(tx *storage.Tx) error {
		var err error
		recs, err = tx.Due(l.typ, now, l.pol.BatchSize, l.pol.Ordering == "key", l.holds)
		return err
	})
	if err != nil || len(recs) == 0 {
		return res, err
	}
	res.Claimed = len(recs)
	l.hold(recs)
	defer l.release(recs)

	batch := l.outputs(recs)
	pubCtx, cancel := context.WithTimeout(ctx, l.pol.MaxProcessingTime)
	batch.publish(pubCtx, l.e.sinks)
	cancel()
	res.Failed = batch.failed

	err = l.e.store.Update(context.WithoutCancel(ctx), func(tx *storage.Tx) error {
		res = PollResult{Claimed: res.Claimed, Failed: res.Failed}
		return l.commit(tx, batch, &res)
	})
	if err != nil {
		// Nothing of this batch is recorded: the events are still pending
		// and will be published again (at least once; receivers dedup by id).
		return res, fmt.Errorf("commit batch of %s: %w", l.typ, err)
	}
	l.e.metrics.committed(l.typ, &res, batch)
	return res, nil
}

func (l *Loop) hold(recs []*storage.Record) {
	l.mu.Lock()
	for _, r := range recs {
		l.claimed[r.Event.ID] = struct{}{}
	}
	l.mu.Unlock()
}

func (l *Loop) release(recs []*storage.Record) {
	l.mu.Lock()
	for _, r := range recs {
		delete(l.claimed, r.Event.ID)
	}
	l.mu.Unlock()
}

// item is one claimed event and the outputs it still owes.
type item struct {
	rec     *storage.Record
	outputs []*output
}

// output is one message for one sink, and what became of it.
type output struct {
	dest   string // "nats.local:orders"
	sink   string
	msg    Message
	result Result
}

// batch is a claimed batch with its outputs grouped by sink.
type batch struct {
	items  []item
	bySink map[string][]*output
	failed int
}

// outputs computes each event's outputs from the type's routes, leaving out
// the ones already acknowledged on an earlier attempt.
func (l *Loop) outputs(recs []*storage.Record) *batch {
	b := &batch{items: make([]item, len(recs)), bySink: make(map[string][]*output)}
	routes := l.pol.Routes
	for i, rec := range recs {
		b.items[i].rec = rec
		for n, r := range routes {
			dest := destination(r)
			if delivered(rec, dest) {
				continue
			}
			msgID := rec.Event.ID
			if n > 0 {
				msgID += "-" + strconv.Itoa(n)
			}
			o := &output{dest: dest, sink: r.To, msg: Message{
				Event:       &rec.Event,
				Destination: dest[len(r.To)+1:],
				Key:         rec.Event.PartitionKey(),
				MsgID:       msgID,
			}}
			b.items[i].outputs = append(b.items[i].outputs, o)
			b.bySink[r.To] = append(b.bySink[r.To], o)
		}
	}
	return b
}

func delivered(rec *storage.Record, dest string) bool {
	for _, o := range rec.Outputs {
		if o.Destination == dest && o.Delivered {
			return true
		}
	}
	return false
}

// publish sends every sink its messages concurrently and waits for all. A
// sink that overstays the deadline by abandonGrace is given up on: its
// outputs count as unknown.
func (b *batch) publish(ctx context.Context, sinks map[string]Sink) {
	var wg sync.WaitGroup
	for name, outs := range b.bySink {
		msgs := make([]*Message, len(outs))
		for i, o := range outs {
			msgs[i] = &o.msg
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results := publishBounded(ctx, sinks[name], msgs)
			for i, o := range outs {
				o.result = results[i]
			}
		}()
	}
	wg.Wait()
	for _, outs := range b.bySink {
		for _, o := range outs {
			if o.result.Err != nil {
				b.failed++
			}
		}
	}
}

func publishBounded(ctx context.Context, s Sink, msgs []*Message) []Result {
	ch := make(chan []Result, 1)
	go func() { ch <- s.Publish(ctx, msgs) }()
	select {
	case r := <-ch:
		if len(r) == len(msgs) {
			return r
		}
		return unknown(len(msgs), fmt.Errorf("sink %s returned %d results for %d messages", s.Name(), len(r), len(msgs)))
	case <-ctx.Done():
	}
	grace := time.NewTimer(abandonGrace)
	defer grace.Stop()
	select {
	case r := <-ch:
		if len(r) == len(msgs) {
			return r
		}
	case <-grace.C:
	}
	return unknown(len(msgs), fmt.Errorf("sink %s did not answer by the deadline: %w", s.Name(), ErrUnknownOutcome))
}

func unknown(n int, err error) []Result {
	r := make([]Result, n)
	for i := range r {
		r[i].Err = err
	}
	return r
}

// commit records a batch's outcome. Each event is read again inside the
// transaction: if it changed since the claim (an operator moved it), its
// outcome is dropped, except that acknowledged outputs are still recorded.
func (l *Loop) commit(tx *storage.Tx, b *batch, res *PollResult) error {
	now := l.e.now()
	for i := range b.items {
		it := &b.items[i]
		rec, err := tx.Event(it.rec.Event.ID)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		var permanent, retry, unknown error
		for _, o := range it.outputs {
			err := o.result.Err
			setOutput(rec, o, now)
			switch {
			case err == nil:
			case IsPermanent(err):
				permanent = fmt.Errorf("%s: %w", o.dest, err)
			case errors.Is(err, ErrUnknownOutcome) || errors.Is(err, context.DeadlineExceeded):
				unknown = fmt.Errorf("%s: %w", o.dest, err)
			default:
				retry = fmt.Errorf("%s: %w", o.dest, err)
			}
		}
		rec.UpdatedAt = now
		if rec.State != storage.StatePending || rec.QueueSeq != it.rec.QueueSeq {
			if err := tx.Save(rec); err != nil {
				return err
			}
			continue
		}
		switch {
		case permanent != nil:
			rec.Attempts++
			rec.History = append(rec.History, storage.Attempt{At: now, Error: permanent.Error()})
			err = tx.MoveToDLQ(rec, now, "rejected: "+permanent.Error())
			res.DeadLettered++
		case retry != nil:
			rec.Attempts++
			rec.LastError = retry.Error()
			rec.History = append(rec.History, storage.Attempt{At: now, Error: retry.Error()})
			if rec.Attempts > l.pol.MaxRetries {
				err = tx.MoveToDLQ(rec, now, fmt.Sprintf("gave up after %d attempts: %v", rec.Attempts, retry))
				res.DeadLettered++
			} else {
				err = tx.Reschedule(rec, now.Add(Backoff(l.pol.Backoff, rec.Attempts)))
				res.Retried++
			}
		case unknown != nil:
			// Fail closed: the broker may or may not have it. Keep the
			// event due, with the same id, and count no attempt.
			rec.LastError = unknown.Error()
			err = tx.Save(rec)
			res.Released++
		default:
			err = tx.MarkDelivered(rec, now, l.e.cfg.Outbox.TTL)
			res.Delivered++
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// setOutput records an output's result in the event's output list.
func setOutput(rec *storage.Record, o *output, now time.Time) {
	var st *storage.Output
	for i := range rec.Outputs {
		if rec.Outputs[i].Destination == o.dest {
			st = &rec.Outputs[i]
		}
	}
	if st == nil {
		rec.Outputs = append(rec.Outputs, storage.Output{Destination: o.dest})
		st = &rec.Outputs[len(rec.Outputs)-1]
	}
	if o.result.Err != nil {
		st.LastError = o.result.Err.Error()
		return
	}
	pos := o.result.Position
	st.Delivered, st.DeliveredAt, st.Position, st.LastError = true, now, &pos, ""
}
