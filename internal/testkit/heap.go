package testkit

import "runtime"

// LiveHeap is the bytes the heap holds after two collections: what is
// reachable, for a test that a structure does not hold more than it
// should (compare two readings in one test; the runtime's own allocations
// move it by a few hundred KiB).
func LiveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
