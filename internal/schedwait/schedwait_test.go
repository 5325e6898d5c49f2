package schedwait

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"
)

// A window is saturated when at least share of its waits reached the long
// bucket, counted from the difference between two readings.
func TestWindowVerdict(t *testing.T) {
	prev := []uint64{100, 50, 10, 0}
	for _, tc := range []struct {
		counts []uint64
		want   bool
	}{
		{[]uint64{1100, 50, 10, 0}, false},  // 1000 short waits
		{[]uint64{1100, 50, 60, 0}, true},   // 50 long of 1050: 4.8%
		{[]uint64{1100, 50, 10, 100}, true}, // 100 long of 1100
		{[]uint64{100, 50, 10, 0}, false},   // nothing happened
	} {
		r := since(prev, tc.counts, 2)
		if got := r.saturated(0.04); got != tc.want {
			t.Errorf("counts %v: %+v saturated = %v, want %v", tc.counts, r, got, tc.want)
		}
	}
}

// A process with far more runnable goroutines than GOMAXPROCS, each
// running for a millisecond at a time, is saturated: the gauge says so
// (within 250 windows, however slowly the machine runs them).
func TestGaugeSeesOverload(t *testing.T) {
	var g Gauge
	g.Saturated() // the baseline
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	for range min(8*runtime.GOMAXPROCS(0), 32) {
		wg.Go(func() {
			for ctx.Err() == nil {
				spin(time.Millisecond)
				time.Sleep(50 * time.Microsecond)
			}
		})
	}
	defer wg.Wait()
	for range 250 {
		time.Sleep(window)
		if g.Saturated() {
			stop()
			t.Logf("saturated: %+v", g.last)
			return
		}
	}
	stop()
	t.Fatalf("not saturated under overload in 250 windows; last window %+v", g.last)
}

func spin(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}
