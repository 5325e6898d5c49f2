package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/storage"
)

// trialClock steps a yieldTrial by hand, every 10ms, as producers and
// delivery would respond to it: events are stored (and delivered) at one
// rate while delivery shares the CPU and at another while it yields.
type trialClock struct {
	y       *yieldTrial
	now     time.Time
	sat     bool
	yielded bool // the last answer
}

// rates are events per second: stored by ingest, done by delivery.
type rates struct{ stored, done float64 }

// run steps for d; while delivery shares, events are stored at shared per
// second (and none delivered), while it yields at yielded. It returns the
// last answer.
func (c *trialClock) run(d time.Duration, shared, yielded float64) bool {
	return c.runRates(d, rates{stored: shared}, rates{stored: yielded})
}

// runRates is run with delivery too.
func (c *trialClock) runRates(d time.Duration, shared, yielded rates) bool {
	const step = 10 * time.Millisecond
	for range int(d / step) {
		r := shared
		if c.yielded {
			r = yielded
		}
		c.now = c.now.Add(step)
		c.y.stored.Add(int64(r.stored * step.Seconds()))
		c.y.done.Add(int64(r.done * step.Seconds()))
		c.yielded = c.y.yieldNow(c.now, func() bool { return c.sat })
	}
	return c.yielded
}

// warm is how long a saturated CPU takes to start a trial: yieldSustain,
// and the step that sees it.
const warm = yieldSustain + 10*time.Millisecond

func newTrialClock(saturated bool) *trialClock {
	return &trialClock{y: &yieldTrial{}, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), sat: saturated}
}

// A trial starts only when the CPU is saturated; while it is not, delivery
// never yields.
func TestYieldTrialNeedsSaturation(t *testing.T) {
	c := newTrialClock(false)
	if c.run(5*time.Second, 10_000, 20_000) || c.y.phase != sharing {
		t.Fatalf("yielded, or tried to, while the CPU gauge says it is not saturated (phase %v)", c.y.phase)
	}
}

// A CPU saturated now and then, not at every check for yieldSustain,
// starts no trial: a moment of contention is not a burst.
func TestYieldTrialNeedsSustainedSaturation(t *testing.T) {
	c := newTrialClock(true)
	for i := range 500 {
		c.sat = i%5 != 4 // saturated four checks (40ms) of five
		if c.run(10*time.Millisecond, 10_000, 20_000) || c.y.phase != sharing {
			t.Fatalf("a trial started on saturation that came and went (phase %v)", c.y.phase)
		}
	}
}

// When yielding lets more events in (closed-loop producers take the CPU
// delivery leaves), delivery keeps yielding for the hold, then measures
// again without yielding, and yields again.
func TestYieldTrialKeepsAYieldThatPays(t *testing.T) {
	c := newTrialClock(true)
	c.run(warm, 10_000, 14_000)
	if c.run(yieldPhase-10*time.Millisecond, 10_000, 14_000) { // measuring the base rate
		t.Fatal("yielded while measuring the base rate")
	}
	if !c.run(yieldPhase, 10_000, 14_000) || c.y.phase != trying {
		t.Fatalf("did not yield during the trial (phase %v)", c.y.phase)
	}
	if !c.run(yieldPhase, 10_000, 14_000) || c.y.phase != yielding {
		t.Fatalf("a trial that stored 40%% more did not lead to yielding (phase %v)", c.y.phase)
	}
	if !c.run(yieldHold-2*yieldPhase, 10_000, 14_000) {
		t.Fatal("stopped yielding before the hold ended")
	}
	c.run(2*yieldPhase, 10_000, 14_000)
	if c.y.phase != measuring {
		t.Fatalf("did not measure again after the hold (phase %v)", c.y.phase)
	}
	if !c.run(3*yieldPhase, 10_000, 14_000) {
		t.Fatal("did not yield again after a second trial that paid")
	}
}

