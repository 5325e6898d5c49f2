package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Delivery yields the CPU to ingest while that makes the router handle
// more events in all (docs/decisions/ingest-first.md): a producer waits
// for its acknowledgement, a broker does not wait for its messages. While
// delivery yields, a loop sends one batch at a time and, after each, rests
// yieldRatio times as long as the batch took: it keeps at least
// 1/(1+yieldRatio) of its one-batch-at-a-time pace. The backlog it leaves
// is drained, in full batches, as soon as the requests stop, or within
// yieldHold once yielding stops paying.
const (
	yieldRatio = 3
	// maxRest bounds one rest, so a batch that waited long on a broker
	// does not stop delivery for long.
	maxRest = 50 * time.Millisecond
)

// The trial that decides whether delivery yields. Whether the CPU that
// delivery leaves pays depends on the producers and on what an event costs
// each way, which the router cannot see: clients that send batches as fast
// as they are answered store several events in the CPU time of one
// delivered; single events cost about as much each way, so yielding would
// trade delivered events for stored ones one for one; a fixed rate of
// requests takes nothing more, and delivery would only fall behind. So it
// tries: it counts the events handled (stored, and delivered or otherwise
// settled by the loops) in yieldPhase without yielding, then in yieldPhase
// yielding, and yields for yieldHold if that handled yieldGain more.
// A trial starts when the CPU gauge has found the process saturated at
// every check for yieldSustain: a moment of contention is not a burst.
// A trial costs delivery a phase at a quarter of its pace, so after one
// that did not pay it waits yieldHold before the next, twice as long after
// each further one, up to maxTrialWait; a trial that pays, or a minute
// without one, starts the count again.
const (
	yieldSustain = 100 * time.Millisecond
	yieldPhase   = 100 * time.Millisecond
	yieldHold    = 2 * time.Second
	yieldGain    = 1.3
	maxTrialWait = 16 * time.Second
)

// yieldPhaseKind is where the trial stands.
type yieldPhaseKind int

const (
	sharing   yieldPhaseKind = iota // no yield; a trial may start
	measuring                       // no yield: counting the base rate of events handled
	trying                          // yield: counting the rate it gives
	yielding                        // yield until the hold ends, then measure again
)

func (p yieldPhaseKind) String() string {
	return [...]string{"sharing", "measuring", "trying", "yielding"}[p]
}

// yieldTrial decides, for every loop of an engine, whether delivery yields
// now. It is driven by the loops' questions; between them it does nothing.
type yieldTrial struct {
	stored atomic.Int64 // events stored by Ingest
	done   atomic.Int64 // events the loops settled (PollResult.settled)

	mu    sync.Mutex
	phase yieldPhaseKind
	since time.Time     // the phase's start
	at    int64         // work() at the phase's start
	base  float64       // events handled per second in the last measuring phase
	wait  time.Duration // before the next trial, after one that did not pay
	hot   time.Time     // since when every check found the CPU saturated; zero: the last did not
	asked time.Time     // the last check of the CPU gauge
}

// yieldNow reports whether delivery yields at now. saturated is asked only
// when a trial could start (the CPU gauge is not free to read).
func (y *yieldTrial) yieldNow(now time.Time, saturated func() bool) bool {
	y.mu.Lock()
	defer y.mu.Unlock()
	in := now.Sub(y.since)
	switch y.phase {
	case sharing:
		if in >= time.Minute {
			y.wait = 0 // a long calm: the next trial waits yieldHold again
		}
		if in >= y.wait && y.sustained(now, saturated) {
			y.enter(measuring, now)
		}
	case measuring, trying:
		y.endPhase(now, in)
	case yielding:
		if in >= yieldHold {
			y.enter(measuring, now)
		}
	}
	return y.phase == trying || y.phase == yielding
}

