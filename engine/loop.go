package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/internal/logthrottle"
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
	pol   atomic.Pointer[config.Policy] // swapped by Reload
	wakeC chan struct{}
	kickC chan struct{} // a sink became reachable: poll now, even after a failure

	// take makes reading the due events and holding them one step: a
	// test's Poll beside the running loop would otherwise read the same
	// events before either held them, and run them twice (seen in CI).
	take  sync.Mutex
	lines keyLines // the queue may hold events stored while not ordered by key

	backingOff atomic.Bool // the loop waits at most outageProbe (wait)
	// retired: a reload removed the type's block; the loop stops once its
	// queue is empty (Engine.retire).
	retired atomic.Bool

	mu    sync.Mutex
	delay *Delay
	held  map[string]struct{} // ids of the events the batches in flight hold (docs/decisions/holds-in-memory.md)
	// probed is, by id, the events probes found their sinks still down for
	// (waitInMemory) since the waits were last forgotten, each with the
	// round of probes that last took or noted it (takeProbed).
	probed map[string]uint64
	round  uint64
	// forgets counts forgetWaits: a batch taken before the last one
	// (batch.forgets) does not note its events (mayWait).
	forgets uint64
	// probedFirst: the next probe takes noted events first (takeDue).
	probedFirst bool

	// logFailures' lines: loggedFailures a second of each kind; those
	// held back are counted in a line a second after the first of them
	// (sayHeld).
	retryLog, deadLog logthrottle.Budget
	sayHeldLater      logthrottle.Later
}

func newLoop(e *Engine, t string, pol *config.Policy) *Loop {
	l := &Loop{
		e:        e,
		typ:      t,
		wakeC:    make(chan struct{}, 1),
		kickC:    make(chan struct{}, 1),
		delay:    NewDelay(pol.Polling),
		held:     make(map[string]struct{}),
		probed:   make(map[string]uint64),
		retryLog: logthrottle.Budget{Lines: loggedFailures},
		deadLog:  logthrottle.Budget{Lines: loggedFailures},
	}
	l.pol.Store(pol)
	l.lines.stale.Store(pol.ByKey())
	return l
}

// setPolicy takes a reloaded policy; the next poll uses it.
func (l *Loop) setPolicy(pol *config.Policy) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if pol.ByKey() && !l.pol.Load().ByKey() {
		l.lines.markStale() // before the swap: no take by key before it
	}
	if l.pol.Swap(pol).Polling != pol.Polling {
		l.delay = NewDelay(pol.Polling)
	}
	l.forgetWaitsLocked() // the reload may route them to a sink that is up
	l.retired.Store(false)
	l.wake()
}

// retire tells the loop that a reload removed its type's block: it
// delivers what the queue holds with its last settings, then stops.
func (l *Loop) retire() {
	l.retired.Store(true)
	l.kick()
}

func (l *Loop) wake() {
	select {
	case l.wakeC <- struct{}{}:
	default:
	}
}

// kick makes the loop poll now, whatever the last poll met: a sink it
// publishes to is reachable again.
func (l *Loop) kick() {
	select {
	case l.kickC <- struct{}{}:
	default:
	}
}

// holds reports whether the loop holds the event stored under key. The
// lookup makes no string of key.
func (l *Loop) holds(key []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.held[string(key)]
	return ok
}

// skips is storage.Tx.Due's skip, which passes the key as stored: the
// events the loop holds, and those a probe met the outage with
// (waitInMemory).
func (l *Loop) skips(key []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.held[string(key)]; ok {
		return true
	}
	_, noted := l.probed[string(key)]
	return noted
}

// skipsInRound skips the events the loop holds, those no probe met the
// outage with, and those probes took or noted in this round.
func (l *Loop) skipsInRound(key []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.held[string(key)]; ok {
		return true
	}
	round, noted := l.probed[string(key)]
	return !noted || round == l.round
}

// probedTurn reports whether a probe met an event's sink still down since
// the waits were last forgotten (any), and whether this probe takes those
// events first (first): every other probe does.
func (l *Loop) probedTurn() (any, first bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.probed) == 0 {
		return false, false
	}
	l.probedFirst = !l.probedFirst
	return true, l.probedFirst
}

// newRound begins a new round of probes: every noted event may be taken
// again.
func (l *Loop) newRound() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.round++
}

// inRound notes that probes took recs again in this round, unless the
// waits were forgotten since the take began (forgets: Loop.forgets then).
func (l *Loop) inRound(recs []*storage.Record, forgets uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if forgets != l.forgets {
		return
	}
	for _, r := range recs {
		l.noteLocked(r.Key())
	}
}

// noteLocked notes that a probe met the sink of event key down in this
// round. The key is copied: a decoded record's strings share one copy of
// its bytes, data and all (storage.newDecoder), and up to maxWaits keys
// are kept for as long as an outage lasts (a review: 64 keys of 1 MiB
// events held 64 MiB).
func (l *Loop) noteLocked(key string) {
	l.probed[strings.Clone(key)] = l.round
}

// forgetWaits ends the round: every event that waits out an outage in
// memory is due at once (a sink is reachable again, a poll delivered, or
// a reload may have routed them elsewhere).
func (l *Loop) forgetWaits() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgetWaitsLocked()
}

// forgetsNow is Loop.forgets: a batch taken from now on may note its
// events until the waits are forgotten again.
func (l *Loop) forgetsNow() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.forgets
}

func (l *Loop) forgetWaitsLocked() {
	l.forgets++
	if len(l.probed) > 4096 {
		l.probed = make(map[string]uint64) // a cleared map keeps its size
		return
	}
	clear(l.probed)
}

// maxWaits bounds the events a loop keeps waiting out an outage in memory
// (about 100 bytes each): a probe that would go past it writes its waits,
// as any other poll does.
const maxWaits = 100_000

func (l *Loop) inProcess() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held)
}

// currentDelay is how long the loop waits between polls now: the adaptive
// delay, or at most outageProbe while it backs off from an outage (it
// probes once a second, whatever the delay grew to).
func (l *Loop) currentDelay() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.backingOff.Load() {
		return min(l.delay.Current(), outageProbe)
	}
	return l.delay.Current()
}

// outageProbe bounds the wait after a poll that found its sink unavailable
// or could not learn an outcome, and delivered nothing: the loop ignores new
// events until then, so an outage costs one probe a second, not a poll per
// event.
const outageProbe = time.Second

// maxOutageWait bounds how long an event whose output met an outage waits
// before it is taken again (outageWait), and is how far ahead of now a
// probe, or the first take after a sink became reachable, looks for such
// events (docs/decisions/outage-no-attempt.md).
const maxOutageWait = 30 * time.Second

// outageWait is how long an event whose output met an outage (sink
// unavailable, outcome unknown) waits before it is taken again: as long as
// it has been stored, from outageProbe to maxOutageWait. It moves out of
// the way of the events behind it, which may go to sinks that are up, and
// an event that has waited long is tried less often.
func outageWait(rec *storage.Record, now time.Time) time.Duration {
	if rec.CreatedAt.IsZero() {
		return outageProbe
	}
	return min(max(now.Sub(rec.CreatedAt), outageProbe), maxOutageWait)
}

