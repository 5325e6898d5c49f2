package storage

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// Gets and deletes through a transaction's kept cursors (Tx.get, Tx.del)
// behave as bbolt's Get and Delete, interleaved with Puts in the same
// transaction, on a top-level and a nested bucket of several pages: a get
// sees the transaction's own writes, a delete removes exactly its key (a
// missing one is no error), and each bucket has a cursor of its own.
func TestKeptCursorsSeeTheTransactionsOwnWrites(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "router.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	err = db.Update(context.Background(), func(tx *Tx) error {
		queue, err := tx.sub(bucketQueue, "t.x")
		if err != nil {
			return err
		}
		buckets := map[string]*bolt.Bucket{"events": tx.bucket(bucketEvents), "queue": queue}
		key := func(name string, i int) []byte { return fmt.Appendf(nil, "%s-%04d", name, i) }
		for i := range 300 { // enough for more than one page
			for name, b := range buckets {
				if got := tx.get(b, key(name, i)); got != nil {
					return fmt.Errorf("%s: get of a key not yet written: %q", name, got)
				}
				if err := b.Put(key(name, i), key(name, i)); err != nil {
					return err
				}
				if got := tx.get(b, key(name, i)); string(got) != string(key(name, i)) {
					return fmt.Errorf("%s: get right after its put: %q", name, got)
				}
			}
		}
		for i := range 300 {
			for name, b := range buckets {
				if i%3 != 0 {
					continue
				}
				if err := tx.del(b, key(name, i)); err != nil {
					return err
				}
				if err := tx.del(b, key(name, i)); err != nil { // gone: no error
					return err
				}
			}
		}
		for i := range 300 {
			for name, b := range buckets {
				want := i%3 != 0
				if got := b.Get(key(name, i)) != nil; got != want {
					return fmt.Errorf("%s: %s present = %v after the deletes, want %v", name, key(name, i), got, want)
				}
				if got := tx.get(b, key(name, i)) != nil; got != want {
					return fmt.Errorf("%s: get %s present = %v after the deletes, want %v", name, key(name, i), got, want)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