// endPhase ends a measuring or trying phase that began in ago, once it has
// lasted yieldPhase: measuring gives the base rate and starts the trial;
// trying compares its rate with the base and yields, or waits for the next
// trial.
func (y *yieldTrial) endPhase(now time.Time, in time.Duration) {
	switch {
	case in > 2*yieldPhase:
		// Nobody asked for a while (the requests stopped, or the lag or the
		// budget held delivery back): the phase's count measures that
		// silence, not delivery. Start over.
		y.enter(sharing, now)
	case in < yieldPhase:
	case y.phase == measuring:
		y.base = y.rate(in)
		y.enter(trying, now)
	case y.rate(in) >= yieldGain*y.base && y.rate(in) > 0:
		y.wait = 0
		y.enter(yielding, now)
	default:
		y.wait = min(max(2*y.wait, yieldHold), maxTrialWait)
		y.enter(sharing, now)
	}
}

// sustained reports whether the CPU has been saturated at every check for
// yieldSustain, with no gap of more than half of it between two checks.
func (y *yieldTrial) sustained(now time.Time, saturated func() bool) bool {
	stale := !y.asked.IsZero() && now.Sub(y.asked) > yieldSustain/2
	y.asked = now
	if !saturated() || stale {
		y.hot = time.Time{}
		return false
	}
	if y.hot.IsZero() {
		y.hot = now
	}
	if now.Sub(y.hot) < yieldSustain {
		return false
	}
	y.hot = time.Time{}
	return true
}

// rate is the events handled per second in the phase so far, which began
// in ago.
func (y *yieldTrial) rate(in time.Duration) float64 {
	return float64(y.work()-y.at) / in.Seconds()
}

// work counts the events handled: stored, and delivered (or retried,
// dead-lettered...).
func (y *yieldTrial) work() int64 { return y.stored.Load() + y.done.Load() }

func (y *yieldTrial) enter(p yieldPhaseKind, now time.Time) {
	y.phase, y.since, y.at, y.hot = p, now, y.work(), time.Time{}
}

// yieldToIngest reports whether delivery should rest now, after a batch
// whose first event was lag late: the lag is under outbox.yield_lag, a
// request is being served, the data file is well inside its budget (past
// half of it, draining it matters more than producers' latency), and the
// trial says yielding makes the router handle more events. The lag bound
// keeps a sustained overload from growing the backlog without end: past it
// delivery takes its full share again, so the lag settles near yield_lag.
func (e *Engine) yieldToIngest(lag time.Duration) bool {
	cfg := e.config()
	if cfg.Outbox.YieldLag <= 0 || lag >= cfg.Outbox.YieldLag || e.opts.Saturated == nil || e.ingesting.Load() == 0 {
		return false
	}
	if !e.space.roomy(cfg.Storage) {
		return false
	}
	return e.yield.yieldNow(time.Now(), e.opts.Saturated)
}

// lag is how late the first event of b is: how long past its due time
// (NextAttemptAt, the queue's order: storage.Tx.InsertEvent sets it) it
// was taken.
func (b *batch) lag(now time.Time) time.Duration {
	return now.Sub(b.items[0].rec.NextAttemptAt)
}

// restForIngest rests after batch b, taken at start, while delivery yields
// to ingest: it waits for b's outcome first, so that the rest follows its
// commit. It reports whether the loop rested, and should take the next
// batch at once (the rest has filled it).
func (l *Loop) restForIngest(ctx context.Context, timer *time.Timer, transit *inTransitQueue, b *batch, start time.Time) bool {
	if !l.e.yieldToIngest(b.lag(l.e.now())) {
		return false
	}
	transit.settle(ctx, l, 0)
	if transit.stalled() || ctx.Err() != nil {
		return false // the outage path waits, or run returns
	}
	l.nextDelay(true)
	return l.rest(ctx, timer, time.Since(start))
}

// rest waits restAfter(took), deaf to wake-ups: new events are what
// ingest is writing, and the next poll takes them. It returns false when
// ctx ends.
func (l *Loop) rest(ctx context.Context, timer *time.Timer, took time.Duration) bool {
	d := restAfter(took)
	timer.Reset(d)
	select {
	case <-ctx.Done():
		timer.Stop()
		return false
	case <-timer.C:
	}
	l.e.metrics.yielded.WithLabelValues(l.typ).Add(d.Seconds())
	return true
}

// restAfter is the rest after a batch that took took: yieldRatio times as
// long, at most maxRest.
func restAfter(took time.Duration) time.Duration { return min(yieldRatio*took, maxRest) }