// outcomeWait is how long a batch's outcome may wait for another write
// (the next ingest, another type's outcome) to share its commit, when the
// batch took every event due (batch.hurry; storage.Later). At a low rate
// each event otherwise costs two commits, its ingest and its outcome, with
// four fdatasyncs and ~14 pages written (58 KB per event at 20 events/s,
// measured: docs/decisions/group-commit.md). Nothing waits on it but the
// hold of events already delivered, and a crash within it sends them
// again, as any crash before an outcome's commit does.
var outcomeWait = 100 * time.Millisecond // a var for the tests

// maxInTransit bounds how many sent batches of one loop may wait for their
// acknowledgements and commit while the loop takes and sends the next
// (docs/decisions/full-batch.md).
const maxInTransit = 4

// run polls until ctx ends: after each poll it waits the adaptive delay, or
// less when a commit of this type wakes it. After a poll that found a sink
// unavailable (or could not learn an outcome) and delivered nothing, it
// ignores wake-ups and waits the delay, at most outageProbe, so a broker
// outage makes it probe once a second instead of spinning on every new
// event (such a poll does not count as full, however many events it took:
// the delay grows, and the probes send one batch at a time). A probe, and
// the first take after a sink became reachable (kick), also takes the
// events that wait out an outage (outageWait), up to maxOutageWait ahead.
// An event that failed for its own sake (retried later, or dead-lettered)
// does not slow the others, nor does an event whose sink is down slow the
// events of its type that go to other sinks: it waits behind them.
//
// While a backlog drains, the loop sends the next batch while the
// acknowledgements and the commit of the last ones are outstanding: the
// batches leave in order, their round trips overlap. A batch's events stay
// held until its commit is done; the hold is let go before a take whose
// snapshot sees that commit, never during one, so no take can see an event
// its commit delivered.
//
// While delivery yields to ingest (yield.go: the process is short of CPU,
// and resting makes the router handle more events), the loop rests after
// each batch instead, and takes the next one when the rest ends.
func (l *Loop) run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	var transit inTransitQueue
	defer transit.settle(ctx, l, 0)
	out := outageState{forget: l.forgetWaits}
	for {
		// Let go of the holds of batches already committed: this take's
		// snapshot will see them.
		transit.letGoFinished(ctx, l)
		pol := l.pol.Load()
		start, takeAt := time.Now(), l.e.now()
		b, err := l.takeAndSend(ctx, out.reach, out.probing)
		if err != nil && ctx.Err() == nil {
			l.e.log.Error("poll failed", "type", l.typ, "error", err)
		}
		taken, full := 0, false // takeAndSend returns a batch or an error, not both
		if b != nil {
			taken, full = len(b.items), b.full
			if !full && !b.pol.ByKey() { // the take's policy
				b.hurry = make(chan struct{})
			}
			transit.add(l.finishAsync(ctx, b))
		}
		l.e.metrics.polled(l.typ, taken, full)
		if taken > 0 && err == nil && l.restForIngest(ctx, timer, &transit, b, start) {
			out.goOn(&transit)
			continue
		}
		if full && l.drainOn(ctx, &transit, b, &out) {
			continue
		}
		transit.settle(ctx, l, 0)
		if ctx.Err() != nil || taken == 0 && l.retired.Load() && l.e.retire(l) {
			return
		}
		// A poll that met an outage and delivered nothing is not a full
		// one: the delay grows. So does a poll whose events all went back
		// with no attempt ended (a full storage budget requeues a
		// stateful plugin's events a second ahead): their next due time
		// does not shorten the wait, or the loop would rerun them every
		// second for as long as the disk stays full (a review).
		requeuedOnly, leftBefore := taken > 0 && transit.settled == 0, transit.leftBefore(takeAt)
		out.settled(&transit)
		d, backOff := l.nextDelay(full && !out.probing), out.probing || err != nil || l.e.takesNothing()
		if !backOff && !requeuedOnly {
			d = l.untilNextDue(d, pol, takeAt, leftBefore)
		}
		kicked, ok := l.wait(ctx, timer, d, backOff)
		if !ok {
			return
		}
		if kicked {
			out.kicked()
		}
	}
}

// drainOn settles the oldest batches in transit after a full batch b and
// reports whether the loop should take the next batch at once: a full
// batch says more is waiting, so the backlog drains now instead of at
// min's pace (docs/decisions/full-batch.md), with up to maxInTransit
// batches outstanding — one when a sink cannot keep batches in order by
// itself, or while probing an outage — unless the batches settled met an
// outage and delivered nothing.
func (l *Loop) drainOn(ctx context.Context, transit *inTransitQueue, b *batch, out *outageState) bool {
	keep := maxInTransit - 1
	if !b.sentInOrder || out.probing || b.state.any() {
		keep = 0 // a batch that used plugin state commits before the next runs its plugins
	}
	transit.settle(ctx, l, keep)
	if transit.stalled() || ctx.Err() != nil {
		return false
	}
	out.goOn(transit)
	l.nextDelay(true)
	return true
}

// outageState is what a loop's run remembers of the outages its polls met.
type outageState struct {
	// probing: the last poll met an outage and ended no event's attempt.
	// The loop sends one batch at a time, and probes once a second.
	probing bool
	// lastOutage is when a batch last met an outage: events it left to
	// wait one out (outageWait) are due within maxOutageWait of it.
	lastOutage time.Time
	// reach is how far ahead of now the next take looks: maxOutageWait
	// while probing and after a kick that follows an outage, so the
	// events that wait out an outage (outageWait) are taken too.
	reach time.Duration
	// forget ends the waits in memory (Loop.forgetWaits): whenever the loop
	// stops probing, and when a sink becomes reachable.
	forget func()
}

// note takes in whether the batches settled since the last look met an
// outage.
func (o *outageState) note(q *inTransitQueue) {
	if q.outage > 0 {
		o.lastOutage = time.Now()
	}
}

// goOn takes in what the batches settled met when the loop goes on at
// once (a full batch, a rest for ingest): it probes no more, and keeps
// looking ahead while what it took went out (the backlog a reconnect let
// go drains), not once a sink was still down (those events wait again).
func (o *outageState) goOn(q *inTransitQueue) {
	o.note(q)
	if q.outage > 0 {
		o.reach = 0
	}
	o.probing = false
	q.forget()
	o.forget()
}

// settled takes in what the batches settled since the last look met.
func (o *outageState) settled(q *inTransitQueue) {
	o.probing = q.stalled()
	o.note(q)
	q.forget()
	o.reach = 0
	if o.probing {
		o.reach = maxOutageWait
	} else {
		o.forget()
	}
}

// kicked: a sink became reachable. If this loop left events to wait out
// an outage, the next take also takes them. (A loop that left none keeps
// its retries' backoff: a kick is any sink's.)
func (o *outageState) kicked() {
	if time.Since(o.lastOutage) < maxOutageWait {
		o.reach = maxOutageWait
	}
	o.forget()
}

// wait sleeps until the next poll is due: after d, or sooner when a commit
// of this type wakes the loop or a sink it publishes to becomes reachable
// again (kicked). It returns ok false when ctx ends.
//
// After an outage or an error the loop backs off from new events (it
// ignores wake-ups), but probes again within outageProbe: a broker can come
// back without a reconnect to tell us (a cluster electing a new stream
// leader).
func (l *Loop) wait(ctx context.Context, timer *time.Timer, d time.Duration, backOff bool) (kicked, ok bool) {
	wake := l.wakeC
	l.backingOff.Store(backOff)
	if backOff {
		wake = nil
		d = min(d, outageProbe)
	}
	if d <= 0 && !backOff {
		// At once (untilNextDue): the next take sees what a wake-up
		// pending now says was stored, so it is taken here; left
		// pending, it would hurry the next outcome's commit that waits
		// for company (await), one commit more an event at a low rate.
		select {
		case <-l.kickC:
			return true, ctx.Err() == nil
		case <-wake:
		default:
		}
		return false, ctx.Err() == nil
	}
	timer.Reset(d)
	select {
	case <-ctx.Done():
		return false, false
	case <-timer.C:
	case <-wake:
		timer.Stop() // Go ≥ 1.23: no stale tick to drain
	case <-l.kickC:
		timer.Stop()
		return true, true
	}
	return false, true
}

