package engine

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/storage"
)

// A take that does not fit takes nothing, whatever else is in flight: two
// refusals overlapping leave the bucket as it was, a take given back after
// another's refusal comes back whole, and a clock read that goes back
// adds nothing. (golang.org/x/time/rate's Reserve and Cancel, used first,
// left -5 of 10 after two overlapping refusals, gave back 5 of 10 after a
// refusal, and let 195 events through in a second at 100 a second.)
func TestBucketTakesOnlyWhatFits(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := newBucket(config.TenantLimit{Rate: 10, Burst: 20}, t0)
	if wait, never := b.take(10, t0); wait != 0 || never {
		t.Fatal("10 of 20")
	}
	for range 2 { // two of 15, each refused
		if wait, _ := b.take(15, t0); wait != 500*time.Millisecond {
			t.Fatalf("15 with 10 held at 10 a second: wait %v", wait)
		}
	}
	if wait, _ := b.take(10, t0); wait != 0 {
		t.Fatalf("10 after two refusals: wait %v, want the 10 still there", wait)
	}
	b.give(10) // the last take's request failed
	if wait, _ := b.take(10, t0); wait != 0 {
		t.Fatalf("10 given back: wait %v", wait)
	}
	late := t0.Add(time.Second) // 10 more
	earlier := t0.Add(500 * time.Millisecond)
	if wait, _ := b.take(10, late); wait != 0 {
		t.Fatalf("10 after a second: wait %v", wait)
	}
	if wait, _ := b.take(1, earlier); wait == 0 {
		t.Fatal("a clock read from before the last took an event the bucket did not hold")
	}
	if _, never := b.take(21, late); !never {
		t.Fatal("21 of a bucket of 20")
	}
}

// Requests at once cannot take more than the bucket holds.
func TestBucketConcurrentTakes(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := newBucket(config.TenantLimit{Rate: 1, Burst: 100}, now)
	var taken atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 50 {
				if wait, never := b.take(1, now); !never && wait == 0 {
					taken.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := taken.Load(); got != 100 {
		t.Errorf("%d events taken from a bucket of 100", got)
	}
}

// A request that fails after its take gives its events back, unless its
// events may be stored: a commit the disk did not confirm keeps them
// charged (its client may not send them again).
func TestWhatARefusedRequestGivesBack(t *testing.T) {
	for _, c := range []struct {
		err  error
		back bool
	}{
		{switchyard.Errorf(switchyard.EUNKNOWNTYPE, "no block"), true},
		{unavailable(errors.New("disk gone")), true},
		{unavailable(storage.ErrUnconfirmed), false},
		{unavailable(fmt.Errorf("commit: %w", storage.ErrUnconfirmed)), false},
	} {
		if got := givesBack(c.err); got != c.back {
			t.Errorf("givesBack(%v) = %v, want %v", c.err, got, c.back)
		}
	}
}
