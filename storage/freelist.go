package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
)

// bbolt's meta page, as storeFreeList writes it
// (go.etcd.io/bbolt/internal/common/meta.go: Meta.Write): the page
// header's id is the transaction's parity, its flags metaPageFlag; the
// meta holds the free list's page at 32, the high water page at 40, the
// transaction at 48, and at metaSumLen the FNV-64a of the bytes before.
const (
	metaPageFlag     = 0x04
	metaFreeListAt   = pageHeaderSize + 32
	metaHighWaterAt  = pageHeaderSize + 40
	metaTxIDAt       = pageHeaderSize + 48
	metaChecksumAt   = pageHeaderSize + metaSumLen
	freeListCountMax = 0xFFFF // a count this large is kept in the list's first u64
)

// errFreeListStored: the file stores a free list already.
var errFreeListStored = errors.New("it stores one already")

// FreeListError is why Open could not store the free list of a data file
// that had none before bbolt opened it (a full disk, a failing one, no
// file locks): bbolt then walked the file's pages to find the free ones,
// as it did before storeFreeList. Nothing is lost by it.
type FreeListError struct{ Err error }

func (e *FreeListError) Error() string {
	return "the free list was not stored before the open (bbolt walked the file to find it instead): " + e.Err.Error()
}

func (e *FreeListError) Unwrap() error { return e.Err }

// walkAndStoreFreeList walks the tree of the data file at path, which no
// process has open, checking its pages as walkPages does (a damaged file
// is a DamageError); and when its last commit stored no free list (a
// router's commits store none: after an unclean stop, a compaction, a
// rollback, a restored backup) it writes the one bbolt would find by its
// own walk at the writable open, so that the open reads it instead.
// bbolt's walk reads the mapped file a page fault a page, in tree order:
// 34 s of a 42 s start for a 461 MB file in a 128 MiB cgroup, not done
// after six minutes at 64 MiB (docs/decisions/page-walk.md, "The free list
// after an unclean stop"). notStored is why it could not write one (a
// FreeListError: the open walks as before); a file that stores one
// already is neither.
func walkAndStoreFreeList(path string) (notStored, err error) {
	f, cannot, err := openToStore(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	w, err := walkFile(f, nil)
	if err != nil {
		return nil, damaged("its pages do not hold together", err)
	}
	if w == nil {
		return nil, nil // no valid meta page: bbolt's open says so
	}
	if cannot == nil {
		cannot = w.storeFreeList()
	} else if w.m.FreeList != noFreelist {
		cannot = errFreeListStored
	}
	if cannot != nil && !errors.Is(cannot, errFreeListStored) {
		return &FreeListError{cannot}, nil
	}
	return nil, nil
}

// openToStore opens the file at path to write, locked as bbolt locks it;
// else, saying why it cannot be written (cannot), to read: the walk
// checks it all the same. It fails when another process holds the file:
// one that writes it would change the pages under the walk.
func openToStore(path string) (f *os.File, cannot, err error) {
	f, cannot = os.OpenFile(path, os.O_RDWR, 0)
	if cannot == nil {
		if cannot = lockFile(f, true); cannot == nil {
			return f, nil, nil
		}
		f.Close()
		if _, held := errors.AsType[*heldError](cannot); held {
			return nil, nil, cannot
		}
	}
	f, err = os.Open(path)
	return f, cannot, err
}

// storeFreeList commits, as bbolt does, the walked file's free list: every
// page from 2 up to the high water mark the walk did not reach (bbolt's
// DB.freepages), on pages of its own past the high water mark (none of the
// file's free pages is written: a crash or an error before the meta is
// synced leaves the file's last commit as it was), synced; then the meta,
// one transaction later, on the other meta page, with the list's page and
// the high water mark past it, synced. The tree is the one the last
// commit left. The router's first commit frees the list's pages, as it
// does one a clean stop stored (DB.stopCommit).
func (w *pageWalker) storeFreeList() error {
	if w.m.FreeList != noFreelist {
		return errFreeListStored
	}
	list := w.freeListPage()
	before, err := w.f.Stat()
	if err != nil {
		return err
	}
	if _, err := w.f.WriteAt(list, int64(w.m.HighWater)*int64(w.m.PageSize)); err != nil {
		w.f.Truncate(before.Size()) // give back what it took of a full disk
		return fmt.Errorf("write the free list: %w", err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("sync the free list: %w", err)
	}
	meta, off, err := w.nextMeta(uint64(len(list)) / uint64(w.m.PageSize))
	if err != nil {
		return err
	}
	if _, err := w.f.WriteAt(meta, off); err != nil {
		return fmt.Errorf("write the meta page: %w", err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("sync the meta page: %w", err)
	}
	return nil
}

// freeListPage is the free list page (and its overflow pages) at the high
// water mark: the pages not reached, in order (bbolt's freelist Write).
func (w *pageWalker) freeListPage() []byte {
	var free []uint64
	for id := uint64(2); id < w.m.HighWater; id++ {
		if !w.reached(id) {
			free = append(free, id)
		}
	}
	ids := len(free)
	if ids >= freeListCountMax {
		ids++
	}
	ps := int(w.m.PageSize)
	pages := (pageHeaderSize + 8*ids + ps - 1) / ps
	p := make([]byte, pages*ps)
	le := binary.LittleEndian
	le.PutUint64(p[0:], w.m.HighWater)
	le.PutUint16(p[8:], freelistPage)
	at := pageHeaderSize
	if len(free) >= freeListCountMax {
		le.PutUint16(p[10:], freeListCountMax)
		le.PutUint64(p[at:], uint64(len(free)))
		at += 8
	} else {
		le.PutUint16(p[10:], uint16(len(free)))
	}
	le.PutUint32(p[12:], uint32(pages-1))
	for i, id := range free {
		le.PutUint64(p[at+8*i:], id)
	}
	return p
}

// nextMeta is the meta page of the commit that stores the free list of
// `pages` pages at the high water mark, and where it goes: the current
// meta's page, its transaction one later, on the meta page of that
// transaction's parity (the other one).
func (w *pageWalker) nextMeta(pages uint64) ([]byte, int64, error) {
	cur := make([]byte, w.m.PageSize)
	if _, err := w.f.ReadAt(cur, w.metaAt); err != nil {
		return nil, 0, fmt.Errorf("read the meta page: %w", err)
	}
	if decodeMeta(cur) != w.m {
		return nil, 0, errors.New("its meta page changed during the walk")
	}
	le := binary.LittleEndian
	txid := w.m.TxID + 1
	le.PutUint64(cur[0:], txid%2)
	le.PutUint16(cur[8:], metaPageFlag)
	le.PutUint64(cur[metaFreeListAt:], w.m.HighWater)
	le.PutUint64(cur[metaHighWaterAt:], w.m.HighWater+pages)
	le.PutUint64(cur[metaTxIDAt:], txid)
	h := fnv.New64a()
	h.Write(cur[pageHeaderSize:metaChecksumAt])
	le.PutUint64(cur[metaChecksumAt:], h.Sum64())
	return cur, int64(txid%2) * int64(w.m.PageSize), nil
}