// untilNextDue shortens the wait d to when the type's next event comes
// due (a retry's backoff ends), though not below polling.min: the
// adaptive delay grows while a type is idle (to polling.max, a minute by
// default), and a 1 s backoff waited a minute (a plugin author's trial).
// The next event is the first due after the poll took its batch (takeAt),
// not after now: a retry that came due while the batch was published and
// its outcome written waited the whole delay too (a reload trial: 60 s).
// Not with backoff off, whose retries are paced by the delay itself.
// Not while the loop backs off: during an outage the probes' cadence
// governs (the events that wait it out come due every second or so).
//
// After a poll that ended attempts, the events due when it took its
// batch (leftBefore; zero after a poll that ended none) that it did not
// take are taken at once: the next of a key's line, which waits for the
// outcome this poll recorded (ordering = "key": a burst of one key waited
// the growing delay before each event, 12 s for eight), and events a
// batch left for the next (outputsFull). A poll that ended nothing waits
// as before, so due events that stay behind (a line whose first event
// waits out a backoff, events noted in an outage) cost one more poll, not
// a spin. Events stored since the take wake the loop themselves: taken
// here, before their wake-up came, that wake-up would hurry their
// outcome's commit (await), one commit more an event at a low rate.
func (l *Loop) untilNextDue(d time.Duration, pol *config.Policy, takeAt, leftBefore time.Time) time.Duration {
	now := l.e.now()
	var next time.Time
	var ok, dueNow bool
	if err := l.e.store.View(func(tx *storage.Tx) error {
		if !leftBefore.IsZero() {
			if first, any := tx.FirstDue(l.typ); any && !first.After(leftBefore) {
				dueNow = true
				return nil
			}
		}
		from := takeAt
		if !pol.Backoff.Enabled {
			// Its retries come due at the commit that wrote them: from
			// the take, the poll's own would cut the wait to polling.min
			// every time, and the adaptive delay would never pace them
			// (a review).
			from = now
		}
		next, ok = tx.NextDue(l.typ, from)
		return nil
	}); err != nil {
		return d
	}
	switch {
	case dueNow:
		return 0
	case !ok:
		return d
	}
	return min(d, max(next.Sub(now), pol.Polling.Min))
}

// nextDelay feeds the adaptive delay a poll's outcome and returns the wait.
func (l *Loop) nextDelay(full bool) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.delay.Next(full)
}

// PollResult counts what one poll did.
type PollResult struct {
	Taken        int // events taken from the queue
	Delivered    int // every output acknowledged
	Filtered     int // the plugin chain returned no output: done, nothing sent
	Retried      int // rescheduled with backoff
	DeadLettered int // moved to the DLQ
	Requeued     int // outcome unknown: back to pending, no attempt counted
	Failed       int // outputs that failed, any reason

	failures []failure // retried and dead-lettered events, logged after the commit
}

// settled counts the events whose attempt the poll ended: delivered,
// filtered, retried or dead-lettered (not those requeued with no attempt).
func (r *PollResult) settled() int {
	return r.Delivered + r.Filtered + r.Retried + r.DeadLettered
}

// failure is one event's failed attempt, as the log tells it.
type failure struct {
	id       string
	attempts int
	next     time.Time // when it is tried again; zero when dead-lettered
	reason   string
}

// loggedFailures bounds the lines a loop writes a second of each kind of
// failure, retried and dead-lettered (a dead letter is never crowded out
// by retries); the rest are counted in one line a second after the first
// of them was held back, whether or not the loop fails more (an idle loop
// said nothing of them, a review), and every one is in its event's
// history and the metrics. A bound per batch did not hold the log: an
// inbox whose service failed took small batches many times a second, ~100
// lines a second (a soak trial).
const loggedFailures = 5

// failureSee is where each failed event is, when its line was held back.
const failureSee = "GET /v1/events/{id}, the DLQ, switchyard_retried_total, switchyard_dead_lettered_total"

// logFailures writes a WARN line per failed event of a committed batch,
// within the loop's budgets; sayHeld counts those held back.
func (l *Loop) logFailures(fs []failure, now time.Time) {
	held := false
	for _, f := range fs {
		if f.next.IsZero() {
			if l.deadLog.Take(now) {
				l.e.log.Warn("event dead-lettered", "type", l.typ, "event", f.id, "attempts", f.attempts, "reason", f.reason)
			} else {
				held = true
			}
			continue
		}
		if l.retryLog.Take(now) {
			// max: with backoff off the retry is due at once, when the
			// outcome was made, a moment before now.
			l.e.log.Warn("event failed; retrying", "type", l.typ, "event", f.id, "attempt", f.attempts,
				"retry_in", max(0, f.next.Sub(now)).Round(time.Millisecond), "error", f.reason)
		} else {
			held = true
		}
	}
	if held {
		l.sayHeldLater.After(time.Second, l.sayHeld)
	}
}

// sayHeld counts the failure lines logFailures held back.
func (l *Loop) sayHeld() {
	if n := l.retryLog.Held(); n > 0 {
		l.e.log.Warn("more events failed and are retried than were told", "type", l.typ, "more", n, "see", failureSee)
	}
	if n := l.deadLog.Held(); n > 0 {
		l.e.log.Warn("more events were dead-lettered than were told", "type", l.typ, "more", n, "see", failureSee)
	}
}

// Poll takes one batch of due events, publishes their outputs and commits
// the outcome. run does the same with batches overlapping; tests step a
// loop with Poll.
func (l *Loop) Poll(ctx context.Context) (PollResult, error) {
	b, err := l.takeAndSend(ctx, 0, false)
	if b == nil {
		return PollResult{}, err
	}
	defer l.letGo(b)
	return l.finish(ctx, b)
}

// takeAndSend takes up to a batch of due events (and of those that wait
// out an outage, due by now+reach: storage.Tx.Due), holds them,
// runs them through the plugin chain and sends their outputs. It returns
// nil when nothing is due.
func (l *Loop) takeAndSend(ctx context.Context, reach time.Duration, probe bool) (*batch, error) {
	if l.e.takesNothing() || ctx.Err() != nil {
		return nil, nil
	}
	pol := l.pol.Load()
	recs, forgets, full, err := l.takeDue(ctx, pol, reach, probe)
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	b := l.outputs(ctx, pol, recs)
	b.probe, b.forgets, b.full = probe, forgets, full
	b.send(l.e.sendContext(ctx), l.e.sinks())
	return b, nil
}

