// Package storagetest opens real data files for tests and checks their
// consistency when the test ends (bbolt's internal/btesting does the same).
package storagetest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/storage"
)

// Open opens a fresh data file in a temp dir. At cleanup it is closed,
// reopened and checked with bbolt's tx.Check.
func Open(tb testing.TB) *storage.DB { return OpenWith(tb, storage.Options{}) }

// OpenWith is Open with opts (a commit delay, say).
func OpenWith(tb testing.TB, opts storage.Options) *storage.DB {
	tb.Helper()
	return openAt(tb, filepath.Join(tb.TempDir(), "router.db"), opts)
}

// OpenIn is Open in dir, a folder the test chose (a small disk of its own:
// testkit.SmallDisk).
func OpenIn(tb testing.TB, dir string) *storage.DB {
	tb.Helper()
	return openAt(tb, filepath.Join(dir, "router.db"), storage.Options{})
}

// MakeWithClock makes a data file at path whose router's clock last gave
// at (storage.DB.ClockMark), and closes it.
func MakeWithClock(tb testing.TB, path string, at time.Time) {
	tb.Helper()
	db, err := storage.Open(path, storage.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	db.SeeTime(at)
	if err := db.Close(context.Background()); err != nil {
		tb.Fatal(err)
	}
}

// OpenAt is Open on the data file at path (one the test made, closed).
func OpenAt(tb testing.TB, path string) *storage.DB {
	tb.Helper()
	return openAt(tb, path, storage.Options{})
}

func openAt(tb testing.TB, path string, opts storage.Options) *storage.DB {
	tb.Helper()
	db, err := storage.Open(path, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { Check(tb, db) })
	return db
}

// Check closes db (if still open), reopens its file and runs the
// consistency check.
func Check(tb testing.TB, db *storage.DB) {
	tb.Helper()
	if err := db.Close(context.Background()); err != nil {
		tb.Errorf("close: %v", err)
	}
	re, err := storage.Open(db.Path(), storage.Options{})
	if err != nil {
		tb.Fatalf("reopen for check: %v", err)
	}
	defer re.Close(context.Background())
	if err := re.Check(); err != nil {
		tb.Errorf("data file check: %v", err)
	}
}
