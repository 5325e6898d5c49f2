package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
)

// bbolt's page layout, as far as walkPages reads it
// (go.etcd.io/bbolt/internal/common/page.go and bucket.go): a page header
// (id u64, flags u16, count u16, overflow u32), then count elements of 16
// bytes. A branch element is pos u32, ksize u32, child page u64; a leaf
// element flags u32, pos u32, ksize u32, vsize u32. pos counts from the
// element itself. A leaf element flagged as a bucket holds the bucket's
// header (root page u64, sequence u64), followed, when the root is 0, by
// the bucket's own page inline. A free list page holds count page ids
// (u64) after its header; a count of 0xFFFF says the first u64 is the
// count. A file written with NoFreelistSync stores none (noFreelist).
const (
	branchPage   = 0x01
	leafPage     = 0x02
	freelistPage = 0x10
	bucketLeaf   = 0x01
	elementSize  = 16
	bucketHeader = 16
	maxDepth     = 64 // far deeper than any tree of a 2^63-byte file
	noFreelist   = ^uint64(0)
	// freeListCountMax in a free list page's count says its first u64 is
	// the count.
	freeListCountMax = 0xFFFF
)

// walkPages reads, from the file at path, every page the tree of its
// current meta reaches, and checks, page by page, what bbolt's own check
// (Tx.Check) does: each page, its overflow pages too, reached once, as a
// branch or a leaf, within the file; the keys of each page in order and
// within the range its parent gives them; with a stored free list, no
// page freed twice, or freed and reached, and every page one or the other.
// It also says what lies outside where it should: a page that is not the
// page it is read as, an element or its key or value past its page.
// leaf, if not nil, gets each key and value of every bucket (in: the
// bucket's name after its parents', each after a "/": "/events"; a nested
// bucket's key with a nil value, as bbolt's Bucket.ForEach gives it); k
// and v are leaf's during the call only.
//
// It reads the pages with ReadAt, once each, so nothing here can fault,
// and a file larger than the memory that caches it is read at the disk's
// pace: bbolt's check walks the mapped file three times over (four
// without a stored free list), a page fault a page, 83 s against 1.7 s
// for a 461 MB file in a 128 MiB cgroup (BENCHMARKS.md, "The restart
// after a kill"; docs/decisions/page-walk.md). And bbolt walks the same pages when it opens a file to
// write without a stored free list, on a goroutine of its own, where a
// key read past its page ends the process with a stack trace nothing can
// catch (a branch element's key size flipped: an operator trial's file
// after a clean stop). Here each is an error first.
func walkPages(path string, leaf func(in string, k, v []byte)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = walkFile(f, leaf)
	return err
}

// walkFile is walkPages of the open file f; it returns the walker, which
// knows the pages reached, or nil when f has no valid meta page (bbolt
// says what is wrong with the metas).
func walkFile(f *os.File, leaf func(in string, k, v []byte)) (*pageWalker, error) {
	m, at, ok := currentMetaAt(f)
	if !ok {
		return nil, nil
	}
	if m.PageSize < 512 || m.HighWater < 3 { // a root page at least, after the metas
		return nil, fmt.Errorf("its meta page says it has %d pages of %d bytes", m.HighWater, m.PageSize)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	w := &pageWalker{f: f, m: m, metaAt: at, size: fi.Size(), seen: make([]uint64, (m.HighWater+63)/64), leaf: leaf}
	w.mark(0)
	w.mark(1)
	free, err := w.freelist()
	if err != nil {
		return nil, err
	}
	if _, err := w.page(m.Root, 0, "", nil, nil); err != nil {
		return nil, err
	}
	return w, w.checkFree(free)
}

// pageWalker is one walkPages.
type pageWalker struct {
	f      *os.File
	m      Meta
	metaAt int64    // where m lies in the file
	size   int64    // the file's size when the walk began
	seen   []uint64 // a bit a page: reached
	leaf   func(in string, k, v []byte)
	bufs   [][]byte // a page's bytes, by depth
}

func (w *pageWalker) reached(id uint64) bool { return w.seen[id/64]&(1<<(id%64)) != 0 }
func (w *pageWalker) mark(id uint64)         { w.seen[id/64] |= 1 << (id % 64) }

// read reads page id and its overflow pages into the buffer of depth
// (one a level of the tree, reused: what a page's keys bound is read
// before the next page at its level), and marks them reached.
func (w *pageWalker) read(id uint64, depth int) ([]byte, error) {
	if id < 2 || id >= w.m.HighWater {
		return nil, fmt.Errorf("a page points at page %d, outside the file's %d pages", id, w.m.HighWater)
	}
	for len(w.bufs) <= depth {
		w.bufs = append(w.bufs, make([]byte, w.m.PageSize))
	}
	ps := int64(w.m.PageSize)
	buf := w.bufs[depth][:ps]
	if _, err := w.f.ReadAt(buf, int64(id)*ps); err != nil {
		return nil, fmt.Errorf("page %d: %w", id, err)
	}
	le := binary.LittleEndian
	if got := le.Uint64(buf); got != id {
		return nil, fmt.Errorf("page %d says it is page %d", id, got)
	}
	overflow := uint64(le.Uint32(buf[12:]))
	if id+overflow >= w.m.HighWater {
		return nil, fmt.Errorf("page %d: its %d overflow pages run past the file's %d pages", id, overflow, w.m.HighWater)
	}
	for i := id; i <= id+overflow; i++ {
		if w.reached(i) {
			return nil, fmt.Errorf("page %d is reached twice", i)
		}
		w.mark(i)
	}
	if overflow > 0 {
		buf = append(buf, make([]byte, overflow*uint64(ps))...)
		w.bufs[depth] = buf
		if _, err := w.f.ReadAt(buf[ps:], (int64(id)+1)*ps); err != nil {
			return nil, fmt.Errorf("page %d: %w", id, err)
		}
	}
	return buf, nil
}

// page reads page id, of bucket in, whose keys lie in [lo, hi) (nil: no
// bound), walks what it points at, and returns its greatest key.
func (w *pageWalker) page(id uint64, depth int, in string, lo, hi []byte) ([]byte, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("page %d: the tree is deeper than %d pages: its pages point in a loop", id, maxDepth)
	}
	buf, err := w.read(id, depth)
	if err != nil {
		return nil, err
	}
	return w.elements(id, buf, depth, in, lo, hi)
}

