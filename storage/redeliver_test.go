package storage_test

import (
	"cmp"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/storage"
	"github.com/switchyard-router/switchyard/storage/storagetest"
)

// Two events of key k, a then b, both delivered and both lost by a power
// cut, with the outbox ttl lowered between their deliveries: the recall
// reads them oldest first ([a b]), and redelivered newest first (highest
// queue sequence, as engine.requeue sorts them) a is again the first of
// k's line. (A review: redelivered in the order read, b led the line.)
func TestRedeliverAfterALoweredTTLKeepsTheLineOrder(t *testing.T) {
	db := storagetest.Open(t)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	insert(t, db, record("a", "t.k", t0, "k"), record("b", "t.k", t0.Add(time.Millisecond), "k"))
	markDelivered(t, db, "a", t0.Add(time.Second), 24*time.Hour)
	markDelivered(t, db, "b", t0.Add(2*time.Second), time.Hour) // after a reload lowered the ttl
	now := t0.Add(3 * time.Second)
	var read []string
	if err := db.Update(ctx, func(tx *storage.Tx) error {
		recs, err := tx.RecentlyDelivered(7*time.Second, now)
		if err != nil {
			return err
		}
		for _, old := range recs {
			read = append(read, old.Event.ID)
		}
		slices.SortFunc(recs, func(a, b *storage.Record) int { return cmp.Compare(b.QueueSeq, a.QueueSeq) }) // as engine.requeue does
		for _, old := range recs {
			r, err := tx.Record(old.Key())
			if err != nil {
				return err
			}
			if _, err := tx.Redeliver(r, func(storage.Output) bool { return true }, true, now); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(read, []string{"a", "b"}) {
		t.Fatalf("the recall read %v, want [a b] (the case this test is for)", read)
	}
	var first []string
	if err := db.View(func(tx *storage.Tx) error {
		due, err := tx.Due("t.k", now, 0, 10, true, nil)
		for _, r := range due {
			first = append(first, r.Event.ID)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(first, []string{"a"}) {
		t.Fatalf("first takeable of k's line after Redeliver: %v, want [a]", first)
	}
}
