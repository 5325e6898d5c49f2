package storage

import (
	"context"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// A data file left by an unclean stop stays unclean through runs that end
// before the router says it dealt with it (MarkRecovered): a failed start
// must not clear the running mark that tells the next start to republish.
func TestRunningMarkOutlivesAnUnrecoveredRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "router.db")
	open := func() *DB {
		t.Helper()
		db, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	closeDB := func(db *DB) {
		t.Helper()
		if err := db.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	db := open()
	if db.Unclean() {
		t.Fatal("a new file is unclean")
	}
	closeDB(db)

	// A crash: the running mark stays in the file.
	raw, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyRunning, []byte{1}) }); err != nil {
		t.Fatal(err)
	}
	if err := raw.Close(); err != nil {
		t.Fatal(err)
	}

	db = open()
	if !db.Unclean() {
		t.Fatal("a file with the running mark is not unclean")
	}
	closeDB(db) // stopped before recovering
	db = open()
	if !db.Unclean() {
		t.Fatal("a run that stopped before MarkRecovered cleared the running mark")
	}
	db.MarkRecovered()
	closeDB(db)
	db = open()
	if db.Unclean() {
		t.Fatal("a recovered run's clean stop left the running mark")
	}
	closeDB(db)
}
