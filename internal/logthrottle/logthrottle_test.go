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

// A budget lets its lines through in each window and counts the rest for
// the next line that goes through.
func TestBudgetLetsSomeLinesPerWindow(t *testing.T) {
	b := Budget{Lines: 2}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := []struct {
		at   time.Duration
		ok   bool
		held int
	}{
		{0, true, 0},
		{10 * time.Millisecond, true, 0},
		{20 * time.Millisecond, false, 0},
		{900 * time.Millisecond, false, 0},
		{1000 * time.Millisecond, true, 2},
		{1001 * time.Millisecond, true, 0},
		{1002 * time.Millisecond, false, 0},
		{999 * time.Millisecond, false, 0}, // earlier than the window: in it
		{5 * time.Second, true, 2},
		{5*time.Second + time.Millisecond, true, 0},
		{5*time.Second + 2*time.Millisecond, false, 0},
	}
	for _, s := range steps {
		held, ok := b.Take(t0.Add(s.at))
		if ok != s.ok || held != s.held {
			t.Fatalf("at %s: ok %v held %d, want %v %d", s.at, ok, held, s.ok, s.held)
		}
	}
	// Lines that stop: the count comes out once their window has passed.
	if n := b.Flush(t0.Add(5*time.Second + 500*time.Millisecond)); n != 0 {
		t.Fatalf("flushed %d inside the window", n)
	}
	if n := b.Flush(t0.Add(6 * time.Second)); n != 1 {
		t.Fatalf("flushed %d after the window, want 1", n)
	}
	if n := b.Flush(t0.Add(8 * time.Second)); n != 0 {
		t.Fatalf("flushed %d again", n)
	}
}
