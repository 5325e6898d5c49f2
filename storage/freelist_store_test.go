package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
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

// listPages is how many pages the free list that m names takes.
func listPages(t *testing.T, path string, m Meta) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := make([]byte, pageHeaderSize)
	if _, err := f.ReadAt(h, int64(m.FreeList)*int64(m.PageSize)); err != nil {
		t.Fatal(err)
	}
	return int(binary.LittleEndian.Uint32(h[12:])) + 1
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
	if stored.TxID != crashed.TxID+1 || stored.FreeList == noFreelist || stored.Root != crashed.Root || stored.HighWater != crashed.HighWater {
		t.Errorf("the commit before the router's first is %v, want transaction %d storing a free list on free pages (high water %d), the tree at root %d unchanged", stored, crashed.TxID+1, crashed.HighWater, crashed.Root)
	}
	if err := db.Check(); err != nil {
		t.Fatal(err)
	}
	if n := eventCount(db); n != 3000 {
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
			if got, list, want := boltFreePages(t, path), listPages(t, path, m), boltFreePages(t, walked); got+list != want {
				t.Errorf("bbolt reads %d free pages from the stored list (of %d pages), and finds %d by its walk", got, list, want)
			}
			boltCheck(t, path)
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
	freedFile(t, path, 512, 75_000, 400) // one a leaf page: 16 + 16 + 8 + 400 bytes
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	if st := bdb.Stats(); st.FreePageN+st.PendingPageN <= 0xFFFF {
		t.Fatalf("%d pages free: not more than 0xFFFF", st.FreePageN+st.PendingPageN)
	}
	return path
}

