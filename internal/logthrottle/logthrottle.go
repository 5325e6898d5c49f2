// Package logthrottle keeps a repeating cause from flooding the log: a
// failing disk fails every request, a producer with a quirk sends it in
// every message, and each would log the same line.
package logthrottle

import (
	"sync"
	"time"
)

// Throttle lets one line per key and second (or Every) through, and counts
// the lines it held back since the last one let through. Keys are few
// (error codes, kinds of problem): each stays in the map for good.
type Throttle struct {
	Every time.Duration // zero: a second

	mu   sync.Mutex
	last map[string]time.Time
	held map[string]int
}

// Take says whether a line of key may be logged at now, and how many of
// its lines were held back since the last one (for a "like_it_since_last"
// field).
func (t *Throttle) Take(key string, now time.Time) (heldBack int, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last == nil {
		t.last, t.held = map[string]time.Time{}, map[string]int{}
	}
	every := t.Every
	if every == 0 {
		every = time.Second
	}
	if last, seen := t.last[key]; seen && now.Sub(last) < every {
		t.held[key]++
		return 0, false
	}
	n := t.held[key]
	t.last[key], t.held[key] = now, 0
	return n, true
}
