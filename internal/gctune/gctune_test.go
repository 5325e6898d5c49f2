package gctune

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"testing"
	"time"
)

// Percent gives a small live heap the headroom, and a large one GOGC=100.
func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 6400},            // an empty heap counts as 1 MiB
		{1 * mib, 6400},      // next collection at 1 + 64 MiB
		{8 * mib, 800},       // at 8 + 64 MiB
		{32 * mib, 200},      // at 32 + 64 MiB
		{64 * mib, 100},      // at 128 MiB, as GOGC=100
		{512 * mib, 100},     // a large heap: as GOGC=100, never lower
		{3 * mib / 2, 4266},  // rounds down
		{100 * mib / 3, 192}, // rounds down
	} {
		if got := Percent(c.live, 64*mib); got != c.want {
			t.Errorf("Percent(%d MiB) = %d, want %d", c.live/mib, got, c.want)
		}
	}
}

// Limit holds the heap near its goal only while GOGC is raised.
func TestLimit(t *testing.T) {
	const mib = 1 << 20
	if got := Limit(8*mib, 10*mib, 32*mib, Percent(8*mib, 32*mib)); got != 66*mib {
		t.Errorf("Limit(8 MiB live, 10 MiB beyond the heap, 32 MiB headroom) = %d MiB, want 66", got/mib)
	}
	if got := Limit(64*mib, 10*mib, 32*mib, Percent(64*mib, 32*mib)); got != math.MaxInt64 {
		t.Errorf("Limit at GOGC=100 = %d, want none", got)
	}
}

// A ceiling (a cgroup's memory limit, less a margin) is the limit from the
// start and bounds every limit the tuner sets after, while it raises GOGC
// and at GOGC=100; an operator's GOMEMLIMIT is left alone.
func TestTheCeilingBoundsTheLimit(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	const ceiling = 48 << 20 // below this test's live heap plus 1.5 × 64 MiB
	stop := Start(64<<20, ceiling)
	if l := debug.SetMemoryLimit(-1); l != ceiling {
		stop()
		t.Fatalf("the limit before a collection is %d, want the ceiling %d", l, ceiling)
	}
	waitGOGC(t, 5*time.Second, func(p uint64) bool { return p > 100 })
	runtime.GC()
	if l := debug.SetMemoryLimit(-1); l > ceiling {
		stop()
		t.Fatalf("the limit after collections is %d, over the ceiling %d", l, ceiling)
	}
	stop()

	t.Setenv("GOMEMLIMIT", "1GiB")
	debug.SetMemoryLimit(1 << 30) // as the runtime reads it at start
	stop = Start(64<<20, ceiling)
	runtime.GC()
	l := debug.SetMemoryLimit(-1)
	stop()
	if l != 1<<30 {
		t.Fatalf("with GOMEMLIMIT set the limit is %d, want the operator's", l)
	}
	debug.SetMemoryLimit(math.MaxInt64)
}

func gogc() uint64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// waitGOGC collects until ok(GOGC) or d has passed, and returns GOGC.
func waitGOGC(t *testing.T, d time.Duration, ok func(uint64) bool) uint64 {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		runtime.GC()
		if p := gogc(); ok(p) || time.Now().After(deadline) {
			return p
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// After a collection the running tuner has raised GOGC for this test's
// small live heap, and stopping it puts GOGC back to 100.
func TestTunerFollowsCollections(t *testing.T) {
	t.Setenv("GOGC", "") // the tuner's own case: no operator setting
	stop := Start(64<<20, 0)
	if p := waitGOGC(t, 5*time.Second, func(p uint64) bool { return p > 100 }); p <= 100 {
		stop()
		t.Fatalf("GOGC = %d after collections with a small live heap, want more than 100", p)
	}
	if l := debug.SetMemoryLimit(-1); l == math.MaxInt64 {
		stop()
		t.Fatal("no memory limit while GOGC is raised")
	}
	stop()
	if p := gogc(); p != 100 {
		t.Fatalf("GOGC = %d after stop, want 100", p)
	}
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		t.Fatalf("memory limit %d after stop, want none", l)
	}
	// A stopped tuner does not come back at the next collections.
	if p := waitGOGC(t, 300*time.Millisecond, func(p uint64) bool { return p != 100 }); p != 100 {
		t.Fatalf("GOGC = %d after a stopped tuner's collections, want 100", p)
	}
}

// An operator's GOGC wins: Start leaves the collector alone.
func TestOperatorGOGCWins(t *testing.T) {
	t.Setenv("GOGC", "100")
	stop := Start(64<<20, 0)
	defer stop()
	if p := waitGOGC(t, 300*time.Millisecond, func(p uint64) bool { return p != 100 }); p != 100 {
		t.Fatalf("GOGC = %d with the GOGC variable set to 100", p)
	}
}

// An operator's GOMEMLIMIT wins over the tuner's limit: the tuner raises
// GOGC but leaves the memory limit to the runtime.
func TestOperatorGOMEMLIMITWins(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "1GiB") // read by the tuner; this process's runtime never saw it
	before := debug.SetMemoryLimit(-1)
	stop := Start(64<<20, 0)
	defer stop()
	if p := waitGOGC(t, 5*time.Second, func(p uint64) bool { return p > 100 }); p <= 100 {
		t.Fatalf("GOGC = %d with GOMEMLIMIT set, want the tuner's", p)
	}
	if l := debug.SetMemoryLimit(-1); l != before {
		t.Fatalf("memory limit %d, want the runtime's %d", l, before)
	}
}

// With much memory outside the heap (goroutine stacks: ~19 MiB here, less
// than the headroom, so that the tuner raises GOGC and sets its limit) the
// limit still leaves room for the headroom: allocating the same volume
// takes no more collections than at GOGC=100 or than the headroom allows
// (1 GiB / 32 MiB), whichever is more, give or take this machine's noise
// (bounded at twice that: on a loaded machine the count at GOGC=100 falls
// to 4–14 as the heap overshoots, while the tuned one stays near 33). A
// limit counted from the live heap alone made it 235–690. With 1500
// goroutines, as first written, the stacks alone outgrew the headroom, the
// tuner kept GOGC=100 and set no limit, and the test checked nothing.
func TestLimitCountsStacks(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 600 {
		wg.Go(func() { deepStack(64, release) })
	}
	defer func() { close(release); wg.Wait() }()
	cycles := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	var sink []byte
	allocate := func() uint64 { // 1 GiB in 64 KiB pieces
		runtime.GC()
		before := cycles()
		for range 1 << 14 {
			sink = make([]byte, 64<<10)
		}
		_ = sink
		return cycles() - before
	}
	plain := allocate()
	stop := Start(32<<20, 0)
	runtime.GC() // the tuner adjusts after each collection
	if p := waitGOGC(t, 5*time.Second, func(p uint64) bool { return p > 100 }); p <= 100 {
		stop()
		t.Fatalf("GOGC = %d: the tuner did not raise it, so its limit is not under test", p)
	}
	tuned := allocate()
	stop()
	t.Logf("collections for 1 GiB: %d at GOGC=100, %d tuned", plain, tuned)
	if tuned > 2*max(plain, 1<<30/(32<<20))+1 {
		t.Fatalf("%d collections with the tuner, %d at GOGC=100", tuned, plain)
	}
}

// deepStack grows its goroutine's stack by about depth × 512 bytes, then
// waits.
func deepStack(depth int, wait chan struct{}) byte {
	var pad [512]byte
	if depth == 0 {
		<-wait
		return pad[0]
	}
	return deepStack(depth-1, wait) + pad[depth%512]
}
