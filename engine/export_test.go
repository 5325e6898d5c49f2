package engine

import (
	"context"
	"time"
)

// ForceYield makes delivery yield to ingest for d, as if a trial had shown
// that it pays, so that a test can watch the loops rest.
func ForceYield(e *Engine, d time.Duration) {
	e.yield.mu.Lock()
	defer e.yield.mu.Unlock()
	e.yield.enter(yielding, time.Now().Add(d-yieldHold))
}

// MakeRoom takes one step of what the space loop does while the storage
// budget is full.
func MakeRoom(e *Engine) { e.makeRoom(context.Background()) }

// LiningUp reports whether a line-up of l's queue is under way (it holds
// the line-up's lock), so that a test can act while one waits.
func (l *Loop) LiningUp() bool {
	if l.lines.mu.TryLock() {
		l.lines.mu.Unlock()
		return false
	}
	return true
}

// SetMaxHeldOutputBytes lowers the bound on the outputs all batches hold
// until the test ends.
func SetMaxHeldOutputBytes(t interface{ Cleanup(func()) }, n int64) {
	old := maxHeldOutputBytes
	maxHeldOutputBytes = n
	t.Cleanup(func() { maxHeldOutputBytes = old })
}

// Noted is how many events l keeps waiting out an outage in memory, or
// took again as such in the current round (Loop.probed).
func (l *Loop) Noted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.probed)
}

// SetOutcomeWait sets how long a partial batch's outcome may wait for
// company (outcomeWait) until the test ends.
func SetOutcomeWait(t interface{ Cleanup(func()) }, d time.Duration) {
	old := outcomeWait
	outcomeWait = d
	t.Cleanup(func() { outcomeWait = old })
}

// UntilNextDue is l's untilNextDue for a poll that took its batch at
// takeAt and ended no attempt.
func (l *Loop) UntilNextDue(d time.Duration, takeAt time.Time) time.Duration {
	return l.untilNextDue(d, l.pol.Load(), takeAt, time.Time{})
}

// HasLoop reports whether the engine has a loop for queue t.
func HasLoop(e *Engine, t string) bool { return e.loopIfAny(t) != nil }

// SetDropLogEvery shortens how often an inbox says the redeliveries it
// dropped, for inboxes made until the test ends.
func SetDropLogEvery(t interface{ Cleanup(func()) }, d time.Duration) {
	old := dropLogEvery
	dropLogEvery = d
	t.Cleanup(func() { dropLogEvery = old })
}
