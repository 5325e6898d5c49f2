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
// (debug.SetMemoryLimit) at the live heap plus 1.5 × headroom, which the
// runtime applies at once; at GOGC=100 it lifts the limit. A heap that
// outgrows the limit between two collections makes the next one come
// sooner (the runtime caps the collector at half the CPU), for that cycle
// only.
//
// An operator's GOGC environment variable wins: Start does nothing when it
// is set. An operator's GOMEMLIMIT wins too: the tuner then sets GOGC
// only, and the runtime keeps the operator's limit.
package gctune

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// DefaultHeadroom is the heap growth the router allows between
// collections while its live heap is under it.
// 32 MiB: measured against 16 and 64 (BENCHMARKS.md, "Issue 14, session
// 6"), 16 gave back less of the CPU on single-event requests, 64 no more
// than 32 on batches, for twice the memory.
const DefaultHeadroom = 32 << 20

// Percent is the GOGC that starts the next collection headroom bytes past
// a live heap of live bytes, and never above GOGC=100's start: at least
// 100, and for an empty heap 100 × headroom / 1 MiB.
func Percent(live, headroom uint64) int {
	live = max(live, 1<<20)
	return int(max(100, headroom*100/live))
}

// Start runs the tuner until stop is called; it returns a stop that does
// nothing when the GOGC environment variable is set.
func Start(headroom uint64) (stop func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	t := &tuner{headroom: headroom, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}},
		setLimit: os.Getenv("GOMEMLIMIT") == "", limit: math.MaxInt64}
	t.arm()
	return func() {
		t.stopped.Store(true)
		debug.SetGCPercent(100)
		if t.setLimit {
			debug.SetMemoryLimit(math.MaxInt64)
		}
	}
}

// Limit is the memory limit that holds the heap near its goal while GOGC
// is raised (percent > 100): the live heap plus 1.5 × headroom (the goal
// is the live heap plus headroom; the rest is for what the runtime counts
// beyond the heap: stacks, its own structures). At GOGC=100 there is no
// limit (math.MaxInt64).
func Limit(live, headroom uint64, percent int) int64 {
	if percent <= 100 {
		return math.MaxInt64
	}
	return int64(live + headroom + headroom/2)
}

type tuner struct {
	headroom uint64
	sample   []metrics.Sample
	percent  int
	setLimit bool  // no GOMEMLIMIT from the operator
	limit    int64 // the limit last set
	stopped  atomic.Bool
}

// sentinel is an object nobody keeps: its cleanup runs after the
// collection that found it unreachable, once per cycle (it is larger than
// the tiny allocator's 16 bytes, which batches small objects together).
type sentinel struct{ _ [32]byte }

func (t *tuner) arm() {
	runtime.AddCleanup(new(sentinel), func(t *tuner) {
		if t.stopped.Load() {
			return
		}
		t.adjust()
		t.arm()
	}, t)
}

// adjust sets GOGC for the live heap the last collection left.
func (t *tuner) adjust() {
	metrics.Read(t.sample)
	if t.sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	live := t.sample[0].Value.Uint64()
	p := Percent(live, t.headroom)
	l := Limit(live, t.headroom, p)
	// Whichever change tightens goes first, so that the heap goal never
	// passes either new bound in between.
	if l < t.limit {
		t.setMemoryLimit(l)
	}
	// Only a change of more than an eighth is worth telling the runtime.
	if d := p - t.percent; d > t.percent/8 || -d > t.percent/8 {
		t.percent = p
		debug.SetGCPercent(p)
	}
	if l > t.limit {
		t.setMemoryLimit(l)
	}
}

func (t *tuner) setMemoryLimit(l int64) {
	t.limit = l
	if t.setLimit {
		debug.SetMemoryLimit(l)
	}
}