// When yielding does not let more events in (a fixed rate of requests),
// delivery stops yielding after the trial and does not try again until
// the hold ends: at most one trial per yieldHold.
func TestYieldTrialDropsAYieldThatDoesNotPay(t *testing.T) {
	c := newTrialClock(true)
	c.run(warm, 10_000, 10_500)
	c.run(2*yieldPhase+20*time.Millisecond, 10_000, 10_500)
	if c.yielded || c.y.phase != sharing {
		t.Fatalf("a trial that stored 5%% more kept yielding (phase %v)", c.y.phase)
	}
	if c.run(yieldHold-40*time.Millisecond, 10_000, 10_500) || c.y.phase != sharing {
		t.Fatalf("tried again before the hold ended (phase %v)", c.y.phase)
	}
	c.run(40*time.Millisecond+warm, 10_000, 10_500)
	if c.y.phase != measuring {
		t.Fatalf("no new trial after the hold (phase %v)", c.y.phase)
	}
}

// Delivery does not trade its own events for ingest's one for one: a trial
// in which ingest stores 3k more events a second but delivery finishes 3k
// fewer does not lead to yielding (single events from closed-loop clients
// did that).
func TestYieldTrialCountsDelivery(t *testing.T) {
	c := newTrialClock(true)
	c.runRates(warm+2*yieldPhase+20*time.Millisecond, rates{10_000, 10_000}, rates{13_000, 7_000})
	if c.yielded || c.y.phase != sharing {
		t.Fatalf("yielded for a trial that handled no more events in all (phase %v)", c.y.phase)
	}
	c = newTrialClock(true)
	c.runRates(warm+2*yieldPhase+20*time.Millisecond, rates{100_000, 40_000}, rates{250_000, 12_000})
	if !c.yielded || c.y.phase != yielding {
		t.Fatalf("did not yield for a trial that handled 70%% more events in all (phase %v)", c.y.phase)
	}
}

// Rates, not counts, are compared: a trial asked about only after 190 ms
// (the loops' batches came slowly) does not look like a gain because it
// counted for longer than the measuring phase.
func TestYieldTrialComparesRates(t *testing.T) {
	c := newTrialClock(true)
	c.run(warm+yieldPhase+10*time.Millisecond, 10_000, 10_000) // measured; the trial begins
	if c.y.phase != trying {
		t.Fatalf("phase %v, want trying", c.y.phase)
	}
	c.now = c.now.Add(yieldPhase * 19 / 10) // asked again 190ms later, same rate
	c.y.stored.Add(1_900)
	if c.y.yieldNow(c.now, func() bool { return true }) {
		t.Fatalf("the same rate over a longer phase counted as a gain (phase %v)", c.y.phase)
	}
}

// A phase nobody asked about for more than twice its length (the requests
// stopped meanwhile) is dropped, not judged: the silence would make the
// next burst look like a gain, and yield for 2 s untested.
func TestYieldTrialStartsOverAfterASilence(t *testing.T) {
	for _, ph := range []yieldPhaseKind{measuring, trying} {
		c := newTrialClock(true)
		c.run(warm, 10_000, 10_000)
		if ph == trying {
			c.run(yieldPhase, 10_000, 10_000)
		}
		if c.y.phase != ph {
			t.Fatalf("phase %v, want %v", c.y.phase, ph)
		}
		c.now = c.now.Add(time.Second) // nobody asks: the burst is over
		if c.run(10*time.Millisecond, 50_000, 50_000) || c.y.phase != sharing {
			t.Fatalf("%v: after a silence, phase %v; want sharing", ph, c.y.phase)
		}
	}
}

// Saturation must be seen at regular checks: two saturated readings half
// a second apart, with nothing asked in between, start no trial.
func TestYieldTrialSustainedMeansRegularChecks(t *testing.T) {
	c := newTrialClock(true)
	c.run(10*time.Millisecond, 10_000, 10_000) // the first saturated check
	c.now = c.now.Add(500 * time.Millisecond)
	if c.run(10*time.Millisecond, 10_000, 10_000) || c.y.phase != sharing {
		t.Fatalf("a trial started on two checks 500ms apart (phase %v)", c.y.phase)
	}
}

