package storage

import "sync"

// readers counts the read transactions open, by the generation they began
// in, so that the writer can wait for those that began before a commit
// whose last sync failed (unsyncedError): bbolt, rolling that commit back
// although it is applied, rebuilds its free list from the file (the data
// file keeps none while the router runs: NoFreelistSync) and so counts the pages the commit
// freed as free at once, not once the reads that may still use them end.
// The next commit to allocate could write over a page an older read is
// walking (a review reproduced it: a read's snapshot showed a later
// commit's values). docs/decisions/disk-full.md, "A sync refused after the
// meta page".
//
// After waitOlder, every open read is of the current generation: two
// counts, by the generation's parity, are enough.
type readers struct {
	mu    sync.Mutex
	ended sync.Cond // a count went to 0
	gen   uint64
	open  [2]int
}

// enter counts a read beginning, and returns its generation.
func (r *readers) enter() uint64 {
	r.mu.Lock()
	g := r.gen
	r.open[g&1]++
	r.mu.Unlock()
	return g
}

// leave counts the read of generation g ending.
func (r *readers) leave(g uint64) {
	r.mu.Lock()
	if r.open[g&1]--; r.open[g&1] == 0 {
		r.ended.Broadcast()
	}
	r.mu.Unlock()
}

// waitOlder begins a generation and waits until no read of the one before
// is open.
func (r *readers) waitOlder() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended.L == nil {
		r.ended.L = &r.mu
	}
	old := r.gen
	r.gen++
	for r.open[old&1] > 0 {
		r.ended.Wait()
	}
}

// current is the generation a read beginning now would be counted in.
func (r *readers) current() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen
}
