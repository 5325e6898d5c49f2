// Package logthrottle keeps a repeating cause from flooding the log: a
// failing disk fails every request, a producer with a quirk sends it in
// every message, and each would log the same line.
package logthrottle

import (
	"sync"
	"sync/atomic"
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

// Budget lets Lines lines through per window of Per (a second when zero),
// and counts the rest, for Held to say. For a cause whose lines each name
// something of their own (an event that failed), where one line per cause
// would hide all but one.
type Budget struct {
	Per   time.Duration
	Lines int

	mu    sync.Mutex
	start time.Time
	used  int
	held  int
}

// Take says whether a line at now goes through; one that does not is
// counted for Held.
func (b *Budget) Take(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.Sub(b.start) >= b.window() { // a time before start is in its window: callers race to the lock
		b.start, b.used = now, 0
	}
	if b.used >= b.Lines {
		b.held++
		return false
	}
	b.used++
	return true
}

// Held is how many lines Take held back since the last Held, which says
// them: the caller tells the count in a line of its own (Later), whether
// or not more lines come.
func (b *Budget) Held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.held
	b.held = 0
	return n
}

// window is Per, a second when zero.
func (b *Budget) window() time.Duration {
	if b.Per == 0 {
		return time.Second
	}
	return b.Per
}

// Later runs a function a while after it is asked to, once for every ask
// made before that run; an ask after it starts schedules another. A count
// of lines held back is so said even when no later line would carry it (a
// loop or an inbox gone idle after a burst).
type Later struct{ pending atomic.Bool }

// After runs fn wait from now, unless a run asked for earlier is still to
// come (then that one serves).
func (l *Later) After(wait time.Duration, fn func()) {
	if l.pending.CompareAndSwap(false, true) {
		time.AfterFunc(wait, func() {
			l.pending.Store(false) // first: a line held while fn runs asks again
			fn()
		})
	}
}
