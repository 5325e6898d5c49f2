// Package stall says whether a sink's publishes are stalled: a publish
// reached its deadline with messages the broker had not answered, and none
// has been acknowledged since. A sink whose connection is up, but whose
// broker is hung (SIGSTOP, a full disk it blocks on) or refuses every
// publish in silence, says so in /readyz and switchyard_sink_up this way,
// and logs it once, rather than looking healthy (a broker trial found the
// NATS sink did not). One home for both sinks' tracking.
package stall

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// ErrStalled is what Err wraps while publishes are stalled.
var ErrStalled = errors.New("publishes stalled")

// Tracker is one sink's stall; its zero value is not stalled, and it needs
// Log set to log the changes.
type Tracker struct {
	Log hclog.Logger
	p   atomic.Pointer[info]
}

type info struct {
	since  time.Time
	misses int64 // messages whose outcome was unknown at a deadline
}

// Missed notes n messages left unanswered when a publish deadline passed
// (only a deadline: a cancelled caller says nothing about the broker).
//
// waited is how long the publish waited; timeout, the sink's own bound
// (publish_timeout): a wait cut shorter was the caller's deadline (a
// type's max_processing_time), and the log says so, where it named the
// sink's timeout (a reload trial's 1 ms logged "deadline=10s").
func (t *Tracker) Missed(n int64, waited, timeout time.Duration) {
	if n <= 0 {
		return
	}
	for {
		old := t.p.Load()
		st := &info{since: time.Now(), misses: n}
		if old != nil {
			st.since, st.misses = old.since, old.misses+n
		}
		if t.p.CompareAndSwap(old, st) {
			if old == nil && t.Log != nil {
				args := []any{"messages", n, "waited", waited.Round(time.Millisecond), "publish_timeout", timeout}
				if waited < timeout*9/10 {
					args = append(args, "note", "the caller's deadline (the type's max_processing_time) ended the wait before publish_timeout")
				}
				t.Log.Warn("publish deadline passed without broker acknowledgement; outcome unknown, sink marked unhealthy", args...)
			}
			return
		}
	}
}

// Acked notes an acknowledgement: the stall, if any, is over.
func (t *Tracker) Acked() {
	if t.p.Load() == nil {
		return // the common case: one atomic read
	}
	if old := t.p.Swap(nil); old != nil && t.Log != nil {
		t.Log.Info("broker acknowledges again; sink healthy",
			"stalled_for", time.Since(old.since).Round(time.Millisecond), "unknown_outcomes", old.misses)
	}
}

// Stalled says whether publishes are stalled now.
func (t *Tracker) Stalled() bool { return t.p.Load() != nil }

// Err is nil, or, while publishes are stalled, why, naming the sink.
func (t *Tracker) Err(sink string) error {
	st := t.p.Load()
	if st == nil {
		return nil
	}
	return fmt.Errorf("%s: %w: no acknowledgement since %s, %d messages with unknown outcome",
		sink, ErrStalled, st.since.UTC().Format(time.RFC3339), st.misses)
}