// elements checks the elements of page id (its bytes p, header first) and
// walks their children: a branch's pages, a leaf's buckets. It returns the
// page's greatest key: a branch's, its last child's.
func (w *pageWalker) elements(id uint64, p []byte, depth int, in string, lo, hi []byte) ([]byte, error) {
	le := binary.LittleEndian
	flags, count := le.Uint16(p[8:]), int(le.Uint16(p[10:]))
	if flags != branchPage && flags != leafPage {
		return nil, fmt.Errorf("page %d is reached as part of the tree, but is no branch or leaf (flags %#x)", id, flags)
	}
	if 16+count*elementSize > len(p) {
		return nil, fmt.Errorf("page %d: %d elements do not fit in its %d bytes", id, count, len(p))
	}
	if flags == branchPage && count == 0 {
		// bbolt's cursor reads a branch's first element whatever its count
		// says, on the goroutine of its walk at open (a review).
		return nil, fmt.Errorf("page %d is a branch without elements", id)
	}
	prev := lo // the greatest key before the next: an element's, or a child's
	for i := range count {
		key, rest, leafFlags, err := element(id, p, i, flags)
		if err != nil {
			return nil, err
		}
		if err := inRange(id, i, prev, hi, key); err != nil {
			return nil, err
		}
		prev = key
		if flags == leafPage {
			if err := w.leafElement(id, depth, in, key, rest, leafFlags); err != nil {
				return nil, err
			}
			continue
		}
		next := hi
		if i+1 < count {
			if next, _, _, err = element(id, p, i+1, flags); err != nil {
				return nil, err
			}
		}
		last, err := w.page(le.Uint64(rest), depth+1, in, key, next)
		if err != nil {
			return nil, err
		}
		prev = cmpMax(key, last)
	}
	return prev, nil
}

// element is element i of page id (p): its key, and a branch's child page
// (8 bytes) or a leaf's value, with a leaf's flags.
func element(id uint64, p []byte, i int, flags uint16) (key, rest []byte, leafFlags uint32, err error) {
	le := binary.LittleEndian
	at := 16 + i*elementSize
	e := p[at : at+elementSize]
	if flags == branchPage {
		pos, ksize := uint64(le.Uint32(e)), uint64(le.Uint32(e[4:]))
		if uint64(at)+pos+ksize > uint64(len(p)) {
			return nil, nil, 0, fmt.Errorf("page %d: branch element %d's key (at %d, %d bytes) lies past the page's %d bytes", id, i, pos, ksize, len(p))
		}
		return p[uint64(at)+pos : uint64(at)+pos+ksize], e[8:], 0, nil
	}
	pos, ksize, vsize := uint64(le.Uint32(e[4:])), uint64(le.Uint32(e[8:])), uint64(le.Uint32(e[12:]))
	end := uint64(at) + pos + ksize + vsize
	if end > uint64(len(p)) {
		return nil, nil, 0, fmt.Errorf("page %d: leaf element %d's key and value (at %d, %d+%d bytes) lie past the page's %d bytes", id, i, pos, ksize, vsize, len(p))
	}
	return p[uint64(at)+pos : uint64(at)+pos+ksize], p[end-vsize : end], le.Uint32(e), nil
}

