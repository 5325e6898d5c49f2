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

	bolt "go.etcd.io/bbolt"
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

// A data file cut short in place while the router runs (truncate, `>
// file`, a log rotation's copytruncate) neither ends the process nor
// starts the next run empty: writes, reads and measurements are refused
// with ErrFileLost, Close returns, and the next Open refuses the file when
// the cut took pages in use, and takes it whole when it took only the room
// bbolt grew it by. Before, the first write after the cut died with
// SIGBUS, and a restart took the empty file for a new one: every event it
// held was gone without a word (an adversarial trial).
func TestTruncatedFileIsRefused(t *testing.T) {
	for _, cut := range []string{"to nothing, met by a write", "into its pages, met by a measurement", "past its pages"} {
		path := filepath.Join(t.TempDir(), "router.db")
		db, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		insertBatches(t, db, 5000)
		fi, _ := os.Stat(path)
		var used int64 // the high-water mark: pages in use or free
		db.view(func(tx *bolt.Tx) error { used = tx.Size(); return nil })
		switch cut {
		case "to nothing, met by a write":
			os.Truncate(path, 0)
			err = db.Update(context.Background(), func(tx *Tx) error { return tx.InsertEvent(diskEvent(time.Now()), false) })
		case "into its pages, met by a measurement":
			os.Truncate(path, used/2/4096*4096)
			_, err = db.Space()
		default:
			if fi.Size()-used < 4096 {
				t.Fatalf("no room past the pages in use to cut: %d bytes, %d in use", fi.Size(), used)
			}
			os.Truncate(path, used)
			_, err = db.Space()
		}
		if !errors.Is(err, ErrFileLost) || !strings.Contains(err.Error(), "restore it from a backup, router backup") {
			t.Fatalf("%s: the first use after the cut: %v", cut, err)
		}
		for what, err := range map[string]error{
			"Writable": db.Writable(),
			"View":     db.View(func(tx *Tx) error { tx.CountStates(); return nil }),
			"Update":   db.Update(context.Background(), func(tx *Tx) error { return tx.InsertEvent(diskEvent(time.Now()), false) }),
		} {
			if !errors.Is(err, ErrFileLost) {
				t.Errorf("%s: %s after the cut: %v", cut, what, err)
			}
		}
		closed := make(chan error, 1)
		go func() { closed <- db.Close(context.Background()) }()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Close did not return", cut)
		}
		back, err := Open(path, Options{})
		if cut != "past its pages" {
			if err == nil || !strings.Contains(err.Error(), "truncated") {
				t.Errorf("%s: the next Open: %v", cut, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: the next Open: %v", cut, err)
		}
		n := 0
		back.View(func(tx *Tx) error { n = tx.CountStates().Pending; return nil })
		back.Close(context.Background())
		if n != 5000 {
			t.Errorf("%s: %d events after, 5000 before", cut, n)
		}
	}
}

// A new data file appears at its path whole or not at all: no router
// leaves an empty one, so an empty file there can be refused as a cut one.
func TestNewFileIsMadeWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "router.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close(context.Background())
	if m, _ := filepath.Glob(path + ".*"); len(m) != 0 {
		t.Errorf("left beside it: %v", m)
	}
	if _, err := CheckFile(path); err != nil {
		t.Fatal(err)
	}
	os.Truncate(path, 0)
	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "the data file is empty (0 bytes)") {
		t.Errorf("an empty file: %v", err)
	}
}

// A panic bbolt raises because the router misused it (a bucket kept past
// its transaction: its "tx closed" assertion) goes on as a panic, and the
// file stays in use: it is a bug, not news of the file. Before, it passed
// for a damaged file and every later read and write was refused (a review).
func TestMisuseOfBboltIsNotADamagedFile(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "router.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	var kept *bolt.Bucket
	db.view(func(tx *bolt.Tx) error { kept = tx.Bucket(bucketMeta); return nil })
	panicked := false
	func() {
		defer func() { panicked = recover() != nil }()
		db.view(func(tx *bolt.Tx) error { kept.Cursor().First(); return nil })
	}()
	if !panicked {
		t.Fatal("the misuse did not panic")
	}
	if err := db.Update(context.Background(), func(tx *Tx) error { return tx.InsertEvent(diskEvent(time.Now()), false) }); err != nil {
		t.Errorf("a write after the misuse: %v", err)
	}
}
