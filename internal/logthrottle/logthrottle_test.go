package logthrottle

import (
	"testing"
	"time"
)

// A Throttle lets one line per key through each second, and the next one
// says how many it held back; keys are counted apart.
func TestThrottleLetsOneLinePerSecond(t *testing.T) {
	var th Throttle
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := []struct {
		key  string
		at   time.Duration
		ok   bool
		held int
	}{
		{"storage_unavailable", 0, true, 0},
		{"storage_unavailable", 10 * time.Millisecond, false, 0},
		{"storage_unavailable", 500 * time.Millisecond, false, 0},
		{"internal", 600 * time.Millisecond, true, 0},
		{"storage_unavailable", 1000 * time.Millisecond, true, 2},
		{"storage_unavailable", 1500 * time.Millisecond, false, 0},
		{"storage_unavailable", 3 * time.Second, true, 1},
	}
	for _, s := range steps {
		held, ok := th.Take(s.key, t0.Add(s.at))
		if ok != s.ok || held != s.held {
			t.Errorf("%s at %v: %d, %v; want %d, %v", s.key, s.at, held, ok, s.held, s.ok)
		}
	}
}

// Every sets the interval: with a minute, a line a second later is held
// back, one a minute later goes through and counts it.
func TestThrottleEvery(t *testing.T) {
	th := Throttle{Every: time.Minute}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, ok := th.Take("k", t0); !ok {
		t.Fatal("first line held back")
	}
	if _, ok := th.Take("k", t0.Add(time.Second)); ok {
		t.Fatal("a line a second later let through")
	}
	if n, ok := th.Take("k", t0.Add(time.Minute)); !ok || n != 1 {
		t.Fatalf("a minute later: ok %v, held %d; want ok, 1", ok, n)
	}
}

// A budget lets its lines through in each window and counts the rest
// until Held says them, across windows.
func TestBudgetLetsSomeLinesPerWindow(t *testing.T) {
	b := Budget{Lines: 2}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := []struct {
		at   time.Duration
		ok   bool
		held int // Held after the take
	}{
		{0, true, 0},
		{10 * time.Millisecond, true, 0},
		{20 * time.Millisecond, false, 1},
		{900 * time.Millisecond, false, 1},
		{1000 * time.Millisecond, true, 0},
		{1001 * time.Millisecond, true, 0},
		{1002 * time.Millisecond, false, -1}, // not asked: counted on
		{999 * time.Millisecond, false, 2},   // earlier than the window: in it
		{5 * time.Second, true, 0},
	}
	for _, s := range steps {
		ok := b.Take(t0.Add(s.at))
		if ok != s.ok {
			t.Fatalf("at %s: ok %v, want %v", s.at, ok, s.ok)
		}
		if s.held >= 0 {
			if n := b.Held(); n != s.held {
				t.Fatalf("at %s: %d held, want %d", s.at, n, s.held)
			}
		}
	}
}

// Later runs its function once for any number of asks before the run,
// and again for an ask after it.
func TestLaterRunsOncePerBurst(t *testing.T) {
	var l Later
	runs := make(chan struct{}, 10)
	for range 5 {
		l.After(50*time.Millisecond, func() { runs <- struct{}{} })
	}
	<-runs
	time.Sleep(100 * time.Millisecond)
	if n := len(runs); n != 0 {
		t.Fatalf("%d more runs for one burst of asks", n)
	}
	l.After(time.Millisecond, func() { runs <- struct{}{} })
	select {
	case <-runs:
	case <-time.After(5 * time.Second):
		t.Fatal("an ask after the run was not run")
	}
}
