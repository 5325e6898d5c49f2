// Package schedwait tells whether the process is short of CPU, from how
// long its runnable goroutines wait to run.
//
// The Go runtime keeps a histogram of the time goroutines spend runnable
// before they run (runtime/metrics "/sched/latencies:seconds"). While the
// process has the CPU it wants, a woken goroutine runs within tens of
// microseconds. When it does not, whether its own goroutines outnumber
// GOMAXPROCS or other processes hold the cores, the waits grow to
// milliseconds. Gauge compares the histogram with itself a moment ago and
// calls the process saturated when enough of the waits since then were
// long. It reads no file and works on every platform; reading the
// histogram costs a few microseconds, and a Gauge reads it at most once
// per window however often it is asked.
//
// docs/decisions/ingest-first.md says why the engine asks.
package schedwait

import (
	"runtime/metrics"
	"sync"
	"time"
)

const name = "/sched/latencies:seconds"

const (
	// window is the shortest interval a verdict covers. A window holds
	// thousands of scheduling events at the rates that saturate a small
	// machine.
	window = 20 * time.Millisecond
	// longWait is a wait that says the CPU is short: an unloaded process
	// wakes its goroutines in tens of microseconds. A wait counts as long
	// from the histogram's first bucket whose lower bound is at least
	// longWait (its buckets are a few percent wide).
	longWait = 500 * time.Microsecond
	// longShare is the share of long waits in a window that makes it
	// saturated.
	longShare = 0.05
	// stale: a previous reading older than this is no baseline (the
	// process was idle, nobody asked): the next ask starts a new window.
	stale = time.Second
)

// Gauge answers Saturated. Its zero value is ready; it is safe for
// concurrent use.
type Gauge struct {
	mu        sync.Mutex
	sample    []metrics.Sample
	prev      []uint64 // counts at the last reading
	longFrom  int      // the first bucket whose lower bound is >= longWait
	at        time.Time
	saturated bool
	last      Reading // the window of the last verdict
}

// Reading is the window a verdict came from.
type Reading struct {
	Waits uint64 // scheduling events sampled in the window
	Long  uint64 // of which waited at least longWait
}

// Saturated reports whether, in the last window, at least longShare of
// the goroutines that became runnable waited longWait or more for a CPU.
// It returns the last verdict while that is younger than window, and
// false when there is no recent baseline to compare with.
func (g *Gauge) Saturated() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if !g.at.IsZero() && now.Sub(g.at) < window {
		return g.saturated
	}
	counts := g.read()
	if counts == nil {
		return false
	}
	fresh := !g.at.IsZero() && now.Sub(g.at) < stale
	g.at = now
	if !fresh {
		copy(g.prev, counts)
		g.saturated = false
		return false
	}
	g.last = since(g.prev, counts, g.longFrom)
	copy(g.prev, counts)
	g.saturated = g.last.saturated(longShare)
	return g.saturated
}

// since is the window between two readings of the histogram: the waits
// counted in between, and those from bucket longFrom up.
func since(prev, counts []uint64, longFrom int) Reading {
	var r Reading
	for i, c := range counts {
		d := c - prev[i]
		r.Waits += d
		if i >= longFrom {
			r.Long += d
		}
	}
	return r
}

// saturated: at least share of the waits were long.
func (r Reading) saturated(share float64) bool {
	return r.Waits > 0 && float64(r.Long) >= share*float64(r.Waits)
}

// read takes the histogram's counts; the first call sizes the buffers.
func (g *Gauge) read() []uint64 {
	if g.sample == nil {
		g.sample = []metrics.Sample{{Name: name}}
	}
	metrics.Read(g.sample)
	if g.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil // a runtime without the metric: never saturated
	}
	h := g.sample[0].Value.Float64Histogram()
	if g.prev == nil {
		g.prev = make([]uint64, len(h.Counts))
		long := longWait.Seconds()
		g.longFrom = len(h.Counts)
		for i := range h.Counts {
			if h.Buckets[i] >= long {
				g.longFrom = i
				break
			}
		}
	}
	return h.Counts
}
