package storage

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/switchyard-router/switchyard"
)

// A file from before the partial index (no index, no built mark) gets it
// at its first open: a pending event with a delivered output is found by
// PartlyDelivered afterwards; one without is not.
func TestPartialIndexBuiltForAnOlderFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "router.db")
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(ctx, func(tx *Tx) error {
		for _, id := range []string{"half", "none"} {
			r := &Record{Event: switchyard.Event{ID: id, Type: "t.x", Source: "/t", SpecVersion: "1.0"}, Tenant: DefaultTenant, CreatedAt: now}
			if err := tx.InsertEvent(r, false); err != nil {
				return err
			}
			r.Outputs = []Output{{Destination: "nats.local:a", MsgID: id, Delivered: id == "half", DeliveredAt: now}, {Destination: "nats.local:b", MsgID: id + "/1/"}}
			if err := tx.Save(r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// What an older router leaves: neither the index nor its mark.
	raw, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = raw.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucketPartial); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Delete(keyPartialBuilt)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	err = db.View(func(tx *Tx) error {
		recs, err := tx.PartlyDelivered(time.Time{})
		if err != nil {
			return err
		}
		if len(recs) != 1 || recs[0].Event.ID != "half" {
			t.Errorf("PartlyDelivered = %d records, want event half alone", len(recs))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
