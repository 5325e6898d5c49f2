// Package refusal keeps, for an inbox's source (NATS, Kafka), that the
// inbox refused its last batch, and when: the source is not healthy
// (/readyz, switchyard_inbox_up) while a refusal is recent, though its
// broker answers. A full storage budget refuses every batch, and the
// inbox said ok throughout (a NATS trial).
package refusal

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Fresh is how long a refusal counts: longer than the longest pause before
// the batch comes again (the sources' receive backoff, 30 s at most) and
// a pull's wait. A batch that does not come again (purged, deleted by
// retention, taken by another router) leaves the source unhealthy no
// longer. (A var: tests shorten it.)
var Fresh = time.Minute

// Recent is the last refusal, or none. Its zero value holds none.
type Recent struct{ p atomic.Pointer[refused] }

type refused struct {
	err error
	at  time.Time
}

// Set keeps err as the last refusal; nil clears it (a batch was taken).
func (r *Recent) Set(err error) {
	if err == nil {
		r.p.Store(nil)
		return
	}
	r.p.Store(&refused{err: err, at: time.Now()})
}

// Err says why the source does not consume while the last refusal is
// fresh; nil otherwise.
func (r *Recent) Err() error {
	p := r.p.Load()
	if p == nil || time.Since(p.at) >= Fresh {
		return nil
	}
	return fmt.Errorf("the last batch was not taken (it comes again after a pause): %w", p.err)
}
