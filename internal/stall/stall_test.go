package stall

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// A stall's one warning says how long the publish waited and the sink's
// own timeout, and names the caller's deadline when that ended the wait
// early (it said "deadline=10s" of a wait a 1 ms max_processing_time
// ended: a reload trial); an acknowledgement ends the stall.
func TestAStallSaysWhoseDeadlineItWas(t *testing.T) {
	for _, c := range []struct {
		waited time.Duration
		note   bool
	}{{time.Millisecond, true}, {10 * time.Second, false}} {
		var log bytes.Buffer
		tr := &Tracker{Log: hclog.New(&hclog.LoggerOptions{Output: &log})}
		tr.Missed(2, c.waited, 10*time.Second)
		tr.Missed(1, c.waited, 10*time.Second) // one warning per stall
		got := log.String()
		if !tr.Stalled() || strings.Count(got, "[WARN]") != 1 || !strings.Contains(got, "waited="+c.waited.String()) ||
			!strings.Contains(got, "publish_timeout=10s") || strings.Contains(got, "max_processing_time") != c.note {
			t.Errorf("waited %s: stalled %v, logged:\n%s", c.waited, tr.Stalled(), got)
		}
		if tr.Acked(); tr.Stalled() {
			t.Errorf("waited %s: stalled after an acknowledgement", c.waited)
		}
	}
}
