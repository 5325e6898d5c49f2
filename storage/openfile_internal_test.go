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
	db, err := Open(filepath.Join(tb.TempDir(), "r.db"), Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close(context.Background()) })
	return db
}
