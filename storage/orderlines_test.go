package storage

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
	bolt "go.etcd.io/bbolt"
)

// A keys index written before order lines per tenant (schema 2: entries
// of tenant acme under the bare partition key) is moved to acme's line
// when this version first opens the file: acme's k2 still waits behind its k1 in
// backoff, the default tenant's event with the same key does not, and
// once k1 is delivered k2 is due and nothing of the old entries is left.
func TestOrderLinesMigrate(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "router.db")
	t0 := time.Unix(1000, 0)
	rec := func(tenant, id string) *Record {
		return &Record{Tenant: tenant, CreatedAt: t0, Event: switchyard.Event{ID: id, Type: "a", Source: "/t", SpecVersion: "1.0",
			Extensions: []switchyard.Header{{Name: "partitionkey", Value: "k"}}}}
	}
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(ctx, func(tx *Tx) error {
		for _, r := range []*Record{rec("acme", "k1"), rec("acme", "k2"), rec(DefaultTenant, "d1")} {
			if err := tx.InsertEvent(r, true); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	db.Close(ctx)

	// As the router before order lines left it: every entry under the bare
	// key, at schema 2.
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	bdb.Update(func(btx *bolt.Tx) error {
		b := btx.Bucket(bucketKeys).Bucket([]byte("a"))
		var ks, vs [][]byte
		b.ForEach(func(k, v []byte) error {
			ks, vs = append(ks, append([]byte(nil), k...)), append(vs, append([]byte(nil), v...))
			return nil
		})
		for i, k := range ks {
			b.Delete(k)
			if k[0] == 1 { // "\x01acme\x00k\x00" ‖ seq → "k\x00" ‖ seq
				k = append([]byte("k\x00"), k[len(k)-8:]...)
			}
			b.Put(k, vs[i])
		}
		return btx.Bucket(bucketMeta).Put(keySchema, []byte("2"))
	})
	bdb.Close()

	db, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	due := func() string {
		var ids []string
		db.View(func(tx *Tx) error {
			recs, err := tx.Due("a", t0, 0, Limit{Events: 10}, true, nil)
			for _, r := range recs {
				ids = append(ids, r.Tenant+"/"+r.Event.ID)
			}
			return err
		})
		return fmt.Sprint(ids)
	}
	db.Update(ctx, func(tx *Tx) error {
		r, _ := tx.Record("acme/k1")
		return tx.Reschedule(r, t0.Add(time.Minute))
	})
	if got := due(); got != "[default/d1]" {
		t.Fatalf("due after the migration = %s, want [default/d1]: acme's k2 waits behind its k1, d1 behind nothing", got)
	}
	db.Update(ctx, func(tx *Tx) error {
		r, _ := tx.Record("acme/k1")
		return tx.MarkDelivered(r, t0, time.Hour)
	})
	if got := due(); got != "[acme/k2 default/d1]" {
		t.Fatalf("due after k1 delivered = %s", got)
	}
	db.View(func(tx *Tx) error {
		n := 0
		tx.bucket(bucketKeys).Bucket([]byte("a")).ForEach(func(k, _ []byte) error {
			if k[0] != 1 && string(k[:2]) != "k\x00" {
				t.Errorf("an entry off every line: %q", k)
			}
			n++
			return nil
		})
		if n != 2 { // acme's k2 and d1
			t.Errorf("%d entries left, want 2", n)
		}
		return nil
	})
}
