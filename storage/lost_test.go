package storage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A data file removed from its path while the router runs (rm), or
// replaced there, is noticed at the next measurement: every write is
// refused from then on, and what it held is copied out whole, back to the
// path when it is free, else beside it; the copy holds every event
// acknowledged, those written while it was noticed too. Before, writes
// went on into the unlinked file, and the next start made an empty one:
// every acknowledged event was lost (an adversarial trial); and a first
// fix copied before it refused, so writes acknowledged during the copy
// were not in it (a review).
func TestLostFileIsCopiedBack(t *testing.T) {
	for _, replaced := range []bool{false, true} {
		dir := t.TempDir()
		path := filepath.Join(dir, "router.db")
		db, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		insertBatches(t, db, 5000)
		var acked atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for {
					err := db.Update(context.Background(), func(tx *Tx) error { return tx.InsertEvent(diskEvent(time.Now()), false) })
					if err != nil {
						if !errors.Is(err, ErrFileLost) {
							t.Error(err)
						}
						return
					}
					acked.Add(1)
				}
			})
		}
		time.Sleep(20 * time.Millisecond)
		os.Remove(path)
		if replaced {
			os.WriteFile(path, []byte("someone else's"), 0o600)
		}
		db.Space()
		wg.Wait()
		if err := db.Writable(); !errors.Is(err, ErrFileLost) {
			t.Fatalf("replaced %v: Writable = %v", replaced, err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for err := db.Writable(); !strings.Contains(err.Error(), "is copied to"); err = db.Writable() {
			if time.Now().After(deadline) || strings.Contains(err.Error(), "failed") {
				t.Fatalf("replaced %v: %v", replaced, err)
			}
			time.Sleep(10 * time.Millisecond)
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
		if want := 5000 + int(acked.Load()); n != want {
			t.Errorf("replaced %v: the copy holds %d events, %d were acknowledged", replaced, n, want)
		}
		t.Logf("replaced %v: %d acknowledged while it was noticed, all in the copy", replaced, acked.Load())
	}
}
