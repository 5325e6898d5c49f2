package storage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A data file removed from its path while the router runs (rm), or
// replaced there, is noticed at the next measurement: every write is
// refused from then on, and what it held is copied out whole, back to the
// path when it is free, else beside it; the copy holds every event
// acknowledged. Before, writes went on into the unlinked file, and the next
// start made an empty one: every acknowledged event was lost (an
// adversarial trial).
func TestLostFileIsCopiedBack(t *testing.T) {
	for _, replaced := range []bool{false, true} {
		dir := t.TempDir()
		path := filepath.Join(dir, "router.db")
		db, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		insertBatches(t, db, 500)
		os.Remove(path)
		if replaced {
			os.WriteFile(path, []byte("someone else's"), 0o600)
		}
		if _, err := db.Space(); err != nil && !replaced {
			t.Fatal(err)
		}
		if err := db.Writable(); !errors.Is(err, ErrFileLost) {
			t.Fatalf("replaced %v: Writable = %v", replaced, err)
		}
		if err := db.Update(context.Background(), func(*Tx) error { return nil }); !errors.Is(err, ErrFileLost) {
			t.Fatalf("replaced %v: a write after = %v", replaced, err)
		}
		db.Close(context.Background())
		copyPath := path
		if replaced {
			m, _ := filepath.Glob(path + ".recovered-*")
			if len(m) != 1 {
				t.Fatalf("no copy beside the replaced file: %v", m)
			}
			copyPath = m[0]
			if b, _ := os.ReadFile(path); string(b) != "someone else's" {
				t.Fatal("the file put in its place was overwritten")
			}
		}
		back, err := Open(copyPath, Options{})
		if err != nil {
			t.Fatalf("replaced %v: the copy: %v", replaced, err)
		}
		n := 0
		back.View(func(tx *Tx) error {
			n = tx.CountStates().Pending
			return nil
		})
		back.Close(context.Background())
		if n != 500 {
			t.Errorf("replaced %v: the copy holds %d of 500 events", replaced, n)
		}
	}
}