// takeDue reads up to a batch of due events (and of those that wait out
// an outage, due by now+reach) that the loop does not hold yet, and holds
// them. Those a probe met the outage with (waitInMemory) are taken apart:
// every other probe takes them first (takeProbed), the others take the
// rest first, each the other kind when it finds none. So probes reach new
// events, events to sinks that are up and due retries within two seconds,
// and go through the noted events a batch every two seconds however many
// new ones come, as they did when each probe wrote its events' waits
// behind them: a destination back without a reconnect to tell (a stream
// with room again, a new stream leader) is found by the first probe that
// takes one of its events.
func (l *Loop) takeDue(ctx context.Context, pol *config.Policy, reach time.Duration, probe bool) (recs []*storage.Record, forgets uint64, full bool, err error) {
	l.take.Lock()
	defer l.take.Unlock()
	if pol.ByKey() {
		if err := l.lines.lineUp(ctx, l.e, l.typ); err != nil {
			return nil, 0, false, err
		}
	}
	now, forgets := l.e.now(), l.forgetsNow()
	limit := l.takeLimit(pol)
	err = l.e.store.View(func(tx *storage.Tx) error {
		var err error
		rest := func() ([]*storage.Record, error) {
			return tx.Due(l.typ, now, reach, limit, pol.ByKey(), l.skips)
		}
		noted := func() ([]*storage.Record, error) { return l.takeProbed(tx, limit, pol, now, reach, forgets) }
		anyNoted, notedFirst := false, false
		if probe {
			anyNoted, notedFirst = l.probedTurn()
		}
		first, then := rest, noted
		if notedFirst {
			first, then = noted, rest
		}
		recs, err = first()
		if err == nil && len(recs) == 0 && anyNoted {
			recs, err = then()
		}
		return err
	})
	if err == nil {
		l.hold(recs)
	}
	return recs, forgets, limit.Reached(recs), err
}

// finish waits for a sent batch's acknowledgements and records its
// outcome. It does not let go of the batch's hold; the caller does.
func (l *Loop) finish(ctx context.Context, b *batch) (PollResult, error) {
	defer l.e.heldOutputs.Add(-b.held)
	b.await(l.e.metrics.observePublish)
	return l.commitBatch(ctx, b)
}

// commitBatch records a published batch's outcome in one transaction. It
// does not let go of the batch's hold; the caller does, with letGo.
//
// A commit that fails (a full disk, an I/O error) is tried again, the
// batch still held, until the policy's max_processing_time from when the
// batch was taken: the broker has the messages, and letting go of the batch would send them
// all again, past the broker's dedup window once the disk is full for
// longer than it. Past that, or when the loop stops, the events stay
// pending and are published again (at least once; receivers dedup by id),
// but for the outputs the recall answered for (Republish): those go back
// to it, and the next attempt records them instead of sending them.
func (l *Loop) commitBatch(ctx context.Context, b *batch) (PollResult, error) {
	var res PollResult
	outage, known := metOutages(b)
	outage = outage && b.probe && l.mayWait(b)
	if outage && known {
		res = PollResult{Taken: len(b.items), Requeued: len(b.items)} // nothing to write
	} else if err := l.record(ctx, b, &res); err != nil {
		return res, err
	}
	if outage {
		l.waitInMemory(b)
	}
	l.e.metrics.committed(l.typ, &res, b)
	l.e.yield.done.Add(int64(res.settled()))
	l.logFailures(res.failures, l.e.now())
	l.e.tail.published(l.typ, b, l.e.now())
	return res, nil
}

// record writes a batch's outcome (Loop.commit) in one transaction, tried
// again while the commit fails (retryCommit).
func (l *Loop) record(ctx context.Context, b *batch, res *PollResult) error {
	wctx := context.WithoutCancel(ctx)
	if b.hurry != nil {
		wctx = storage.Later(wctx, outcomeWait, b.hurry)
	}
	try := func() error {
		err := l.e.store.Update(wctx, func(tx *storage.Tx) error {
			*res = PollResult{Taken: len(b.items), Failed: b.failed}
			return l.commit(tx, b, res)
		})
		if errors.Is(err, storage.ErrUnconfirmed) {
			// Applied, on disk once a commit syncs: recorded again, an
			// attempt would count twice. If the disk loses it, a restart
			// sends the batch again (docs/decisions/disk-full.md).
			l.e.log.Warn("the disk did not confirm the commit of delivery outcomes; they stand", "type", l.typ, "events", len(b.items), "error", err)
			return nil
		}
		return err
	}
	err := retryCommit(ctx, b.taken.Add(b.pol.MaxProcessingTime), try, func(err error, wait time.Duration) {
		l.e.log.Warn("recording delivery outcomes failed; trying again, the batch held (not sent again)", "type", l.typ, "events", len(b.items), "retry_in", wait, "error", err)
	})
	if err != nil {
		for i := range b.items {
			l.e.recall.putBack(b.items[i].rec.Key(), b.items[i].outputs)
		}
		return fmt.Errorf("commit batch of %s: %w", l.typ, err)
	}
	return nil
}

// metOutages reports whether every event of b met an outage and nothing
// else (outage): its chain ran, used no plugin state, and each output it
// still owed was not sent (sink unavailable) or got no answer (outcome
// unknown); and whether the records already name each of those outages
// (known), so that writing the outcome would say nothing new. An outage
// of another kind than the record names is written, once.
func metOutages(b *batch) (outage, known bool) {
	if b.state.any() || len(b.items) == 0 {
		return false, false
	}
	known = true
	for i := range b.items {
		it := &b.items[i]
		if it.err != nil || len(it.outputs) == 0 {
			return false, false
		}
		for _, o := range it.outputs {
			kind := outageKind(o.result.Err)
			if kind == nil {
				return false, false
			}
			known = known && names(it.rec, o, kind)
		}
	}
	return true, known
}

// names reports whether rec's entry for o (setOutput) already names an
// outage of kind.
func names(rec *storage.Record, o *output, kind error) bool {
	for _, st := range rec.Outputs {
		if st.Destination == o.dest && st.MsgID == o.msg.MsgID {
			return !st.Delivered && strings.Contains(st.LastError, kind.Error())
		}
	}
	return false
}

// outageKind is the sentinel of an outage error (isOutage), nil for any
// other error.
func outageKind(err error) error {
	for _, kind := range []error{switchyard.ErrSinkUnavailable, switchyard.ErrUnknownOutcome, context.DeadlineExceeded} {
		if errors.Is(err, kind) {
			return kind
		}
	}
	return nil
}

// takeProbed takes up to a batch of the events probes met the outage with
// that no probe took or noted in this round, and begins a new round when
// there are none. An event noted in a round counts as taken in it, so new
// events that keep meeting the outage do not keep a round from ending:
// every noted event is taken again once a round.
func (l *Loop) takeProbed(tx *storage.Tx, limit storage.Limit, pol *config.Policy, now time.Time, reach time.Duration, forgets uint64) ([]*storage.Record, error) {
	recs, err := tx.Due(l.typ, now, reach, limit, pol.ByKey(), l.skipsInRound)
	if err == nil && len(recs) == 0 {
		l.newRound()
		recs, err = tx.Due(l.typ, now, reach, limit, pol.ByKey(), l.skipsInRound)
	}
	l.inRound(recs, forgets)
	return recs, err
}

// mayWait reports whether b's events may wait out an outage in memory:
// the waits were not forgotten since b was taken (a reload may have routed
// its events elsewhere, a reconnect ended the outage), and those not noted
// yet fit (maxWaits). A batch that may not is written as any other poll's.
func (l *Loop) mayWait(b *batch) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b.forgets != l.forgets {
		return false
	}
	n := 0
	for i := range b.items {
		if _, ok := l.probed[b.items[i].rec.Key()]; !ok {
			n++
		}
	}
	return len(l.probed)+n <= maxWaits
}

