package grace

import (
	"context"
	"testing"
	"time"
)

// A context with time enough is kept; one ending sooner than d, or ended
// (cancelled without a deadline too), is replaced by one ending d from now.
func TestAtLeast(t *testing.T) {
	long, cancelLong := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLong()
	short, cancelShort := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancelShort()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for name, tc := range map[string]struct {
		ctx  context.Context
		want time.Duration // the least time left; 0: no deadline
	}{
		"long":      {long, 59 * time.Minute},
		"short":     {short, 900 * time.Millisecond},
		"cancelled": {cancelled, 900 * time.Millisecond},
		"none":      {context.Background(), 0},
	} {
		ctx, cancel := AtLeast(tc.ctx, time.Second)
		dl, ok := ctx.Deadline()
		switch {
		case ctx.Err() != nil:
			t.Errorf("%s: ended at once: %v", name, ctx.Err())
		case tc.want == 0 && ok:
			t.Errorf("%s: has a deadline %s away", name, time.Until(dl))
		case tc.want > 0 && (!ok || time.Until(dl) < tc.want || time.Until(dl) > tc.want+2*time.Minute):
			t.Errorf("%s: deadline %s away (set %v), want about %s", name, time.Until(dl), ok, tc.want)
		}
		cancel()
	}
}
