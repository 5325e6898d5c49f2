package storage

import (
	"context"
	"errors"
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
		var recs []*Record
		err := tx.PartlyDelivered(time.Time{}, func(r *Record) error {
			recs = append(recs, r)
			return nil
		})
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

// A partly delivered event leaves the partial index with its record: a
// dead letter with a delivered output is in the index, and deleting it
// (DeleteDeadLetter, through deleteEvent) takes its entry out too.
func TestDeletedDeadLetterLeavesThePartialIndex(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "router.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer db.Close(ctx)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	r := &Record{Event: switchyard.Event{ID: "dead", Type: "t.x", Source: "/t", SpecVersion: "1.0"}, Tenant: DefaultTenant, CreatedAt: now}
	inIndex := func(tx *Tx) bool { // its entries have empty values: look at the key
		k, _ := tx.bucket(bucketPartial).Cursor().Seek([]byte(r.Key()))
		return string(k) == r.Key()
	}
	err = db.Update(ctx, func(tx *Tx) error {
		if err := tx.InsertEvent(r, false); err != nil {
			return err
		}
		r.Outputs = []Output{{Destination: "nats.local:a", MsgID: "dead", Delivered: true, DeliveredAt: now}, {Destination: "nats.local:b", MsgID: "dead/1/"}}
		if err := tx.MoveToDLQ(r, now, "b refused it"); err != nil {
			return err
		}
		if !inIndex(tx) {
			return errors.New("a dead letter with a delivered output is not in the partial index")
		}
		if err := tx.DeleteDeadLetter(r); err != nil {
			return err
		}
		if inIndex(tx) {
			return errors.New("the deleted dead letter is still in the partial index")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
