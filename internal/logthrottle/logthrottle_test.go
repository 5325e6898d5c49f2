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
