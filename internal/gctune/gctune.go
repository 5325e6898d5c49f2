// Package gctune gives the garbage collector a fixed headroom above a
// small live heap.
//
// With the default GOGC of 100 the collector runs whenever the heap has
// grown by as much as was live after the last collection. The router's
// live heap on the ingest path is a few megabytes while it allocates
// hundreds of megabytes a second (decoded events, encoded records, bbolt's
// nodes), so it collected ~100 times a second and marking was a tenth of
// its CPU (issue 14; docs/decisions/ingest-cost.md). After each
// collection the tuner sets GOGC so that the next one starts Headroom bytes
// past the live heap when that is later than GOGC=100 would start it, and
// leaves GOGC at 100 otherwise: a large live heap (the embedded JetStream
// server's duplicate window at 50k events/s) is collected as before, and
// the memory this costs is at most about 1.5 × headroom.
//
// GOGC set after a collection applies from the next one, and the tuner
// runs just after a collection (a cleanup), so a live heap that grew in
// between would meet the last, high GOGC for one cycle (with 64 MiB of
// headroom and no limit, the heap goal reached 193 MiB in such cycles).
// While it gives headroom the tuner therefore also sets a memory limit
// (debug.SetMemoryLimit) at the live heap plus 1.5 × headroom (plus what
// the runtime holds beyond the heap: stacks, its structures), which the
// runtime applies at once; at GOGC=100 it lifts the limit. A heap that
// outgrows the limit between two collections makes the next one come
// sooner (the runtime caps the collector at half the CPU), for that cycle
// only.
//
// An operator's GOGC environment variable wins: Start does nothing when it
// is set. An operator's GOMEMLIMIT wins too: the tuner then sets GOGC
// only, and the runtime keeps the operator's limit. Without one, a ceiling
// (the process's cgroup memory limit, less a margin: cmd/router) bounds
// every limit the tuner sets, and stands as the limit at GOGC=100
// (docs/decisions/memory-limit.md).
package gctune

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// DefaultHeadroom is the heap growth the router allows between
// collections while its live heap is under it.
// 32 MiB: measured against 16 and 64 (BENCHMARKS.md, "Issue 14, session
// 6"), 16 gave back less of the CPU on single-event requests, 64 no more
// than 32 on batches, for twice the memory.
const DefaultHeadroom = 32 << 20

// Percent is the GOGC that starts the next collection headroom bytes past
// the live heap, and never before GOGC=100 would. The runtime applies GOGC
// to scanned, the live heap plus the roots it scans (goroutine stacks,
// globals): the next collection starts scanned × GOGC/100 past the live
// heap. So: at least 100, and for an empty heap 100 × headroom / 1 MiB.
func Percent(scanned, headroom uint64) int {
	scanned = max(scanned, 1<<20)
	return int(max(100, headroom*100/scanned))
}

// Start runs the tuner until stop is called; it returns a stop that does
// nothing when the GOGC environment variable is set. ceiling (0: none)
// bounds the memory limits it sets.
func Start(headroom uint64, ceiling int64) (stop func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	if ceiling <= 0 {
		ceiling = math.MaxInt64
	}
	t := &tuner{headroom: headroom, sample: make([]metrics.Sample, len(sampled)),
		setLimit: os.Getenv("GOMEMLIMIT") == "", limit: math.MaxInt64, ceiling: ceiling}
	t.setMemoryLimit(math.MaxInt64) // the ceiling, until the first collection
	for i, name := range sampled {
		t.sample[i].Name = name
	}
	t.arm()
	return func() {
		t.mu.Lock() // a cleanup in adjust finishes first, and none follows
		defer t.mu.Unlock()
		t.stopped = true
		debug.SetGCPercent(100)
		if t.setLimit {
			debug.SetMemoryLimit(math.MaxInt64)
		}
	}
}

// Limit is the memory limit that holds the heap near its goal while GOGC
// is raised (percent > 100): the live heap plus 1.5 × headroom plus
// nonHeap, the memory the runtime counts against a limit beyond the heap
// (goroutine stacks, its own structures; without it, a router with many
// goroutines would collect on the limit far more often than at GOGC=100).
// At GOGC=100 there is no limit (math.MaxInt64).
func Limit(live, nonHeap, headroom uint64, percent int) int64 {
	if percent <= 100 {
		return math.MaxInt64
	}
	return int64(live + nonHeap + headroom + headroom/2)
}

// sampled are the runtime metrics adjust reads: the live heap and the roots
// GOGC applies to with it, and what makes up the memory a limit counts
// (total less released) besides the heap.
var sampled = [...]string{
	"/gc/heap/live:bytes",
	"/gc/scan/stack:bytes",
	"/gc/scan/globals:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
}

type tuner struct {
	headroom uint64
	sample   []metrics.Sample
	percent  int
	setLimit bool  // no GOMEMLIMIT from the operator
	limit    int64 // the limit last set
	ceiling  int64 // the most a limit may be
	mu       sync.Mutex
	stopped  bool
}

// sentinel is an object nobody keeps: its cleanup runs after the
// collection that found it unreachable, once per cycle (it is larger than
// the tiny allocator's 16 bytes, which batches small objects together).
type sentinel struct{ _ [32]byte }

func (t *tuner) arm() {
	runtime.AddCleanup(new(sentinel), func(t *tuner) {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.stopped {
			return
		}
		t.adjust()
		t.arm()
	}, t)
}

// adjust sets GOGC for the live heap the last collection left.
func (t *tuner) adjust() {
	metrics.Read(t.sample)
	var v [len(sampled)]uint64
	for i, s := range t.sample {
		if s.Value.Kind() != metrics.KindUint64 {
			return
		}
		v[i] = s.Value.Uint64()
	}
	live, scanned, total, heap := v[0], v[0]+v[1]+v[2], v[3], v[4]+v[5]+v[6]+v[7]
	p := Percent(scanned, t.headroom)
	l := min(Limit(live, total-min(heap, total), t.headroom, p), t.ceiling)
	// Whichever change tightens goes first, so that the heap goal never
	// passes either new bound in between.
	if l < t.limit {
		t.setMemoryLimit(l)
	}
	// Only a change of more than an eighth is worth telling the runtime,
	// and the return to 100 (where the limit is lifted) always is.
	if d := p - t.percent; d != 0 && (p == 100 || d > t.percent/8 || -d > t.percent/8) {
		t.percent = p
		debug.SetGCPercent(p)
	}
	if l > t.limit {
		t.setMemoryLimit(l)
	}
}

func (t *tuner) setMemoryLimit(l int64) {
	l = min(l, t.ceiling)
	t.limit = l
	if t.setLimit {
		debug.SetMemoryLimit(l)
	}
}