// waitInMemory notes the events of a probe all of which met an outage
// (metOutages): each waits behind the events no probe has met (takeDue),
// in memory. When their records already name those outages, commitBatch
// writes nothing: writing would rewrite a batch of records a second per
// type for as long as the outage lasts (248 KB/s for one type, measured:
// 21 GB a day of an edge device's flash). The first meeting is written,
// so the records say why the events wait; a restart, which forgets what
// was noted, takes them again.
func (l *Loop) waitInMemory(b *batch) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b.forgets != l.forgets {
		return // forgotten while the outcome was written (mayWait checked before)
	}
	for i := range b.items {
		l.noteLocked(b.items[i].rec.Key())
	}
}

// commitRetryFirst is retryCommit's first wait; each next one doubles, up
// to commitRetryMax.
var commitRetryFirst, commitRetryMax = 250 * time.Millisecond, 30 * time.Second

// retryCommit runs record until it succeeds, ctx ends, or the next try
// would come past deadline, waiting longer after each failure (told to
// failed). A record that does not decode (storage.ErrCorrupt) is not tried
// again: it would fail the same way.
func retryCommit(ctx context.Context, deadline time.Time, record func() error, failed func(error, time.Duration)) error {
	for wait := commitRetryFirst; ; wait = min(2*wait, commitRetryMax) {
		err := record()
		if err == nil || ctx.Err() != nil || errors.Is(err, storage.ErrCorrupt) || errors.Is(err, storage.ErrFileLost) || time.Now().Add(wait).After(deadline) {
			return err
		}
		failed(err, wait)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// inTransit is a sent batch whose acknowledgements and commit run while
// the loop takes the next.
type inTransit struct {
	b    *batch
	done chan struct{}
	res  PollResult
	err  error
}

func (l *Loop) finishAsync(ctx context.Context, b *batch) *inTransit {
	t := &inTransit{b: b, done: make(chan struct{})}
	go func() {
		t.res, t.err = l.finish(ctx, b)
		if t.err != nil {
			t.res = PollResult{} // not committed: nothing settled
		}
		close(t.done)
	}()
	return t
}

// await waits until t is finished. A wake-up meanwhile (an ingest of this
// type committed) hurries an outcome that waits for another write to share
// its commit (batch.hurry): the new events wait behind it, and the write it
// waits for came already. The wake-up stays for the loop's wait. So does
// the loop's end (ctx): a stop does not wait out outcomeWait.
func (l *Loop) await(ctx context.Context, t *inTransit) {
	if t.b.hurry == nil {
		<-t.done
		return
	}
	select {
	case <-t.done:
		return
	case <-l.wakeC:
		l.wake()
	case <-ctx.Done(): // the loop stops: the outcome waits for no company
	}
	close(t.b.hurry)
	<-t.done
}

func (t *inTransit) finished() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// inTransitQueue is a loop's batches in transit, oldest first, and what
// its settled batches met since the loop last forgot it.
type inTransitQueue struct {
	batches []*inTransit
	outage  int // outputs that met an outage (sink unavailable, outcome unknown)
	settled int // events whose attempt ended (PollResult.settled)
}

func (q *inTransitQueue) add(t *inTransit) { q.batches = append(q.batches, t) }

// leftBefore is untilNextDue's leftBefore for a poll that took its batch
// at takeAt: takeAt once the batches settled ended attempts, else zero.
func (q *inTransitQueue) leftBefore(takeAt time.Time) time.Time {
	if q.settled == 0 {
		return time.Time{}
	}
	return takeAt
}

// settle waits for the oldest batches until at most keep are left in
// transit and lets go of their holds.
func (q *inTransitQueue) settle(ctx context.Context, l *Loop, keep int) {
	for len(q.batches) > keep {
		t := q.batches[0]
		l.await(ctx, t)
		l.letGo(t.b)
		if t.err != nil && ctx.Err() == nil {
			l.e.log.Error("commit failed", "type", l.typ, "error", t.err)
		}
		q.outage += t.b.outage
		q.settled += t.res.settled()
		q.batches = q.batches[1:]
	}
}

// letGoFinished settles the oldest batches as long as they are done. (A
// newer batch that finished first keeps its hold until the older ones
// have: holds are let go in the order batches were taken.)
func (q *inTransitQueue) letGoFinished(ctx context.Context, l *Loop) {
	for len(q.batches) > 0 && q.batches[0].finished() {
		q.settle(ctx, l, len(q.batches)-1)
	}
}

// stalled reports whether the batches settled since the last forget met
// an outage and ended no event's attempt: the loop backs off and probes.
// (Some delivered: another sink is up, and the loop goes on; the events
// that met the outage wait behind, outageWait.)
func (q *inTransitQueue) stalled() bool { return q.outage > 0 && q.settled == 0 }

// forget starts counting afresh.
func (q *inTransitQueue) forget() { q.outage, q.settled = 0, 0 }

func (l *Loop) hold(recs []*storage.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range recs {
		l.held[r.Key()] = struct{}{}
	}
}

func (l *Loop) letGo(b *batch) {
	l.mu.Lock()
	for _, it := range b.items {
		delete(l.held, it.rec.Key())
	}
	l.mu.Unlock()
}

// item is one taken event and the outputs it still owes.
type item struct {
	rec     *storage.Record
	outputs []*output
	err     error // the plugin chain failed: no outputs were made
	// interrupted: the chain failed because the router began to stop (the
	// loop's context was cancelled under it): no attempt of the event's.
	interrupted bool
}

// output is one message for one sink, and what became of it.
type output struct {
	dest   string // "nats.local:orders"
	named  bool   // the plugin chain named dest (not the type's routes)
	sink   string
	msg    switchyard.Message
	event  switchyard.Event // the plugin chain's output event
	result switchyard.Result
	// recalled: the broker holds it already (Republish); recorded at its
	// position, not sent.
	recalled bool
}

// batch is a taken batch with its outputs grouped by sink.
type batch struct {
	pol    *config.Policy // as it was when the batch was taken
	taken  time.Time      // when, by the wall clock: its hold lasts max_processing_time from then
	items  []item
	bySink map[string][]*output
	failed int
	// outage counts the outputs that failed for the sink's sake, not the
	// event's: not sent (sink unavailable) or unknown outcome. Only these
	// make the loop back off: a poison event must not hold up its type.
	outage int
	// state is the plugin state overlay of the batch; nil without plugins.
	state *batchState
	// routes is pol's routes resolved (destinations), once per batch: most
	// outputs go along them.
	routes []dest
	// slab holds the batch's outputs, allocated together (newOutput).
	slab []output
	// held is the bytes of its outputs, counted in Engine.heldOutputs until
	// the batch is finished.
	held int64
	// probe: the loop took the batch while it backed off from an outage.
	probe bool
	// forgets is Loop.forgets when the take began.
	forgets uint64
	// full: the take stopped at its limit (storage.Limit.Reached: batch_size
	// events, or the bytes of outputs it may hold), not for want of due
	// events; more may be due.
	full bool
	// hurry is set when the run loop took the batch and it was not full,
	// not ordered by key (the next event of a key would wait for this
	// outcome): its outcome may wait outcomeWait for another write to share
	// its commit, and closing hurry ends the wait (Loop.await).
	hurry chan struct{}

	// Set by send, used by await.
	cancel      context.CancelFunc // ends the publish deadline
	waits       []sinkWait
	sentInOrder bool // every sink had the messages before send returned
}

// sinkWait is one sink's share of a sent batch, and how to learn its answers.
type sinkWait struct {
	sink  string
	outs  []*output
	start time.Time
	wait  func() []switchyard.Result
}

// outputs runs each event through the type's plugin chain (none: the event
// itself) and sends each result along its destination or the type's routes.
// Outputs acknowledged on an earlier attempt are left out; they are known by
// destination and message id, which are the same on every attempt as long
// as the plugins are deterministic. So are outputs the broker stored
// before an unclean stop without the router recording it (Republish): they
// are recorded at the broker's position, not sent.
func (l *Loop) outputs(ctx context.Context, pol *config.Policy, recs []*storage.Record) *batch {
	now := l.e.now()
	b := &batch{pol: pol, taken: time.Now(), items: make([]item, len(recs)), bySink: make(map[string][]*output)}
	plugins, release := l.e.takePlugins()
	defer release()
	chain, whole := plugins.chain(b.pol)
	if mayUseState(chain) {
		b.state = newBatchState(l.e, l.typ)
	}
	var outs []switchyard.PluginOutput // reused: each output is copied out below
	for i, rec := range recs {
		it := &b.items[i]
		it.rec = rec
		if !whole {
			// A reload between this batch's policy and its plugins:
			// taken again, the events meet both of the new configuration.
			it.err, it.interrupted = errPluginsReloaded, true
			continue
		}
		if err := l.outputsFull(b, i); err != nil {
			// The rest wait for the next batch, with no attempt counted:
			// what plugins may make of one event (max_outputs ×
			// max_output_bytes), times batch_size, is more memory than a
			// node has.
			it.err, it.interrupted = err, true
			continue
		}
		pctx := ctx
		if b.state != nil {
			pctx = switchyard.WithState(ctx, b.state.view(i, rec.Tenant))
		}
		var err error
		outs, err = l.e.runChain(pctx, l.typ, rec.Tenant, chain, &rec.Event, outs)
		if err != nil {
			it.err = err
			it.interrupted = errors.Is(ctx.Err(), context.Canceled) && !switchyard.IsPermanent(err)
			b.failed++
			continue
		}
		held := int64(l.route(b, it, outs, now))
		b.held += held
		l.e.heldOutputs.Add(held)
	}
	return b
}

// takeLimit is what a batch of pol may take: batch_size events, and no
// more once they hold the bytes of outputs a batch may still hold
// (maxBatchOutputBytes, and what is left of maxHeldOutputBytes; the first
// always). Events past it would wait for the next batch anyway
// (outputsFull), but read first: a poll of 200 events of 1 MB held 200 MB
// to run five.
func (l *Loop) takeLimit(pol *config.Policy) storage.Limit {
	return storage.Limit{Events: pol.BatchSize, Bytes: max(1, min(l.e.maxBatchOutputs(), l.e.opts.MaxHeldOutputBytes-l.e.heldOutputs.Load()))}
}

// outputsFull says why the batch b takes no more outputs before its event
// i, if it does not: its own outputs reached maxBatchOutputBytes, or those
// of every batch the router holds reached maxHeldOutputBytes. The first
// event of a batch always runs, so every batch makes progress.
func (l *Loop) outputsFull(b *batch, i int) error {
	switch {
	case i == 0:
		return nil
	case b.held >= l.e.maxBatchOutputs():
		return errBatchOutputsFull{l.e.maxBatchOutputs()}
	case l.e.heldOutputs.Load() >= l.e.opts.MaxHeldOutputBytes:
		return errHeldOutputsFull{l.e.opts.MaxHeldOutputBytes}
	}
	return nil
}

// route sends the chain's outputs of one item along their destinations
// (or the type's routes) into b, leaving out those acknowledged before,
// and returns the bytes they hold. An output with no destination it can
// reach fails the item, whose outputs then go back.
func (l *Loop) route(b *batch, it *item, outs []switchyard.PluginOutput, now time.Time) (held int) {
	rec := it.rec
	n := 0
	for _, po := range outs {
		dests, err := l.destinations(b, po.Destination)
		if errors.Is(err, errUnrouted) {
			l.e.metrics.unroutedOutput(l.typ)
		}
		if err != nil {
			it.err = fmt.Errorf("event %q: %w", rec.Event.ID, err)
			b.failed++
			break
		}
		for _, dest := range dests {
			msgID := rec.OutputMsgID(n)
			done := outputDelivered(rec, dest.full, msgID, n)
			n++
			if done {
				continue
			}
			o := b.newOutput()
			*o = output{dest: dest.full, sink: dest.sink, event: po.Event}
			o.named = po.Destination != ""
			held += po.Event.Bytes()
			o.msg = switchyard.Message{Event: &o.event, Topic: dest.topic, Key: po.Key, MsgID: msgID}
			o.result.Position, o.recalled = l.e.recall.take(rec.Key(), dest.full, msgID, o.event.ID, now)
			it.outputs = append(it.outputs, o)
		}
	}
	if it.err != nil {
		l.e.recall.putBack(rec.Key(), it.outputs)
		it.outputs = nil
		return held
	}
	for _, o := range it.outputs {
		if !o.recalled {
			b.bySink[o.sink] = append(b.bySink[o.sink], o)
		}
	}
	return held
}

// maxBatchOutputBytes bounds the bytes of outputs one batch holds until
// they are published: plugins within their limits (16 outputs of 1 MiB by
// default) made 3 GiB of a batch of 200 small events, and the router was
// killed for its memory, again at each start (an adversarial trial). The
// first event of a batch always runs, so every batch makes progress.
const maxBatchOutputBytes = 32 << 20

// maxHeldOutputBytes is Options.MaxHeldOutputBytes's default, the bound
// on the bytes of outputs all batches hold (every type's, up to
// maxInTransit each): per batch alone, ten busy types could hold 1.25 GiB.
// (A variable: a test lowers it.)
var maxHeldOutputBytes int64 = 64 << 20

// maxBatchOutputs is the bytes of outputs one batch may hold: what all
// may, at most maxBatchOutputBytes.
func (e *Engine) maxBatchOutputs() int64 {
	return min(maxBatchOutputBytes, e.opts.MaxHeldOutputBytes)
}

// errHeldOutputsFull is the reason of the events outputsFull leaves for the
// next batch while every batch together holds the bound.
type errHeldOutputsFull struct{ bound int64 }

func (e errHeldOutputsFull) Error() string {
	return fmt.Sprintf("left for the next batch: the router's batches hold %s of outputs not yet published", config.FormatSize(e.bound))
}

// errBatchOutputsFull is the reason of the events outputsFull leaves for
// the next batch once this one's outputs reached the bound.
type errBatchOutputsFull struct{ bound int64 }

func (e errBatchOutputsFull) Error() string {
	return fmt.Sprintf("left for the next batch: this batch's outputs reached %s", config.FormatSize(e.bound))
}

var errPluginsReloaded = errors.New("left for the next batch: a reload removed a plugin of its policy while it was taken")

// errUnrouted is an output with no destination of a type with no route:
// nothing would carry it. A reject, so that the event waits in the DLQ
// until the configuration gains a route (and an operator retries it),
// instead of being dropped.
var errUnrouted = switchyard.Permanentf("the output names no destination and the type has no route block: nothing would carry it " +
	"(add a route to the type, or have the plugin name a destination \"<sink>:<topic or subject>\"; then retry the event from the DLQ)")

// dest is a parsed destination.
type dest struct{ full, sink, topic string }

// destinations resolves a plugin output's destination: "" means the
// type's routes; otherwise "<sink>:<topic>", which runChain checked when
// the plugin named it (Engine.destination: a plugin naming nowhere a
// message can go is a reject, retrying cannot fix it). The result is
// shared: callers only read it.
func (l *Loop) destinations(b *batch, d string) ([]dest, error) {
	if d == "" {
		if len(b.pol.Routes) == 0 {
			return nil, errUnrouted
		}
		if b.routes == nil {
			b.routes = make([]dest, len(b.pol.Routes))
			for i, r := range b.pol.Routes {
				b.routes[i] = dest{full: r.Destination(), sink: r.To, topic: r.Target()}
			}
		}
		return b.routes, nil
	}
	sink, topic, _ := strings.Cut(d, ":")
	return []dest{{full: d, sink: sink, topic: topic}}, nil
}

// newOutput returns a zero output from the batch's slab, sized for one
// output per event and route: a batch of n events along its routes makes
// one allocation for its outputs, not n. Outputs are referenced by pointer
// (bySink, item.outputs), so a full slab is replaced, never grown in place;
// one after the first (a plugin that splits events) has room for 8 at
// least. The first holds no more than that estimate: an output is ~370
// bytes, and at a low rate each event is a batch of its own (8 to start
// with was 2.9 KB an event, ~6% of what a delivered event allocated at
// 500 events/s).
func (b *batch) newOutput() *output {
	if len(b.slab) == cap(b.slab) {
		n := max(len(b.items)*max(len(b.pol.Routes), 1), 1)
		if b.slab != nil {
			n = max(n, 8)
		}
		b.slab = make([]output, 0, n)
	}
	b.slab = b.slab[:len(b.slab)+1]
	return &b.slab[len(b.slab)-1]
}

// outputDelivered says whether rec's output n, msgID to dest, was
// acknowledged on an earlier attempt: under its id, or under an id it had
// before (storage.Record.EarlierOutputMsgIDs).
func outputDelivered(rec *storage.Record, dest, msgID string, n int) bool {
	if len(rec.Outputs) == 0 {
		return false // a first attempt
	}
	if delivered(rec, dest, msgID) {
		return true
	}
	return slices.ContainsFunc(rec.EarlierOutputMsgIDs(n), func(id string) bool { return delivered(rec, dest, id) })
}

func delivered(rec *storage.Record, dest, msgID string) bool {
	for _, o := range rec.Outputs {
		if o.Destination == dest && o.MsgID == msgID && o.Delivered {
			return true
		}
	}
	return false
}

// send hands every sink its messages, with the publish deadline
// (max_processing_time) running from now. A switchyard.Sender sink gets
// them before send returns, so the next batch goes out behind this one; any
// other sink publishes in a goroutine of its own, and the batch is not
// sentInOrder.
func (b *batch) send(ctx context.Context, sinks map[string]switchyard.Sink) {
	ctx, b.cancel = context.WithTimeout(ctx, b.pol.MaxProcessingTime)
	b.sentInOrder = true
	for name, outs := range b.bySink {
		msgs := make([]*switchyard.Message, len(outs))
		for i, o := range outs {
			msgs[i] = &o.msg
		}
		w := sinkWait{sink: name, outs: outs, start: time.Now()}
		if s, ok := sinks[name].(switchyard.Sender); ok {
			w.wait = s.Send(ctx, msgs)
		} else {
			b.sentInOrder = false
			w.wait = publishLater(ctx, sinks[name], msgs)
		}
		b.waits = append(b.waits, w)
	}
}

// publishLater starts s.Publish in a goroutine and returns how to wait
// for it.
func publishLater(ctx context.Context, s switchyard.Sink, msgs []*switchyard.Message) func() []switchyard.Result {
	ch := make(chan []switchyard.Result, 1)
	go func() { ch <- s.Publish(ctx, msgs) }()
	return func() []switchyard.Result { return <-ch }
}

// await waits for every sink's answers, concurrently, and counts the
// failures. A sink that overstays the deadline by abandonGrace is given up
// on: its outputs count as unknown.
func (b *batch) await(observe func(sink string, took time.Duration)) {
	defer b.cancel()
	var wg sync.WaitGroup
	for _, w := range b.waits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results := b.bounded(w)
			if observe != nil {
				observe(w.sink, time.Since(w.start))
			}
			for i, o := range w.outs {
				o.result = results[i]
			}
		}()
	}
	wg.Wait()
	for _, w := range b.waits {
		for _, o := range w.outs {
			if err := o.result.Err; err != nil {
				b.failed++
				if isOutage(err) {
					b.outage++
				}
			}
		}
	}
}