// On a full disk a list that fits in no run of the file's free pages
// cannot be written past its end: the open goes on as before (bbolt walks
// the file), says why (FreeListError, ENOSPC), gives the disk back what
// the list took, and loses nothing.
func TestAnOpenAfterACrashOnAFullDiskStillOpens(t *testing.T) {
	dir := testkit.SmallDisk(t, 96<<20)
	db, err := Open(filepath.Join(dir, "router.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	insertBatches(t, db, 3000)
	scatterFreePages(t, db)
	b, err := os.ReadFile(db.Path())
	if err != nil {
		t.Fatal(err)
	}
	db.Close(context.Background())
	os.Remove(db.Path())
	path := filepath.Join(dir, "crashed.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// bbolt grows a file ahead of its pages in use: cut to them, the list
	// must be written past the file's end.
	m := metaNow(t, path)
	if err := os.Truncate(path, int64(m.HighWater)*int64(m.PageSize)); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(path)
	filler := testkit.FillDisk(t, dir)
	defer os.Remove(filler)

	db, err = Open(path, Options{CheckUnclean: func(string) error { return nil }})
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
	if n := eventCount(db); n != 3000 {
		t.Errorf("%d events, want 3000", n)
	}
}

// freedFile makes, with bbolt, a file of pages of pageSize bytes (0: the
// system's, as the router's) whose last commit stores no free list: keys
// values of size bytes written, then deleted.
func freedFile(t *testing.T, path string, pageSize, keys, size int) {
	t.Helper()
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{PageSize: pageSize, NoFreelistSync: true, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	if err := bdb.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("full"))
		if err != nil {
			return err
		}
		for i := range keys {
			if err := b.Put(binary.BigEndian.AppendUint64(nil, uint64(i)), make([]byte, size)); err != nil {
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
}

// eventCount is how many events db holds.
func eventCount(db *DB) (n int) {
	db.View(func(tx *Tx) error { n = tx.bucket(bucketEvents).Stats().KeyN; return nil })
	return n
}

// boltCheck runs bbolt's own check of the file at path.
func boltCheck(t *testing.T, path string) {
	t.Helper()
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
		t.Fatalf("bbolt's check: %v", err)
	}
}

// A router killed again and again soon after each start (the OOM killer,
// a crash loop under systemd's Restart=) keeps a sound file, and an idle
// one does not grow it: the stored list goes on free pages, as bbolt's
// commit puts it, not past the high water mark each time, where the list
// the first commit freed made the next list longer (a review: 29 starts
// grew such a file by 4.7 MB).
func TestACrashLoopDoesNotGrowTheFile(t *testing.T) {
	for _, writes := range []int{0, 300} {
		dir := t.TempDir()
		freedFile(t, filepath.Join(dir, "a.db"), 0, 10_000, 3500) // a page each
		db, err := Open(filepath.Join(dir, "a.db"), Options{})
		if err != nil {
			t.Fatal(err)
		}
		var first uint64
		for cycle := range 12 {
			insertBatches(t, db, writes)
			b, err := os.ReadFile(db.Path()) // the kill: the file as it is
			if err != nil {
				t.Fatal(err)
			}
			next := filepath.Join(dir, []string{"a.db", "b.db"}[(cycle+1)%2])
			if err := os.WriteFile(next, b, 0o600); err != nil {
				t.Fatal(err)
			}
			db.Close(context.Background())
			boltCheck(t, next)
			if db, err = Open(next, Options{CheckUnclean: func(string) error { return nil }}); err != nil {
				t.Fatalf("writes %d, start %d: %v", writes, cycle, err)
			}
			if err := db.FreeListError(); err != nil {
				t.Fatal(err)
			}
			if err := db.Check(); err != nil {
				t.Fatalf("writes %d, start %d: %v", writes, cycle, err)
			}
			if m := metaNow(t, next); cycle == 0 {
				first = m.HighWater
			} else if writes == 0 && m.HighWater > first+8 {
				t.Fatalf("%d unclean starts, nothing written but each start's own commit, grew the high water mark from %d to %d pages", cycle, first, m.HighWater)
			}
		}
		if n := eventCount(db); n != 12*writes {
			t.Errorf("writes %d: %d events after the crash loop, want %d", writes, n, 12*writes)
		}
		db.Close(context.Background())
	}
}

// A kill inside the store — the list written and no meta, or the meta torn
// after 56, 64 or 72 bytes (its list page written, its checksum not: the
// first 40 bytes are the old meta's, 80 are all of it) — leaves a file
// that opens, checks, and holds every event: on a crashed file, and on a
// restored backup, whose meta bbolt's Tx.WriteTo puts at page 0 whatever
// its transaction's parity (here odd). (The reviews' test.)
func TestAKillInsideTheStoreLosesNothing(t *testing.T) {
	dir := t.TempDir()
	crashed, backup, want := crashedAndBackup(t, dir)
	for _, src := range []string{crashed, backup} {
		for _, torn := range []int{-1, 56, 64, 72} { // -1: the list only; else the meta's bytes written
			path := filepath.Join(dir, "x.db")
			b, _ := os.ReadFile(src)
			os.WriteFile(path, b, 0o600)
			killInsideTheStore(t, path, torn)
			db, err := Open(path, Options{CheckUnclean: func(string) error { return nil }})
			if err != nil {
				t.Fatalf("%s, torn at %d: %v", filepath.Base(src), torn, err)
			}
			if err := db.Check(); err != nil {
				t.Errorf("%s, torn at %d: %v", filepath.Base(src), torn, err)
			}
			if n := eventCount(db); n != want {
				t.Errorf("%s, torn at %d: %d events, want %d", filepath.Base(src), torn, n, want)
			}
			db.Close(context.Background())
		}
	}
}

// A restored backup whose meta at page 0 has an odd transaction, and whose
// page 1 is damaged, opens by page 0's meta alone: the store must not
// write its meta there (the slot of the next transaction's parity), or a
// kill inside that write leaves no valid meta and the file does not open.
// It skips a transaction instead. (The second review's test.)
func TestTheStoreNeverWritesOverTheOnlyValidMeta(t *testing.T) {
	_, backup, want := crashedAndBackup(t, t.TempDir())
	m := metaNow(t, backup)
	f, err := os.OpenFile(backup, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xde, 0xad}, int64(m.PageSize)+pageHeaderSize+metaSumLen) // page 1's checksum
	f.Close()
	if n, err := heldEvents(backup); err != nil || n != want {
		t.Fatalf("the backup, page 1 damaged: %d events, %v", n, err)
	}
	killInsideTheStore(t, backup, 64)
	if n, err := heldEvents(backup); err != nil || n != want {
		t.Errorf("a kill inside the store of a backup whose page 1 is damaged: %d events, %v", n, err)
	}
}

// crashedAndBackup is a router's file of an odd last transaction as a kill
// leaves it, and its backup (bbolt's Tx.WriteTo: the meta at page 0), in
// dir, and how many events they hold.
func crashedAndBackup(t *testing.T, dir string) (crashed, backup string, events int) {
	t.Helper()
	db, err := Open(filepath.Join(dir, "router.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	insertBatches(t, db, 3000)
	if metaNow(t, db.Path()).TxID%2 == 0 {
		insertBatches(t, db, 1)
	}
	if tx := metaNow(t, db.Path()).TxID; tx%2 == 0 {
		t.Fatalf("transaction %d: not odd", tx)
	}
	b, _ := os.ReadFile(db.Path())
	crashed = filepath.Join(dir, "crashed.db")
	os.WriteFile(crashed, b, 0o600)
	backup = filepath.Join(dir, "backup.db")
	f, _ := os.Create(backup)
	defer f.Close()
	if err := db.bolt.View(func(tx *bolt.Tx) error { _, err := tx.WriteTo(f); return err }); err != nil {
		t.Fatal(err)
	}
	return crashed, backup, eventCount(db)
}

// killInsideTheStore does what storeFreeList does to the file at path
// until a kill: the list written, and torn bytes of the meta (none: -1).
func killInsideTheStore(t *testing.T, path string, torn int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := walkFile(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := w.freeList()
	f.WriteAt(l.page, int64(l.at)*int64(w.m.PageSize))
	if torn >= 0 {
		meta, off, err := w.nextMeta(l)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt(meta[:torn], off)
	}
}

// heldEvents opens the file at path read-only, as bbolt picks its meta,
// and counts its events; err when it does not open or its pages do not
// hold together.
func heldEvents(path string) (n int, err error) {
	if err := walkPages(path, nil); err != nil {
		return 0, err
	}
	err = faultSafe(func() error {
		bdb, err := bolt.Open(path, 0o600, readOnly())
		if err != nil {
			return err
		}
		defer bdb.Close()
		return bdb.View(func(tx *bolt.Tx) error {
			n = tx.Bucket(bucketEvents).Stats().KeyN
			return nil
		})
	})
	return n, err
}

// A disk that refuses the sync of the stored list's pages leaves the open
// as it was before (bbolt walks; FreeListError says why); one that refuses
// the sync of its meta page, which it may then not hold, fails the open,
// saying so: the router's first commit would write over the only other
// meta page. Nothing is lost either way.
func TestARefusedSyncOfTheStoredListIsTold(t *testing.T) {
	for _, c := range []struct {
		name  string
		below int64
	}{{"the list's", testkit.AnySync}, {"the meta page's", testkit.MetaPages}} {
		t.Run(c.name, func(t *testing.T) {
			disk := testkit.NewFaultDisk(t)
			b, err := os.ReadFile(crashedFile(t, t.TempDir(), 3000))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(disk.Dir, "router.db")
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			disk.FailSync(syscall.EIO, c.below)
			db, err := Open(path, Options{CheckUnclean: func(string) error { return nil }})
			if disk.SyncsFailed() != 1 {
				t.Fatalf("%d syncs refused, want 1", disk.SyncsFailed())
			}
			if c.below == testkit.MetaPages {
				if err == nil || !strings.Contains(err.Error(), "the disk refused to sync the meta page written to store the free list") {
					t.Fatalf("the open: %v, want the meta page's refused sync", err)
				}
				if db, err = Open(path, Options{CheckUnclean: func(string) error { return nil }}); err != nil {
					t.Fatalf("the next open, the disk mended: %v", err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				var fe *FreeListError
				if !errors.As(db.FreeListError(), &fe) || !errors.Is(fe, syscall.EIO) {
					t.Errorf("FreeListError: %v, want one of EIO", db.FreeListError())
				}
			}
			defer db.Close(context.Background())
			if err := db.Check(); err != nil {
				t.Fatal(err)
			}
			if n := eventCount(db); n != 3000 {
				t.Errorf("%d events, want 3000", n)
			}
		})
	}
}
