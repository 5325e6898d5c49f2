package storage

import (
	"context"
	"path/filepath"
	"testing"
)

// openTemp opens a new data file in the test's temporary folder, closed
// when the test ends: for the package's own tests, which storagetest (it
// imports this package) cannot serve.
func openTemp(tb testing.TB) *DB {
	tb.Helper()
	return openIn(tb, tb.TempDir())
}

// openIn is openTemp in dir, a folder the test chose (a small disk of its
// own: testkit.SmallDisk).
func openIn(tb testing.TB, dir string) *DB {
	tb.Helper()
	db, err := Open(filepath.Join(dir, "r.db"), Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close(context.Background()) })
	return db
}
