package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// crashedFile is a data file of n events as a SIGKILL would leave it:
// the last commit of a router's file, open and idle (no free list stored,
// the running mark set), copied to crashed.db in dir.
func crashedFile(t *testing.T, dir string, n int) string {
	t.Helper()
	db, err := Open(filepath.Join(dir, "router.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	insertBatches(t, db, n) // a commit a hundred, each freeing the pages it copied
	b, err := os.ReadFile(db.Path())
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "crashed.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// boltFreePages is the number of free pages bbolt counts when it opens the
// file at path to write (reading its stored list, or walking the file).
func boltFreePages(t *testing.T, path string) int {
	t.Helper()
	bdb, err := bolt.Open(path, 0o600, writable(0))
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	return bdb.Stats().FreePageN
}

// After an unclean stop, Open stores the file's free list in a commit of
// its own before bbolt opens the file, so that bbolt reads it rather than
// walking the mapped file; the router's first commit follows it, and
// every event is there.
func TestAnOpenAfterACrashStoresTheFreeListFirst(t *testing.T) {
	path := crashedFile(t, t.TempDir(), 3000)
	crashed := metaNow(t, path)
	if crashed.FreeList != noFreelist {
		t.Fatalf("a router's commit stored a free list (%v)", crashed)
	}

	checked := false
	db, err := Open(path, Options{CheckUnclean: func(string) error { checked = true; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	if !checked || !db.Unclean() {
		t.Fatalf("the crashed copy was not taken for an unclean stop (checked %v, unclean %v)", checked, db.Unclean())
	}
	if err := db.FreeListError(); err != nil {
		t.Fatal(err)
	}
	metas, _, err := Metas(path)
	if err != nil {
		t.Fatal(err)
	}
	stored := metas[(crashed.TxID+1)%2]
	if stored.TxID != crashed.TxID+1 || stored.FreeList != crashed.HighWater || stored.Root != crashed.Root {
		t.Errorf("the commit before the router's first is %v, want transaction %d storing a free list at page %d, the tree at root %d unchanged", stored, crashed.TxID+1, crashed.HighWater, crashed.Root)
	}
	if err := db.Check(); err != nil {
		t.Fatal(err)
	}
	var n int
	db.View(func(tx *Tx) error { n = tx.bucket(bucketEvents).Stats().KeyN; return nil })
	if n != 3000 {
		t.Errorf("%d events after the crash, want 3000", n)
	}
}

// The free list stored before the open is the one bbolt's own walk finds:
// as many free pages, and bbolt's check (each page reached or free, none
// both, none freed twice) passes; also with more than 0xFFFF free pages,
// whose count bbolt keeps in the list's first id. A file that stores a
// list already is not written.
func TestTheStoredFreeListIsTheOneBboltWalksFor(t *testing.T) {
	dir := t.TempDir()
	routerFile := crashedFile(t, dir, 2000)
	for name, path := range map[string]string{"a router's file": routerFile, "70,000 free pages": manyFreePages(t, dir)} {
		t.Run(name, func(t *testing.T) {
			walked := path + ".walked"
			b, _ := os.ReadFile(path)
			os.WriteFile(walked, b, 0o600)

			notStored, damage := walkAndStoreFreeList(path)
			if damage != nil || notStored != nil {
				t.Fatalf("damage %v, not stored %v", damage, notStored)
			}
			m := metaNow(t, path)
			if m.FreeList == noFreelist {
				t.Fatal("no free list stored")
			}
			if got, want := boltFreePages(t, path), boltFreePages(t, walked); got != want {
				t.Errorf("bbolt reads %d free pages from the stored list, and finds %d by its walk", got, want)
			}
			bdb, err := bolt.Open(path, 0o600, readOnly())
			if err != nil {
				t.Fatal(err)
			}
			defer bdb.Close()
			if err := bdb.View(func(tx *bolt.Tx) error {
				for err := range tx.Check() {
					return err
				}
				return nil
			}); err != nil {
				t.Errorf("bbolt's check of the file with the stored list: %v", err)
			}
		})
	}

	many := filepath.Join(dir, "many.db")
	before := metaNow(t, many)
	if notStored, err := walkAndStoreFreeList(many); notStored != nil || err != nil {
		t.Fatal(notStored, err)
	}
	if after := metaNow(t, many); after != before {
		t.Errorf("a file that stores its free list was written again: %v, then %v", before, after)
	}
}

// manyFreePages makes, with bbolt, a file of 512-byte pages whose last
// commit stores no free list and leaves more than 0xFFFF pages free.
func manyFreePages(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "many.db")
	opts := &bolt.Options{PageSize: 512, NoFreelistSync: true, NoSync: true}
	bdb, err := bolt.Open(path, 0o600, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	if err := bdb.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("full"))
		if err != nil {
			return err
		}
		for i := range 75_000 { // one a leaf page: 16 + 16 + 8 + 400 bytes
			if err := b.Put(binary.BigEndian.AppendUint64(nil, uint64(i)), make([]byte, 400)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := bdb.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("full")) }); err != nil {
		t.Fatal(err)
	}
	if err := bdb.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("left")); return err }); err != nil {
		t.Fatal(err)
	}
	if st := bdb.Stats(); st.FreePageN+st.PendingPageN <= 0xFFFF {
		t.Fatalf("%d pages free: not more than 0xFFFF", st.FreePageN+st.PendingPageN)
	}
	return path
}

// On a full disk the list cannot be written past the file's end: the open
// goes on as before (bbolt walks the file), says why (FreeListError,
// ENOSPC), gives the disk back what the list took, and loses nothing.
func TestAnOpenAfterACrashOnAFullDiskStillOpens(t *testing.T) {
	dir := testkit.SmallDisk(t, 64<<20)
	path := crashedFile(t, dir, 3000)
	os.Remove(filepath.Join(dir, "router.db"))
	// bbolt grows a file ahead of its pages in use: cut to them, the list
	// must be written past the file's end.
	m := metaNow(t, path)
	if err := os.Truncate(path, int64(m.HighWater)*int64(m.PageSize)); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(path)
	filler := testkit.FillDisk(t, dir)
	defer os.Remove(filler)

	db, err := Open(path, Options{CheckUnclean: func(string) error { return nil }})
	if err != nil {
		t.Fatalf("a crashed file on a full disk, with pages free in it: %v", err)
	}
	defer db.Close(context.Background())
	var fe *FreeListError
	if err := db.FreeListError(); !errors.As(err, &fe) || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("FreeListError: %v, want a *FreeListError of ENOSPC", err)
	}
	if after, _ := os.Stat(path); after.Size() != before.Size() {
		t.Errorf("the file is %d bytes after the open, %d before: the list's failed write was not given back", after.Size(), before.Size())
	}
	var n int
	db.View(func(tx *Tx) error { n = tx.bucket(bucketEvents).Stats().KeyN; return nil })
	if n != 3000 {
		t.Errorf("%d events, want 3000", n)
	}
}
