// Package grace gives a closing step the least time it needs when the stop
// that runs it has less left: the data file's close (it removes the running
// mark, or the next start takes the stop for a crash) and an inbox leaving
// its consumer group (or the group waits out the member's session before it
// hands the partitions on). The unit file's TimeoutStopSec leaves room past
// -shutdown-timeout for these graces.
package grace

import (
	"context"
	"time"
)

// AtLeast is ctx, or, when ctx ends sooner than d from now (or has ended),
// a context with ctx's values that ends d from now.
func AtLeast(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); (ok && time.Until(dl) < d) || ctx.Err() != nil {
		return context.WithTimeout(context.WithoutCancel(ctx), d)
	}
	return context.WithCancel(ctx)
}
