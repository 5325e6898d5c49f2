package wasm

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/config"
)

// A plugin's memory grows in place up to its limit on Linux: no byte
// moves (a grow that copied into fresh pages cost a C plugin growing 1 MiB
// at a time 117 ms, past its 50 ms timeout), what was written stays, a
// grow past the limit is refused and remembered, and the plugin's total
// follows the size and returns to 0 when the memory is freed.
func TestLinearMemoryGrowsInPlace(t *testing.T) {
	var total atomic.Int64
	const limit = 16 << 20
	m := &linearMemory{limit: limit, total: &total}
	m.Allocate(64<<10, limit)
	b := m.Reallocate(64 << 10)
	b[0], b[len(b)-1] = 7, 9
	base := &b[0]
	for size := uint64(1 << 20); size <= limit; size += 1 << 20 {
		b = m.Reallocate(size)
		if uint64(len(b)) != size {
			t.Fatalf("Reallocate(%d) gave %d bytes", size, len(b))
		}
		if &b[0] != base && runtime.GOOS == "linux" {
			t.Fatalf("the memory moved at %d bytes", size)
		}
	}
	if b[0] != 7 || b[64<<10-1] != 9 || b[limit-1] != 0 {
		t.Errorf("bytes after growing: %d %d %d, want 7 9 0", b[0], b[64<<10-1], b[limit-1])
	}
	if got := total.Load(); got != limit {
		t.Errorf("total %d, want %d", got, limit)
	}
	if m.Reallocate(limit+64<<10) != nil || m.refused != limit+64<<10 {
		t.Errorf("a grow past the limit was not refused (refused = %d)", m.refused)
	}
	m.Free()
	if got := total.Load(); got != 0 || m.reserved != nil {
		t.Errorf("after Free: total %d, mapping %v", got, m.reserved != nil)
	}
}

// A plugin and its runtime closed while a guest call writes its memory (as
// a stop past its time may) end the call with an error, and the plugin's
// memory is given back; the process goes on. (The race in which a review
// crashed the process, the memory unmapped mid-call, is pinned down by
// TestMemoryFreedDuringACallIsReleasedAtItsExit.)
func TestClosingTheRuntimeDuringACallDoesNotCrash(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	p := load(t, rt, "scribble", config.PluginLimits{}, 1)
	done := make(chan error, 1)
	go func() {
		_, err := p.Handle(context.Background(), testEvent("s1"))
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // the guest scribbles
	p.Close(context.Background())      // as a stop does, the call still running
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a call cut by the runtime's close succeeded")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the call goes on after the runtime closed")
	}
	if got := p.MemoryBytes(); got != 0 {
		t.Errorf("%d bytes of plugin memory after the close, want 0", got)
	}
}

// Memory freed while a guest call runs on it (a module closed from another
// goroutine) stays mapped and writable until the call exits, then is
// released; freed between calls, it is released at once.
func TestMemoryFreedDuringACallIsReleasedAtItsExit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the memory is a Go slice here: the collector keeps it while used")
	}
	var total atomic.Int64
	m := &linearMemory{limit: 1 << 20, total: &total}
	m.Allocate(0, 1<<20)
	b := m.Reallocate(64 << 10)
	m.enter()
	m.Free()
	if m.reserved == nil {
		t.Fatal("the mapping was released while a call ran on it")
	}
	b[100] = 1 // the guest writes on: no fault
	m.exit()
	if m.reserved != nil {
		t.Error("the mapping outlived the call")
	}
	n := &linearMemory{limit: 1 << 20, total: &total}
	n.Allocate(0, 1<<20)
	n.Reallocate(64 << 10)
	n.Free()
	if n.reserved != nil || total.Load() != 0 {
		t.Errorf("freed between calls: mapping kept %v, total %d", n.reserved != nil, total.Load())
	}
}
