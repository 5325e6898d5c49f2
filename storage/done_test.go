package storage_test

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/storage"
	"github.com/switchyard-router/switchyard/storage/storagetest"
)

// After the outbox ttl was lowered (24h → 1h) the newest deliveries sort
// before older ones in the delivered index; RecentlyDelivered still returns
// the events delivered last (within the window of the newest), and not the
// last entries of the index; and so it does a day later, once the old
// ttl's entries can no longer exist. (How far back it reads is not
// visible here: it picks by delivery time either way.)
func TestRecentlyDeliveredAfterTheTTLWasLowered(t *testing.T) {
	db := storagetest.Open(t)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	deliver := func(prefix string, at time.Time, ttl time.Duration, n int) {
		t.Helper()
		for i := range n {
			id := fmt.Sprintf("%s-%d", prefix, i)
			insert(t, db, record(id, "t.x", at, ""))
			markDelivered(t, db, id, at.Add(time.Duration(i)*time.Millisecond), ttl)
		}
	}
	recent := func(now time.Time) []string {
		t.Helper()
		var ids []string
		err := db.View(func(tx *storage.Tx) error {
			return tx.RecentlyDelivered(7*time.Second, now, func(r *storage.Record) error {
				ids = append(ids, r.Event.ID)
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(ids)
		return ids
	}
	deliver("old", t0, 24*time.Hour, 3)
	deliver("new", t0.Add(time.Hour), time.Hour, 3) // after a reload to 1h
	if got, want := recent(t0.Add(time.Hour+time.Minute)), []string{"new-0", "new-1", "new-2"}; !slices.Equal(got, want) {
		t.Fatalf("RecentlyDelivered = %v, want %v (the deliveries of the last moments)", got, want)
	}
	// A day later the old entries are past their ttl: the spread is gone.
	deliver("later", t0.Add(26*time.Hour), time.Hour, 2)
	if got, want := recent(t0.Add(26*time.Hour+time.Minute)), []string{"later-0", "later-1"}; !slices.Equal(got, want) {
		t.Fatalf("RecentlyDelivered = %v, want %v", got, want)
	}
}

// A record delivered, made pending again (a redelivery after an unclean
// stop) and delivered again within the window has two entries in the
// delivered index; RecentlyDelivered passes it once, by the entry of its
// last delivery, and passes the record as it is now.
func TestRecentlyDeliveredPassesARecordDeliveredTwiceOnce(t *testing.T) {
	db := storagetest.Open(t)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	deliverAt(t, db, "a", t0, time.Hour)
	deliverAt(t, db, "b", t0.Add(time.Second), time.Hour)
	onRecord(t, db, "a", func(tx *storage.Tx, r *storage.Record) error {
		_, err := tx.Redeliver(r, func(storage.Output) bool { return true }, false, t0.Add(2*time.Second))
		return err
	})
	markDelivered(t, db, "a", t0.Add(3*time.Second), time.Hour)
	var got []string
	err := db.View(func(tx *storage.Tx) error {
		return tx.RecentlyDelivered(7*time.Second, t0.Add(4*time.Second), func(r *storage.Record) error {
			got = append(got, fmt.Sprintf("%s@%s", r.Event.ID, r.LastDelivered().Sub(t0)))
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a@3s", "b@1s"}; !slices.Equal(got, want) {
		t.Fatalf("RecentlyDelivered passed %v, want %v (each record once, newest first)", got, want)
	}
}

// deliverAt stores event id and marks it delivered at at, kept for ttl.
func deliverAt(t *testing.T, db *storage.DB, id string, at time.Time, ttl time.Duration) {
	t.Helper()
	insert(t, db, record(id, "t.x", at, ""))
	markDelivered(t, db, id, at, ttl)
}

// markDelivered marks the stored event id delivered at at (one output,
// to nats.local:x), kept for ttl.
func markDelivered(t *testing.T, db *storage.DB, id string, at time.Time, ttl time.Duration) {
	t.Helper()
	onRecord(t, db, id, func(tx *storage.Tx, r *storage.Record) error {
		r.Outputs = []storage.Output{{Destination: "nats.local:x", MsgID: id, Delivered: true, DeliveredAt: at}}
		return tx.MarkDelivered(r, at, ttl)
	})
}

// stored says which of ids still have a record.
func stored(t *testing.T, db *storage.DB, ids ...string) []string {
	t.Helper()
	var out []string
	err := db.View(func(tx *storage.Tx) error {
		for _, id := range ids {
			if _, err := tx.Record(id); err == nil {
				out = append(out, id)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The early removal removes the records delivered before its cutoff and
// none after, whatever ttl their index entries were made with: here one
// delivered under a 1h ttl just before a reload raised it to 24h, whose
// entry sorts before the cutoff plus the new ttl.
func TestDeleteDeliveredBeforeSparesLaterDeliveries(t *testing.T) {
	db := storagetest.Open(t)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	deliverAt(t, db, "old", t0.Add(-time.Hour), time.Hour)
	deliverAt(t, db, "before-reload", t0, time.Hour)
	deliverAt(t, db, "after-reload", t0.Add(time.Second), 24*time.Hour)
	cutoff := t0.Add(-time.Minute)
	err := db.Update(ctx, func(tx *storage.Tx) error {
		_, err := tx.DeleteDeliveredBefore(cutoff, 24*time.Hour, 100)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := stored(t, db, "old", "before-reload", "after-reload"), []string{"before-reload", "after-reload"}; !slices.Equal(got, want) {
		t.Fatalf("left %v, want %v", got, want)
	}
}

// An event stored again under the same id after its first was delivered,
// sent back by an unclean stop's republish, dead-lettered and deleted, is
// kept for its own ttl: the first delivery's entry in the delivered index
// does not remove it at the first's expiry.
func TestStaleDeliveredEntryKeepsTheNewRecord(t *testing.T) {
	db := storagetest.Open(t)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	deliverAt(t, db, "x", t0, time.Hour)
	err := db.Update(ctx, func(tx *storage.Tx) error {
		r, err := tx.Record("x")
		if err != nil {
			return err
		}
		if _, err := tx.Redeliver(r, func(storage.Output) bool { return true }, false, t0.Add(time.Minute)); err != nil {
			return err
		}
		if err := tx.MoveToDLQ(r, t0.Add(2*time.Minute), "rejected"); err != nil {
			return err
		}
		return tx.DeleteDeadLetter(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	deliverAt(t, db, "x", t0.Add(30*time.Minute), time.Hour)
	expire := func(at time.Time) {
		t.Helper()
		if err := db.Update(ctx, func(tx *storage.Tx) error { _, err := tx.DeleteExpiredDelivered(at, 100); return err }); err != nil {
			t.Fatal(err)
		}
	}
	expire(t0.Add(time.Hour + time.Minute))
	if got := stored(t, db, "x"); len(got) != 1 {
		t.Fatalf("x, stored again and delivered 31 minutes ago with a 1h ttl, was removed")
	}
	expire(t0.Add(90*time.Minute + time.Second))
	if got := stored(t, db, "x"); len(got) != 0 {
		t.Fatalf("x past its own ttl still stored")
	}
}

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
		var recs []*storage.Record
		err := tx.RecentlyDelivered(7*time.Second, now, func(r *storage.Record) error {
			recs = append(recs, r)
			return nil
		})
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
		due, err := tx.Due("t.k", now, 0, storage.Limit{Events: 10}, true, nil)
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
