package storage

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// A clean stop on a full disk stays clean when the file has free pages for
// the stop's commit (disk-full.md: the router goes on in the file's own
// free pages with the disk at 0 bytes free). Storing the free list at the
// stop needs 8 bytes a free page, in pages side by side: with the free
// pages scattered (here 2,000 single pages: 4 pages of list wanted, no run
// longer than one), bbolt takes them past the high-water mark, in the
// file's unwritten tail, which the full disk refuses (ENOSPC): the stop
// then commits without the list, as before. (A review's test.)
func TestACleanStopOnAFullDiskStaysClean(t *testing.T) {
	dir := testkit.SmallDisk(t, 96<<20)
	path := filepath.Join(dir, "router.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	scatterFreePages(t, db)

	filler := testkit.FillDisk(t, dir)
	cerr := db.Close(context.Background())
	os.Remove(filler)
	if cerr != nil {
		t.Errorf("a clean stop on a full disk, with pages free in the file: %v", cerr)
	}
	db, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	if db.Unclean() {
		t.Error("the next start takes the clean stop for a crash (running mark left)")
	}
}

// scatterFreePages leaves db with over 1,024 free pages and no run of
// free pages side by side longer than one: a free list of more than two
// pages goes past the high water mark, where a full disk refuses it.
func scatterFreePages(t *testing.T, db *DB) {
	t.Helper()
	key := func(i int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(i)) }
	update := func(fn func(tx *Tx) error) {
		t.Helper()
		if err := db.Update(context.Background(), fn); err != nil {
			t.Fatal(err)
		}
	}
	put := func(bucket string, n, size int) {
		update(func(tx *Tx) error {
			b, err := tx.tx.CreateBucketIfNotExists([]byte(bucket))
			if err != nil {
				return err
			}
			for i := range n {
				if err := b.Put(key(i), make([]byte, size)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	// 4,000 leaves of one page side by side, three keys each (bbolt splits
	// a node at half a page, after at least two keys).
	put("scatter", 12_000, 576)
	// One key out of every other leaf: that leaf is copied, its old page
	// freed alone (two keys left: no merge with its neighbour).
	update(func(tx *Tx) error {
		b := tx.tx.Bucket([]byte("scatter"))
		for i := 0; i < 12_000; i += 6 {
			if err := b.Delete(key(i)); err != nil {
				return err
			}
		}
		return nil
	})
	// Nodes of two pages take every free run longer than one page (the
	// old branches', the old root's).
	put("runs", 400, 3000)
	if st := db.bolt.Stats(); st.FreePageN < 1024 {
		t.Fatalf("%d free pages: too few for a list of more than two pages", st.FreePageN)
	}
}
