package engine_test

import (
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/engine"
)

var defaultPolling = config.Polling{Type: "adaptive", Min: 250 * time.Millisecond, Max: time.Minute, Multiplier: 1.5}

// simulate runs a loop that always finds an empty queue on a fake clock for
// d, and returns how many polls it made and when the delay first hit Max.
func simulate(p config.Polling, d time.Duration) (polls int, atMax time.Duration) {
	delay := engine.NewDelay(p)
	var now time.Duration
	atMax = -1
	for now < d {
		polls++
		wait := delay.Next(false)
		now += wait
		if wait == p.Max && atMax < 0 {
			atMax = now // the first full-length wait has passed
		}
	}
	return polls, atMax
}

// contract §5: an idle type at defaults polls about 70 times an hour (a fixed
// 250ms delay would poll 14,400 times) and reaches the 1m ceiling in about
// 3.5 minutes.
func TestAdaptiveDelayIdleHour(t *testing.T) {
	polls, atMax := simulate(defaultPolling, time.Hour)
	if polls < 65 || polls > 75 {
		t.Errorf("idle polls per hour = %d, want about 70", polls)
	}
	if atMax < 3*time.Minute || atMax > 4*time.Minute {
		t.Errorf("ceiling reached after %v, want about 3.5m", atMax)
	}
	fixed := defaultPolling
	fixed.Type = "fixed"
	if polls, _ := simulate(fixed, time.Hour); polls != 14400 {
		t.Errorf("fixed polls per hour = %d, want 14400", polls)
	}
	t.Logf("adaptive: %d polls/hour, at 1m after %v", polls, atMax)
}

// While every poll fills a batch the adaptive delay stays at its minimum,
// even after idle polls had grown it; a partial batch grows it again from
// there (250ms to 375ms).
func TestAdaptiveDelayBurstStaysAtMin(t *testing.T) {
	d := engine.NewDelay(defaultPolling)
	for range 10 {
		d.Next(false)
	}
	if d.Current() <= defaultPolling.Min {
		t.Fatalf("idle delay did not grow: %v", d.Current())
	}
	for i := range 100 {
		if got := d.Next(true); got != defaultPolling.Min {
			t.Fatalf("full batch %d: delay %v, want min", i, got)
		}
	}
	if got := d.Next(false); got != 375*time.Millisecond {
		t.Fatalf("after a partial batch: %v, want 375ms", got)
	}
}

// Retries wait delay × multiplier^(attempt-1) (10s, 30s, 90s); late
// attempts wait the longest wait, never a negative or overflowed one, and a
// disabled backoff waits nothing.
func TestBackoffSchedule(t *testing.T) {
	b := config.Backoff{Enabled: true, Delay: 10 * time.Second, Multiplier: 3}
	for attempt, want := range map[int]time.Duration{1: 10 * time.Second, 2: 30 * time.Second, 3: 90 * time.Second} {
		if got := engine.Backoff(b, attempt); got != want {
			t.Errorf("attempt %d: %v, want %v", attempt, got, want)
		}
	}
	// Late attempts wait the longest wait, never less: 10 s × 3^29 is past
	// what a Duration holds, and was converted to a negative one.
	for _, attempt := range []int{19, 20, 30, 1000} {
		if got := engine.Backoff(b, attempt); got < engine.Backoff(b, 18) || got > 100*365*24*time.Hour {
			t.Errorf("attempt %d: %v", attempt, got)
		}
	}
	b.Enabled = false
	if got := engine.Backoff(b, 2); got != 0 {
		t.Errorf("disabled backoff: %v", got)
	}
}
