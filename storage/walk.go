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
// the bucket's own page inline.
const (
	branchPage   = 0x01
	leafPage     = 0x02
	bucketLeaf   = 0x01
	elementSize  = 16
	bucketHeader = 16
	maxDepth     = 64 // far deeper than any tree of a 2^63-byte file
)

// walkPages reads, from the file at path, every page the tree of its
// current meta reaches, and says what lies outside where it should: a
// child page past the file's pages or reached twice, a page that is not
// the page it is read as, an element or its key or value past its page.
// bbolt walks the same pages when it opens a file to write without a
// stored free list, on a goroutine of its own, where a key read past its
// page ends the process with a stack trace nothing can catch (a branch
// element's key size flipped: an operator trial's file after a clean
// stop). Here each is an error first. It reads the pages with ReadAt, so
// nothing here can fault.
func walkPages(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	m, ok := currentMeta(f)
	if !ok || m.PageSize < 512 {
		return nil // bbolt says what is wrong with the metas
	}
	w := &pageWalker{f: f, m: m, seen: make(map[uint64]bool)}
	return w.page(m.Root, 0)
}

// pageWalker is one walkPages.
type pageWalker struct {
	f    *os.File
	m    Meta
	seen map[uint64]bool
}

// page reads page id and walks what it points at.
func (w *pageWalker) page(id uint64, depth int) error {
	switch {
	case depth > maxDepth:
		return fmt.Errorf("page %d: the tree is deeper than %d pages: its pages point in a loop", id, maxDepth)
	case id < 2 || id >= w.m.HighWater:
		return fmt.Errorf("a page points at page %d, outside the file's %d pages", id, w.m.HighWater)
	case w.seen[id]:
		return fmt.Errorf("page %d is reached twice", id)
	}
	w.seen[id] = true
	ps := int64(w.m.PageSize)
	head := make([]byte, 16)
	if _, err := w.f.ReadAt(head, int64(id)*ps); err != nil {
		return fmt.Errorf("page %d: %w", id, err)
	}
	le := binary.LittleEndian
	if got := le.Uint64(head); got != id {
		return fmt.Errorf("page %d says it is page %d", id, got)
	}
	overflow := uint64(le.Uint32(head[12:]))
	if id+overflow >= w.m.HighWater {
		return fmt.Errorf("page %d: its %d overflow pages run past the file's %d pages", id, overflow, w.m.HighWater)
	}
	buf := make([]byte, (overflow+1)*uint64(ps))
	if _, err := w.f.ReadAt(buf, int64(id)*ps); err != nil {
		return fmt.Errorf("page %d: %w", id, err)
	}
	return w.elements(id, buf, depth)
}

// elements checks the elements of page id (its bytes p, header first) and
// walks their children: a branch's pages, a leaf's buckets.
func (w *pageWalker) elements(id uint64, p []byte, depth int) error {
	le := binary.LittleEndian
	flags, count := le.Uint16(p[8:]), int(le.Uint16(p[10:]))
	if flags != branchPage && flags != leafPage {
		return fmt.Errorf("page %d is reached as part of the tree, but is no branch or leaf (flags %#x)", id, flags)
	}
	if 16+count*elementSize > len(p) {
		return fmt.Errorf("page %d: %d elements do not fit in its %d bytes", id, count, len(p))
	}
	var prev []byte
	for i := range count {
		at := 16 + i*elementSize
		e := p[at : at+elementSize]
		if flags == branchPage {
			pos, ksize := uint64(le.Uint32(e)), uint64(le.Uint32(e[4:]))
			if uint64(at)+pos+ksize > uint64(len(p)) {
				return fmt.Errorf("page %d: branch element %d's key (at %d, %d bytes) lies past the page's %d bytes", id, i, pos, ksize, len(p))
			}
			if err := inOrder(id, i, &prev, p[uint64(at)+pos:uint64(at)+pos+ksize]); err != nil {
				return err
			}
			if err := w.page(le.Uint64(e[8:]), depth+1); err != nil {
				return err
			}
			continue
		}
		eflags, pos, ksize, vsize := le.Uint32(e), uint64(le.Uint32(e[4:])), uint64(le.Uint32(e[8:])), uint64(le.Uint32(e[12:]))
		end := uint64(at) + pos + ksize + vsize
		if end > uint64(len(p)) {
			return fmt.Errorf("page %d: leaf element %d's key and value (at %d, %d+%d bytes) lie past the page's %d bytes", id, i, pos, ksize, vsize, len(p))
		}
		if err := inOrder(id, i, &prev, p[uint64(at)+pos:uint64(at)+pos+ksize]); err != nil {
			return err
		}
		if eflags&bucketLeaf != 0 {
			if err := w.bucket(id, p[end-vsize:end], depth); err != nil {
				return err
			}
		}
	}
	return nil
}

// bucket walks a bucket whose header (and inline page) is v, the value of
// an element of page id.
func (w *pageWalker) bucket(id uint64, v []byte, depth int) error {
	if len(v) < bucketHeader {
		return fmt.Errorf("page %d: a bucket's header is %d bytes, not %d", id, len(v), bucketHeader)
	}
	root := binary.LittleEndian.Uint64(v)
	if root != 0 {
		return w.page(root, depth+1)
	}
	inline := v[bucketHeader:]
	if len(inline) < 16 {
		return fmt.Errorf("page %d: an inline bucket's page is %d bytes", id, len(inline))
	}
	return w.elements(id, inline, depth+1)
}

// inOrder says whether key, element i's of page id, sorts after *prev, the
// one before it, and makes it *prev: bbolt's walk at open reports a key
// out of order through its own goroutine, which went on walking the file
// bbolt was closing, and faulted (CI at fbb5d95).
func inOrder(id uint64, i int, prev *[]byte, key []byte) error {
	if i > 0 && bytes.Compare(*prev, key) >= 0 {
		return fmt.Errorf("page %d: element %d's key is not after the one before it", id, i)
	}
	*prev = key
	return nil
}
