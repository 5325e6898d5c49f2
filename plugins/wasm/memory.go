package wasm

import (
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero/experimental"
)

// linearMemory backs an instance's memory and enforces limits.memory: a
// memory.grow past the limit fails (returns -1 to the guest) and is
// remembered, so that the call counts as a memory-limit failure whatever
// the guest does next. It implements experimental.LinearMemory and
// MemoryAllocator (one allocator per instance).
//
// Where it can (Linux: reserve), the memory is one mapping of the whole
// limit, which the kernel backs page by page as the guest first touches
// them, so a grow never moves or copies it. A Go slice grown by doubling
// copied every byte into fresh pages at each move: on the 2-core VM of
// BENCHMARKS.md, a C plugin growing 1 MiB at a time took 117 ms to reach
// 16 MiB (past the 50 ms timeout: a plugin author was told "timed out"
// where the memory limit was the cause), and a Rust plugin's first event
// 9–16 ms; with the mapping, 1 ms and 0.15 ms. The mapping is outside the
// Go heap: a reserved limit does not count as heap, only touched pages
// count as the process's memory. Elsewhere, or if the mapping fails, the
// slice as before. A closed instance's mapping, zeroed, serves the
// plugin's next (spareMemory): a new mapping's pages each fault in on
// first touch, and a Go plugin's runtime touches megabytes as it starts.
type linearMemory struct {
	buf      []byte
	limit    uint64
	reserved []byte        // the mapping of limit bytes (reserve), nil when buf is a Go slice
	spares   *spareMemory  // the plugin's closed instances' mappings
	refused  uint64        // the size of the first refused grow; 0 = none
	total    *atomic.Int64 // the plugin's instances' memory, summed
}

func (m *linearMemory) Allocate(cap, _ uint64) experimental.LinearMemory {
	if m.reserved = m.spares.take(m.limit); m.reserved != nil {
		m.buf = m.reserved[:0]
		return m
	}
	m.buf = make([]byte, 0, min(cap, m.limit))
	return m
}

func (m *linearMemory) Reallocate(size uint64) []byte {
	if size > m.limit {
		if m.refused == 0 {
			m.refused = size
		}
		return nil
	}
	m.total.Add(int64(size) - int64(len(m.buf)))
	if size <= uint64(cap(m.buf)) {
		// Wasm memory only grows: the bytes past len were never used and
		// are still zero.
		m.buf = m.buf[:size]
		return m.buf
	}
	nb := make([]byte, size, min(max(size, 2*uint64(cap(m.buf))), m.limit))
	copy(nb, m.buf)
	m.buf = nb
	return nb
}

// Free releases the memory. wazero calls it once, when the instance's
// module closes, never while a call runs (a call cut short by its context
// closes the module's resources on the calling goroutine, after the call).
func (m *linearMemory) Free() {
	m.total.Add(-int64(len(m.buf)))
	if m.reserved != nil {
		m.spares.put(m.reserved, len(m.buf))
		m.reserved = nil
	}
	m.buf = nil
}

// spareMemory keeps up to max mappings of a plugin's closed instances,
// zeroed, for its next instances; close releases them, and any put after.
type spareMemory struct {
	mu     sync.Mutex
	free   [][]byte
	max    int
	closed bool
}

// take returns a spare mapping, or a new one of limit bytes (nil when
// none can be made). A nil pool keeps none.
func (s *spareMemory) take(limit uint64) []byte {
	if s == nil {
		return reserve(limit)
	}
	s.mu.Lock()
	if n := len(s.free); n > 0 {
		b := s.free[n-1]
		s.free = s.free[:n-1]
		s.mu.Unlock()
		return b
	}
	s.mu.Unlock()
	return reserve(limit)
}

// put zeroes the used bytes of b and keeps it, or releases it when the
// pool is full or closed.
func (s *spareMemory) put(b []byte, used int) {
	if s == nil {
		release(b)
		return
	}
	clear(b[:used])
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(s.free) >= s.max {
		release(b)
		return
	}
	s.free = append(s.free, b)
}

// close releases the spare mappings.
func (s *spareMemory) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.free {
		release(b)
	}
	s.free, s.closed = nil, true
}