// bounded is w's answers, or unknown outcomes for all if the sink does not
// answer within abandonGrace after the deadline (or answers wrongly).
func (b *batch) bounded(w sinkWait) []switchyard.Result {
	n := len(w.outs)
	ch := make(chan []switchyard.Result, 1)
	go func() { ch <- w.wait() }()
	var r []switchyard.Result
	deadline := time.Until(w.start.Add(b.pol.MaxProcessingTime))
	grace := time.NewTimer(max(deadline, 0) + abandonGrace)
	defer grace.Stop()
	select {
	case r = <-ch:
	case <-grace.C:
		return unknown(n, fmt.Errorf("sink %s did not answer by the deadline: %w", w.sink, switchyard.ErrUnknownOutcome))
	}
	if len(r) != n {
		return unknown(n, fmt.Errorf("sink %s returned %d results for %d messages", w.sink, len(r), n))
	}
	return r
}

func unknown(n int, err error) []switchyard.Result {
	r := make([]switchyard.Result, n)
	for i := range r {
		r[i].Err = err
	}
	return r
}

// commit records a batch's outcome. Each event is read again inside the
// transaction: if it changed since the take (an operator moved it), its
// outcome is dropped, except that acknowledged outputs are still recorded.
func (l *Loop) commit(tx *storage.Tx, b *batch, res *PollResult) error {
	now := l.e.now()
	state := b.state.commit() // the plugin state writes that count (state.go)
	for i := range b.items {
		it := &b.items[i]
		rec, err := tx.Record(it.rec.Key())
		if errors.Is(err, storage.ErrNotFound) {
			if err := state.settle(tx, i, false); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		v := verdictOf(it, rec, b.pol.Plugins, now)
		rec.UpdatedAt = now
		if rec.State != storage.StatePending || rec.QueueSeq != it.rec.QueueSeq {
			// Moved since the take (an operator): keep the outputs only.
			if err := state.settle(tx, i, false); err != nil {
				return err
			}
			if err := tx.Save(rec); err != nil {
				return err
			}
			continue
		}
		if state.stale(i) {
			v = verdict{unknown: errStateNotCommitted}
		}
		// A republished event (after a power cut, engine.Republish) counted its
		// writes when it was delivered: they must not count twice.
		if err := state.settle(tx, i, v.final(rec.Attempts, b.pol.MaxRetries) && !republished(it.rec)); err != nil {
			return err
		}
		if v.succeeded() {
			abandonOutputs(rec, it)
		}
		if err := l.settle(tx, rec, v, b.pol, now, res); err != nil {
			return err
		}
	}
	return nil
}

// verdict is what one attempt at an event came to: the first of these
// that is set decides (settle).
type verdict struct {
	permanent, retry, unknown error
	retryAfter                time.Duration
	// wait delays an unknown outcome's next take (no attempt counted):
	// the storage budget was full under the plugin chain, or an output
	// met an outage (outageWait).
	wait time.Duration
}

// isOutage reports whether err is the sink's, not the event's: not sent
// (unavailable), or no answer by the deadline (unknown outcome). It counts
// no attempt, and the loop backs off (docs/decisions/outage-no-attempt.md).
func isOutage(err error) bool { return outageKind(err) != nil }

// succeeded reports whether the attempt delivered the event (or the chain
// filtered it).
func (v verdict) succeeded() bool {
	return v.permanent == nil && v.retry == nil && v.unknown == nil
}

// abandonOutputs marks the outputs an earlier attempt made that the one
// that succeeded did not (a reload changed the routes or the plugins):
// never delivered, they will not be, and the event's status says so
// instead of listing them as undelivered beside "delivered".
func abandonOutputs(rec *storage.Record, it *item) {
	for i := range rec.Outputs {
		o := &rec.Outputs[i]
		if !o.Delivered && !o.Abandoned && !it.made(o.Destination, o.MsgID) {
			o.Abandoned = true
		}
	}
}

// made reports whether the attempt made an output to dest with msgID.
func (it *item) made(dest, msgID string) bool {
	for _, o := range it.outputs {
		if o.dest == dest && o.msg.MsgID == msgID {
			return true
		}
	}
	return false
}

// storageFullWait is how long an event whose plugin met a full storage
// budget waits before it is taken again: a few of the budget's
// measurements (spaceEvery).
const storageFullWait = time.Second

// namedBy says which plugins of a chain named an output's destination, for
// its failure's reason: a plugin author reads that their own output chose
// it (a plugin author's trial had to guess).
func namedBy(chain []string) string {
	q := make([]string, len(chain))
	for i, p := range chain {
		q[i] = strconv.Quote(p)
	}
	if len(q) == 1 {
		return "plugin " + q[0]
	}
	return "the plugin chain " + strings.Join(q, " → ")
}

// verdictOf records the results of the item's outputs in rec and sums them up
// with the plugin chain's error (chain: the plugins that ran).
func verdictOf(it *item, rec *storage.Record, chain []string, now time.Time) verdict {
	var v verdict
	switch {
	case it.err == nil:
	case it.interrupted:
		v.unknown = it.err // requeued, as a publish cut short by the stop is
	case switchyard.ErrorCode(it.err) == switchyard.ESTORAGEFULL:
		// The router's budget, not the event: no attempt, a little later
		// (counted, a full budget dead-lettered the plugin events of
		// every type).
		v.unknown, v.wait = it.err, storageFullWait
	case switchyard.IsPermanent(it.err):
		v.permanent = it.err
	default:
		v.retry = it.err
	}
	for _, o := range it.outputs {
		err := o.result.Err
		setOutput(rec, o, now)
		where := o.dest
		if err != nil && o.named {
			where += " (named by " + namedBy(chain) + ")"
		}
		switch {
		case err == nil:
		case switchyard.IsPermanent(err):
			v.permanent = fmt.Errorf("%s: %w", where, err)
		case isOutage(err):
			v.unknown = fmt.Errorf("%s: %w", where, err)
			// A receiver that asked for a pause (webhook: 503) waits
			// it out, as for an outage.
			v.wait = max(v.wait, outageWait(rec, now), min(o.result.RetryAfter, switchyard.MaxRetryAfter))
		default:
			v.retry = fmt.Errorf("%s: %w", where, err)
			v.retryAfter = max(v.retryAfter, o.result.RetryAfter)
		}
	}
	return v
}

// settle writes the outcome of an attempt: dead-lettered, rescheduled with
// backoff (or dead-lettered past max_retries), requeued without an attempt
// when the outcome is unknown, or delivered.
func (l *Loop) settle(tx *storage.Tx, rec *storage.Record, v verdict, pol *config.Policy, now time.Time, res *PollResult) error {
	switch {
	case v.permanent != nil:
		rec.Attempts++
		rec.History = append(rec.History, storage.Attempt{At: now, Error: v.permanent.Error()})
		res.DeadLettered++
		reason := "rejected: " + v.permanent.Error()
		res.failures = append(res.failures, failure{id: rec.Event.ID, attempts: rec.Attempts, reason: reason})
		return tx.MoveToDLQ(rec, now, reason)
	case v.retry != nil:
		rec.Attempts++
		rec.LastError = v.retry.Error()
		rec.History = append(rec.History, storage.Attempt{At: now, Error: v.retry.Error()})
		if rec.Attempts > pol.MaxRetries {
			res.DeadLettered++
			reason := fmt.Sprintf("gave up after %s: %v", attempts(rec.Attempts), v.retry)
			res.failures = append(res.failures, failure{id: rec.Event.ID, attempts: rec.Attempts, reason: reason})
			return tx.MoveToDLQ(rec, now, reason)
		}
		res.Retried++
		// The receiver's Retry-After, when it asks for more than the
		// backoff (switchyard.MaxRetryAfter at most).
		next := now.Add(max(Backoff(pol.Backoff, rec.Attempts), min(v.retryAfter, switchyard.MaxRetryAfter)))
		res.failures = append(res.failures, failure{id: rec.Event.ID, attempts: rec.Attempts, next: next, reason: v.retry.Error()})
		return tx.Reschedule(rec, next)
	case v.unknown != nil:
		// Fail closed: the broker may or may not have it (or was not
		// reachable). Keep the event due, with the same id, and count no
		// attempt.
		rec.LastError = v.unknown.Error()
		res.Requeued++
		if v.wait > 0 {
			return tx.Reschedule(rec, now.Add(v.wait))
		}
		return tx.Save(rec)
	}
	// Done: a failed attempt on the way stays in the history (an outage,
	// which counted none, leaves no trace), not as the event's last error.
	rec.LastError = ""
	if !anyDelivered(rec.Outputs) { // the plugin chain returned nothing: filtered
		res.Filtered++
		return tx.MarkFiltered(rec, now, l.e.config().Outbox.TTL)
	}
	res.Delivered++
	return tx.MarkDelivered(rec, now, deliveredTTL(l.e.config()))
}

// anyDelivered reports whether any of outs was delivered.
func anyDelivered(outs []storage.Output) bool {
	for _, o := range outs {
		if o.Delivered {
			return true
		}
	}
	return false
}

// setOutput records an output's result in the event's output list.
func setOutput(rec *storage.Record, o *output, now time.Time) {
	var st *storage.Output
	for i := range rec.Outputs {
		if rec.Outputs[i].Destination == o.dest && rec.Outputs[i].MsgID == o.msg.MsgID {
			st = &rec.Outputs[i]
		}
	}
	if st == nil {
		rec.Outputs = append(rec.Outputs, storage.Output{Destination: o.dest, MsgID: o.msg.MsgID})
		st = &rec.Outputs[len(rec.Outputs)-1]
	}
	st.Abandoned = false // made again
	if o.result.Err != nil {
		st.LastError = o.result.Err.Error()
		return
	}
	// The position is the output's: nothing changes it once the sink has
	// answered, and sharing it spares an allocation per output.
	st.Delivered, st.DeliveredAt, st.Position, st.LastError = true, now, &o.result.Position, ""
}

// attempts is n attempts in words: "1 attempt", "4 attempts".
func attempts(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}
