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
// count as the process's memory, and Free gives them all back. Elsewhere,
// or if the mapping fails, the slice as before.
type linearMemory struct {
	buf      []byte
	limit    uint64
	reserved []byte        // the mapping of limit bytes (reserve), nil when buf is a Go slice
	refused  uint64        // the size of the first refused grow; 0 = none
	total    *atomic.Int64 // the plugin's instances' memory, summed
	// tables is the bytes of the instance's tables (boundTables): limit
	// is what limits.memory leaves them, and total counts them from
	// Allocate to Free.
	tables uint64

	// A module closed from another goroutine (a runtime's Close) frees
	// its memory at once, even while a guest call runs on it (a review
	// crashed the process so): the mapping is then released when the
	// last call exits.
	mu       sync.Mutex
	calls    int  // guest calls running (enter, exit)
	released bool // Free came during a call: exit releases the mapping
}

func (m *linearMemory) Allocate(cap, _ uint64) experimental.LinearMemory {
	m.total.Add(int64(m.tables))
	if m.reserved = reserve(m.limit); m.reserved != nil {
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

// Free releases the memory; wazero calls it once, when the module's
// resources close. A mapping a call still runs on is released at the
// call's exit.
func (m *linearMemory) Free() {
	m.total.Add(-int64(len(m.buf) + int(m.tables)))
	m.buf = nil
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.calls > 0 {
		m.released = true
		return
	}
	m.release()
}

// enter and exit bracket every guest call on the memory.
func (m *linearMemory) enter() {
	m.mu.Lock()
	m.calls++
	m.mu.Unlock()
}

func (m *linearMemory) exit() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.calls--; m.calls == 0 && m.released {
		m.release()
	}
}

// release unmaps the mapping, if any. m.mu is held.
func (m *linearMemory) release() {
	if m.reserved != nil {
		release(m.reserved)
		m.reserved = nil
	}
}
