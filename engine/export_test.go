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
