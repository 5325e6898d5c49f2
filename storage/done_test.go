package storage_test

import (
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
			err := db.Update(ctx, func(tx *storage.Tx) error {
				r, err := tx.Record(id)
				if err != nil {
					return err
				}
				when := at.Add(time.Duration(i) * time.Millisecond)
				r.Outputs = []storage.Output{{Destination: "nats.local:x", MsgID: id, Delivered: true, DeliveredAt: when}}
				return tx.MarkDelivered(r, when, ttl)
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	recent := func(now time.Time) []string {
		t.Helper()
		var ids []string
		err := db.View(func(tx *storage.Tx) error {
			recs, err := tx.RecentlyDelivered(7*time.Second, now)
			for _, r := range recs {
				ids = append(ids, r.Event.ID)
			}
			return err
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
