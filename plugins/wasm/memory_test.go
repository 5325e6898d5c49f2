package wasm

import (
	"runtime"
	"sync/atomic"
	"testing"
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

// A closed instance's memory serves the plugin's next instance zeroed,
// within the pool's bound; once the pool is closed nothing is kept.
func TestSpareMemoryIsZeroedAndBounded(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the memory is a Go slice here: nothing is kept")
	}
	var total atomic.Int64
	spares := &spareMemory{max: 1}
	const limit = 1 << 20
	grown := func() (*linearMemory, []byte) {
		m := &linearMemory{limit: limit, spares: spares, total: &total}
		m.Allocate(0, limit)
		return m, m.Reallocate(limit)
	}
	a, ab := grown()
	b, _ := grown()
	ab[0], ab[limit-1] = 1, 2
	a.Free()
	b.Free() // the pool holds one: released
	if len(spares.free) != 1 {
		t.Fatalf("%d spare mappings, want 1", len(spares.free))
	}
	c, cb := grown()
	if &cb[0] != &ab[0] || cb[0] != 0 || cb[limit-1] != 0 {
		t.Errorf("the next instance got another mapping or a dirty one: same %v, bytes %d %d", &cb[0] == &ab[0], cb[0], cb[limit-1])
	}
	spares.close()
	c.Free()
	if len(spares.free) != 0 {
		t.Errorf("%d mappings kept after close", len(spares.free))
	}
}