// leafElement walks a leaf element of page id, key and its value v: a
// bucket's tree, or a key and value for w.leaf.
func (w *pageWalker) leafElement(id uint64, depth int, in string, key, v []byte, leafFlags uint32) error {
	if w.leaf != nil {
		if leafFlags&bucketLeaf != 0 {
			w.leaf(in, key, nil) // a bucket where a value may be: as bbolt's ForEach gives it
		} else {
			w.leaf(in, key, v)
		}
	}
	if leafFlags&bucketLeaf == 0 {
		return nil
	}
	return w.bucket(id, v, depth, in+"/"+string(key))
}

// bucket walks bucket in, whose header (and inline page) is v, the value
// of an element of page id.
func (w *pageWalker) bucket(id uint64, v []byte, depth int, in string) error {
	if len(v) < bucketHeader {
		return fmt.Errorf("page %d: a bucket's header is %d bytes, not %d", id, len(v), bucketHeader)
	}
	root := binary.LittleEndian.Uint64(v)
	if root != 0 {
		_, err := w.page(root, depth+1, in, nil, nil)
		return err
	}
	inline := v[bucketHeader:]
	if len(inline) < 16 {
		return fmt.Errorf("page %d: an inline bucket's page is %d bytes", id, len(inline))
	}
	if flags := binary.LittleEndian.Uint16(inline[8:]); flags != leafPage {
		return fmt.Errorf("page %d: an inline bucket's page is no leaf (flags %#x)", id, flags) // bbolt writes only leaves inline
	}
	_, err := w.elements(id, inline, depth+1, in, nil, nil)
	return err
}

// inRange says whether key, element i's of page id, sorts after prev (the
// key or subtree before it; the parent's bound for the first, which it may
// equal) and before hi: bbolt's walk at open reports a key out of order
// through its own goroutine, which went on walking the file bbolt was
// closing, and faulted (CI at fbb5d95).
func inRange(id uint64, i int, prev, hi, key []byte) error {
	switch c := bytes.Compare(prev, key); {
	case i == 0 && prev != nil && c > 0:
		return fmt.Errorf("page %d: its first key sorts before the key its parent gives it", id)
	case i > 0 && c >= 0:
		return fmt.Errorf("page %d: element %d's key is not after the one before it", id, i)
	case hi != nil && bytes.Compare(key, hi) >= 0:
		return fmt.Errorf("page %d: element %d's key is not before the next key its parent gives", id, i)
	}
	return nil
}

// cmpMax is the greater of a and b.
func cmpMax(a, b []byte) []byte {
	if bytes.Compare(a, b) >= 0 {
		return a
	}
	return b
}

// freelist reads the stored free list, if the file has one, and marks its
// pages reached.
func (w *pageWalker) freelist() ([]uint64, error) {
	if w.m.FreeList == noFreelist {
		return nil, nil
	}
	p, err := w.read(w.m.FreeList, 0)
	if err != nil {
		return nil, fmt.Errorf("the free list: %w", err)
	}
	le := binary.LittleEndian
	if flags := le.Uint16(p[8:]); flags != freelistPage {
		return nil, fmt.Errorf("the free list's page %d is no free list (flags %#x)", w.m.FreeList, flags)
	}
	at, count := pageHeaderSize, uint64(le.Uint16(p[10:]))
	if count == freeListCountMax {
		count, at = le.Uint64(p[pageHeaderSize:]), pageHeaderSize+8
	}
	if count > uint64(len(p)-at)/8 {
		return nil, fmt.Errorf("the free list's %d page ids do not fit in its %d bytes", count, len(p))
	}
	ids := make([]uint64, count)
	for i := range ids {
		ids[i] = le.Uint64(p[at+8*i:])
	}
	return ids, nil
}

// checkFree says, for a file with a stored free list (free), whether a
// page is freed twice, or freed and reached, or neither: bbolt's check.
// Without one, bbolt takes every page not reached for free.
func (w *pageWalker) checkFree(free []uint64) error {
	if w.m.FreeList == noFreelist {
		return nil
	}
	freed := make([]uint64, len(w.seen))
	for _, id := range free {
		switch {
		case id >= w.m.HighWater:
			return fmt.Errorf("the free list frees page %d, outside the file's %d pages", id, w.m.HighWater)
		case freed[id/64]&(1<<(id%64)) != 0:
			return fmt.Errorf("page %d is freed twice", id)
		case w.reached(id):
			return fmt.Errorf("page %d is both reached and free", id)
		}
		freed[id/64] |= 1 << (id % 64)
	}
	for id := range w.m.HighWater {
		if !w.reached(id) && freed[id/64]&(1<<(id%64)) == 0 {
			return fmt.Errorf("page %d is neither reached nor free", id)
		}
	}
	return nil
}