// Trials that do not pay come further apart: yieldHold after the first,
// twice as long after each further one, up to maxTrialWait; one that pays
// starts the count again.
func TestYieldTrialBacksOff(t *testing.T) {
	c := newTrialClock(true)
	var starts []time.Duration
	begin := c.now
	last := c.y.phase
	for range 6000 { // a minute, 10ms a step
		c.run(10*time.Millisecond, 10_000, 10_000)
		if c.y.phase == measuring && last != measuring {
			starts = append(starts, c.now.Sub(begin))
		}
		last = c.y.phase
	}
	var gaps []time.Duration
	for i := 1; i < len(starts); i++ {
		gaps = append(gaps, (starts[i] - starts[i-1] - 2*yieldPhase - yieldSustain).Round(100*time.Millisecond))
	}
	want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 16 * time.Second}
	if len(gaps) < len(want) {
		t.Fatalf("trials at %v: want waits of %v between them", starts, want)
	}
	for i, w := range want {
		if gaps[i] != w {
			t.Fatalf("waits between trials %v, want %v", gaps, want)
		}
	}
	// Now yielding pays: the next trial keeps it, and resets the wait.
	c.run(maxTrialWait+warm+2*yieldPhase+20*time.Millisecond, 10_000, 20_000)
	if c.y.phase != yielding || c.y.wait != 0 {
		t.Fatalf("phase %v, wait %v after a trial that paid; want yielding, 0", c.y.phase, c.y.wait)
	}
}

// yieldToIngest's bounds, each on its own: delivery yields only while it
// is less than yield_lag behind ("0s": never), a request is being served,
// and the data file is inside half its budget.
func TestYieldToIngestBounds(t *testing.T) {
	newEngine := func(yieldLag time.Duration, st *spaceState) *Engine {
		e := &Engine{opts: Options{Saturated: func() bool { return true }}}
		cfg := &config.Config{Outbox: config.Outbox{YieldLag: yieldLag}, Storage: config.Storage{MaxSize: 1000, MinFree: 100}}
		e.conf.Store(cfg)
		e.space = &spaceWatch{}
		e.space.state.Store(st)
		e.yield.enter(yielding, time.Now().Add(time.Hour)) // the trial says it pays
		e.ingesting.Add(1)
		return e
	}
	roomy := &spaceState{measured: true, space: storage.Space{Used: 400, DiskFree: 1000}}
	for _, tc := range []struct {
		name string
		e    *Engine
		lag  time.Duration
		want bool
	}{
		{"inside every bound", newEngine(10*time.Second, roomy), 9 * time.Second, true},
		{"yield_lag behind", newEngine(10*time.Second, roomy), 10 * time.Second, false},
		{"yield_lag 0s, even with a clock stepped back", newEngine(0, roomy), -time.Second, false},
		{"half of max_size used", newEngine(10*time.Second, &spaceState{measured: true, space: storage.Space{Used: 500, DiskFree: 1000}}), 0, false},
		{"under twice min_free on the disk", newEngine(10*time.Second, &spaceState{measured: true, space: storage.Space{Used: 400, DiskFree: 199}}), 0, false},
		{"the budget is full", newEngine(10*time.Second, &spaceState{measured: true, full: errors.New("full")}), 0, false},
		{"a failed measurement cannot tell", newEngine(10*time.Second, &spaceState{}), 0, true},
	} {
		if got := tc.e.yieldToIngest(tc.lag); got != tc.want {
			t.Errorf("%s: yieldToIngest = %v, want %v", tc.name, got, tc.want)
		}
	}
	idle := newEngine(10*time.Second, roomy)
	idle.ingesting.Add(-1)
	if idle.yieldToIngest(0) {
		t.Error("yielded with no request being served")
	}
}

// A loop that yields rests three times as long as its batch took, so it
// keeps at least a quarter of its pace, and never more than maxRest.
func TestRestAfter(t *testing.T) {
	for _, tc := range []struct{ took, want time.Duration }{
		{0, 0},
		{4 * time.Millisecond, 12 * time.Millisecond},
		{16 * time.Millisecond, 48 * time.Millisecond},
		{17 * time.Millisecond, maxRest},
		{time.Second, maxRest},
	} {
		if got := restAfter(tc.took); got != tc.want {
			t.Errorf("restAfter(%v) = %v, want %v", tc.took, got, tc.want)
		}
	}
	if maxRest != 50*time.Millisecond {
		t.Errorf("maxRest = %v; policies.hcl and docs/decisions/ingest-first.md say 50ms", maxRest)
	}
}
