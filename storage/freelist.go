package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
)

// bbolt's meta page, as storeFreeList writes it
// (go.etcd.io/bbolt/internal/common/meta.go: Meta.Write): the page
// header's id is the transaction's parity, its flags metaPageFlag; the
// meta's fields as decodeMeta reads them.
const metaPageFlag = 0x04

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
// already is neither. A meta page written whose sync the disk refused is
// err (storeFreeList).
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
	if w.m.FreeList != noFreelist {
		return nil, nil // stored already (a clean stop's)
	}
	if cannot == nil {
		cannot = w.storeFreeList()
	}
	if _, unsynced := errors.AsType[*unsyncedMetaError](cannot); unsynced {
		return nil, cannot
	}
	if cannot != nil {
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

// storeFreeList commits, as bbolt does, the free list of the walked
// file, which stores none: every
// page from 2 up to the high water mark the walk did not reach (bbolt's
// DB.freepages), less the pages the list itself takes (freeList); synced;
// then the meta, one transaction later, on the meta page of its parity,
// with the list's page (and the high water mark past it when the list
// went there), synced. No page the last commit's tree reaches is
// written: a crash or an error before the meta is synced leaves that
// commit as it was. The tree is the one it left. The router's first commit
// frees the list's pages, as it does one a clean stop stored
// (DB.stopCommit). A meta page the disk may not hold (its sync refused)
// is an error of the open: the router's next commit would write over the
// only other one.
func (w *pageWalker) storeFreeList() error {
	l := w.freeList()
	if err := w.writeList(l); err != nil {
		return err
	}
	meta, off, err := w.nextMeta(l)
	if err != nil {
		return err
	}
	if _, err := w.f.WriteAt(meta, off); err != nil {
		w.giveBack(l)
		return fmt.Errorf("write the meta page: %w", err)
	}
	if err := w.f.Sync(); err != nil {
		return &unsyncedMetaError{err}
	}
	return nil
}

// unsyncedMetaError is a meta page written by storeFreeList whose sync the
// disk refused.
type unsyncedMetaError struct{ err error }

func (e *unsyncedMetaError) Error() string {
	return fmt.Sprintf("the disk refused to sync the meta page written to store the free list (%v): the disk is failing; the file's last commit is as it was (the list went to pages it does not use), and the disk may or may not hold the new meta page", e.err)
}

func (e *unsyncedMetaError) Unwrap() error { return e.err }

// writeList writes the list's pages, and syncs them. A list past the high
// water mark that fails gives back what it took of the file (a full disk).
func (w *pageWalker) writeList(l freeList) error {
	if _, err := w.f.WriteAt(l.page, int64(l.at)*int64(w.m.PageSize)); err != nil {
		w.giveBack(l)
		return fmt.Errorf("write the free list: %w", err)
	}
	if err := w.f.Sync(); err != nil {
		w.giveBack(l)
		return fmt.Errorf("sync the free list: %w", err)
	}
	return nil
}

// giveBack cuts the file back to its size before the walk when the list l,
// past the high water mark, made it longer, and no meta names it.
func (w *pageWalker) giveBack(l freeList) {
	if l.at == w.m.HighWater && w.size < (int64(l.at)+int64(l.pages))*int64(w.m.PageSize) {
		w.f.Truncate(w.size)
	}
}

// freeList is a free list page (with its overflow pages) and the page it
// goes at.
type freeList struct {
	page      []byte
	at, pages uint64
}

// freeList is the walked file's free list and where it goes: as bbolt's
// commit allocates it (Tx.allocate), in the lowest run of free pages long
// enough, else at the high water mark, past the file's pages. Its pages
// are not in it. A list always past the high water mark grew the file by
// its size at every start after an unclean stop, and a crash loop with it
// (a review: TestACrashLoopDoesNotGrowTheFile).
func (w *pageWalker) freeList() freeList {
	var free []uint64
	for id := uint64(2); id < w.m.HighWater; id++ {
		if !w.reached(id) {
			free = append(free, id)
		}
	}
	ps := uint64(w.m.PageSize)
	pages := (pageHeaderSize + 8*(uint64(len(free))+1) + ps - 1) / ps
	at := w.m.HighWater
	for i := 0; i+int(pages) <= len(free); i++ {
		if free[i+int(pages)-1]-free[i] == pages-1 {
			at = free[i]
			free = append(free[:i:i], free[i+int(pages):]...)
			break
		}
	}
	return freeList{page: freeListPage(free, at, pages, ps), at: at, pages: pages}
}

// freeListPage is bbolt's free list page (freelist Write) of ids, at page
// at, of `pages` pages of ps bytes.
func freeListPage(ids []uint64, at, pages, ps uint64) []byte {
	p := make([]byte, pages*ps)
	le := binary.LittleEndian
	le.PutUint64(p[0:], at)
	le.PutUint16(p[8:], freelistPage)
	le.PutUint32(p[12:], uint32(pages-1))
	off := pageHeaderSize
	if len(ids) >= freeListCountMax {
		le.PutUint16(p[10:], freeListCountMax)
		le.PutUint64(p[off:], uint64(len(ids)))
		off += 8
	} else {
		le.PutUint16(p[10:], uint16(len(ids)))
	}
	for i, id := range ids {
		le.PutUint64(p[off+8*i:], id)
	}
	return p
}

// nextMeta is the meta page of the commit that stores the free list l,
// and where it goes: the current meta's page, its transaction one later,
// on the meta page of that transaction's parity, as bbolt writes it — the
// other one. In a file bbolt's Tx.WriteTo made, whose meta is at page 0
// whatever its parity, that can be the current meta's page, and page 1
// may not be valid: a kill inside the write would leave no valid meta
// (the second review's TestTheStoreNeverWritesOverTheOnlyValidMeta). The
// commit then skips a transaction, to the other page (bbolt opens the
// later of two valid metas; `router db rollback` refuses the file until
// the router's first commit makes two metas one commit apart again).
func (w *pageWalker) nextMeta(l freeList) ([]byte, int64, error) {
	cur := make([]byte, w.m.PageSize)
	if _, err := w.f.ReadAt(cur, w.metaAt); err != nil {
		return nil, 0, fmt.Errorf("read the meta page: %w", err)
	}
	if decodeMeta(cur) != w.m {
		return nil, 0, errors.New("its meta page changed during the walk")
	}
	le := binary.LittleEndian
	txid := w.m.TxID + 1
	if int64(txid%2)*int64(w.m.PageSize) == w.metaAt {
		txid++
	}
	le.PutUint64(cur[0:], txid%2)
	le.PutUint16(cur[8:], metaPageFlag)
	meta := cur[pageHeaderSize:]
	le.PutUint64(meta[metaFreeListAt:], l.at)
	le.PutUint64(meta[metaHighWaterAt:], max(w.m.HighWater, l.at+l.pages))
	le.PutUint64(meta[metaTxIDAt:], txid)
	le.PutUint64(meta[metaSumLen:], metaChecksum(meta))
	return cur, int64(txid%2) * int64(w.m.PageSize), nil
}
