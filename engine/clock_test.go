package engine

import (
	"sync"
	"testing"
	"time"
	"unsafe"
)

// stepBack is what time.Now returns after the system's wall clock was
// stepped back by d: the wall reading d earlier, the monotonic reading
// (which a step does not touch) as it was. time.Time is {wall uint64; ext
// int64; loc}; with a monotonic reading, wall holds the seconds since 1885
// in bits 30 to 62. (The box's own clock cannot be stepped in a test.)
func stepBack(t time.Time, d time.Duration) time.Time {
	w := (*uint64)(unsafe.Pointer(&t))
	*w -= uint64(d/time.Second) << 30
	return t
}

// A real step of the wall clock backwards (time.Now's values, which carry
// a monotonic reading) is taken up as a skew: before, Before and Sub
// compared the monotonic readings, which never go back, and the step went
// unseen (a review; the fake clock of the engine's tests has none).
func TestSteadyClockSeesARealStepBack(t *testing.T) {
	base := time.Now()
	if got := stepBack(base, time.Hour); base.Unix()-got.Unix() != 3600 {
		t.Fatalf("stepBack: %v -> %v", base, got)
	}
	var step time.Duration
	c := newSteadyClock(func() time.Time { return stepBack(time.Now(), step) }, time.Time{}, nil)
	first := c.now()
	step = time.Hour
	if second := c.now(); second.UnixNano() < first.UnixNano() {
		t.Errorf("the engine's clock went back %v: %v, then %v", time.Duration(first.UnixNano()-second.UnixNano()), first.UTC(), second.UTC())
	}
}

// Concurrent callers do not push the clock ahead of a wall clock that
// never went back: before, one that read the clock earlier but locked
// later looked like a step back (2 s ahead after 1.6 million calls from 8
// goroutines: a review).
func TestSteadyClockDoesNotDrift(t *testing.T) {
	c := newSteadyClock(time.Now, time.Time{}, nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50000 {
				c.now()
			}
		})
	}
	wg.Wait()
	if ahead := c.ahead(); ahead > time.Millisecond {
		t.Errorf("the wall clock never went back, yet the engine's clock is %v ahead of it", ahead)
	}
}

// A step back that is undone (a clock set wrong by hand, then put right)
// leaves the engine's clock where the wall clock is: before, the step
// stayed as a skew, and the engine ran ahead by it for as long as the
// process lived (what it stored then waited that long after a restart,
// and every record kept for a while expired that much sooner).
func TestSteadyClockCatchesUpWhenAStepBackIsUndone(t *testing.T) {
	var step time.Duration
	c := newSteadyClock(func() time.Time { return stepBack(time.Now(), step) }, time.Time{}, nil)
	c.now()
	step = time.Hour
	during := c.now()
	step = 0
	after := c.now()
	if ahead := after.Sub(time.Now()); ahead > time.Second {
		t.Errorf("the wall clock is back where it was, yet the engine's clock is %v ahead of it", ahead.Round(time.Second))
	}
	if after.Before(during) {
		t.Errorf("the engine's clock went back: %v, then %v", during.UTC(), after.UTC())
	}
}
