package storage

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// metaNow is the current meta of the data file at path.
func metaNow(t *testing.T, path string) Meta {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, ok := currentMeta(f)
	if !ok {
		t.Fatal("no valid meta")
	}
	return m
}

// A clean stop stores bbolt's free list in the file, and a list the file's
// pages agree with (none both free and reached, none neither), so that the
// next open reads it instead of walking every page of the tree; the first
// commit after that stores none again (NoFreelistSync: a page less each
// commit).
func TestACleanStopStoresTheFreeList(t *testing.T) {
	path := filepath.Join(t.TempDir(), "router.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	insertBatches(t, db, 3000) // 30 commits, each freeing the pages it copied
	if err := db.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if m := metaNow(t, path); m.FreeList == noFreelist {
		t.Fatalf("after a clean stop the file stores no free list (%v)", m)
	}
	if err := walkPages(path, func(string, []byte, []byte) {}); err != nil {
		t.Fatalf("the stored free list does not agree with the pages: %v", err)
	}

	db, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if m := metaNow(t, path); m.FreeList != noFreelist {
		t.Errorf("the open's first commit stored a free list (page %d): every commit would write it", m.FreeList)
	}
	insertBatches(t, db, 500)
	if err := db.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	db, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	if err := db.Check(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.View(func(tx *Tx) error { n = tx.bucket(bucketEvents).Stats().KeyN; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 3500 {
		t.Errorf("%d events after two stops, want 3500", n)
	}
}
