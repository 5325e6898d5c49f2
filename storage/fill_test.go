package storage

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// Gets and deletes through a transaction's kept cursors (Tx.get, Tx.del)
// behave as bbolt's Get and Delete, on a top-level and a nested bucket: on
// pages committed before (several of them: bbolt splits nodes only when it
// commits), interleaved with Puts in the same transaction (a get sees the
// transaction's own writes), in a read-only transaction; a delete removes
// exactly its key, a missing one is no error, and each bucket has a cursor
// of its own.
func TestKeptCursorsSeeTheTransactionsOwnWrites(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "router.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	ctx := context.Background()
	const n = 600
	key := func(name string, i int) []byte { return fmt.Appendf(nil, "%s-%04d", name, i) }
	buckets := func(tx *Tx) (map[string]*bolt.Bucket, error) {
		queue, err := tx.sub(bucketQueue, "t.x")
		return map[string]*bolt.Bucket{"events": tx.bucket(bucketEvents), "queue": queue}, err
	}
	// The even keys, committed: several leaf pages per bucket.
	err = db.Update(ctx, func(tx *Tx) error {
		bs, err := buckets(tx)
		for i := 0; i < n && err == nil; i += 2 {
			for name, b := range bs {
				if err = b.Put(key(name, i), key(name, i)); err != nil {
					break
				}
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// The odd keys in this transaction, each read right after its Put; then
	// every third key deleted, twice.
	err = db.Update(ctx, func(tx *Tx) error {
		bs, err := buckets(tx)
		if err != nil {
			return err
		}
		if p := bs["events"].Stats().LeafPageN; p < 3 {
			return fmt.Errorf("events: %d leaf pages, want several", p)
		}
		for i := 1; i < n; i += 2 {
			for name, b := range bs {
				if got := tx.get(b, key(name, i)); got != nil {
					return fmt.Errorf("%s: get of a key not yet written: %q", name, got)
				}
				if got := tx.get(b, key(name, i-1)); string(got) != string(key(name, i-1)) {
					return fmt.Errorf("%s: get of a committed key: %q", name, got)
				}
				if err := b.Put(key(name, i), key(name, i)); err != nil {
					return err
				}
				if got := tx.get(b, key(name, i)); string(got) != string(key(name, i)) {
					return fmt.Errorf("%s: get right after its put: %q", name, got)
				}
			}
		}
		for i := 0; i < n; i += 3 {
			for name, b := range bs {
				for range 2 { // the second finds nothing: no error
					if err := tx.del(b, key(name, i)); err != nil {
						return err
					}
				}
			}
		}
		return expectEveryThirdGone(tx, bs, n, key)
	})
	if err != nil {
		t.Fatal(err)
	}
	err = db.View(func(tx *Tx) error {
		bs, err := buckets(tx)
		if err != nil {
			return err
		}
		return expectEveryThirdGone(tx, bs, n, key)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// expectEveryThirdGone checks bbolt's Get and Tx.get agree that exactly the
// keys i%3 == 0 are gone.
func expectEveryThirdGone(tx *Tx, bs map[string]*bolt.Bucket, n int, key func(string, int) []byte) error {
	for i := range n {
		for name, b := range bs {
			want := i%3 != 0
			if got := b.Get(key(name, i)) != nil; got != want {
				return fmt.Errorf("%s: %s present = %v, want %v", name, key(name, i), got, want)
			}
			if got := tx.get(b, key(name, i)) != nil; got != want {
				return fmt.Errorf("%s: get %s present = %v, want %v", name, key(name, i), got, want)
			}
		}
	}
	return nil
}
