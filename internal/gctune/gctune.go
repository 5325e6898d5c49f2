// Package gctune gives the garbage collector a fixed headroom above a
// small live heap.
//
// With the default GOGC of 100 the collector runs whenever the heap has
// grown by as much as was live after the last collection. The router's
// live heap on the ingest path is a few megabytes while it allocates
// hundreds of megabytes a second (decoded events, encoded records, bbolt's
// nodes), so it collected ~100 times a second and marking was a tenth of
// its CPU (issue 14; docs/decisions/ingest-cost.md). After each
// collection Tuner sets GOGC so that the next one starts Headroom bytes
// past the live heap when that is later than GOGC=100 would start it, and
// leaves GOGC at 100 otherwise: a large live heap (the embedded JetStream
// server's duplicate window at 50k events/s) is collected as before, and
// the memory this costs is at most Headroom.
//
// An operator's GOGC environment variable wins: Start does nothing when it
// is set. GOMEMLIMIT still bounds the heap as usual.
package gctune

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// DefaultHeadroom is the heap growth the router allows between
// collections while its live heap is under it.
const DefaultHeadroom = 64 << 20

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
	t := &tuner{headroom: headroom, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	t.arm()
	return func() {
		t.stopped.Store(true)
		debug.SetGCPercent(100)
	}
}

type tuner struct {
	headroom uint64
	sample   []metrics.Sample
	percent  int
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
	p := Percent(t.sample[0].Value.Uint64(), t.headroom)
	// Only a change of more than an eighth is worth telling the runtime.
	if d := p - t.percent; d > t.percent/8 || -d > t.percent/8 {
		t.percent = p
		debug.SetGCPercent(p)
	}
}
