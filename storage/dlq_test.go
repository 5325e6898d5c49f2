package storage_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/storage"
	"github.com/switchyard-router/switchyard/storage/storagetest"
)

// deadLetters inserts n events of typ and moves them to the DLQ one second
// apart, starting at t0; ids are typ-0 … typ-(n-1).
func deadLetters(t *testing.T, db *storage.DB, typ string, n int, t0 time.Time) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", typ, i)
		r := record(ids[i], typ, t0, "k")
		insert(t, db, r)
		err := db.Update(ctx, func(tx *storage.Tx) error {
			r, _ := tx.Record(ids[i])
			r.Attempts = 3
			r.History = []storage.Attempt{{At: t0, Error: "boom"}}
			return tx.MoveToDLQ(r, t0.Add(time.Duration(i)*time.Second), "gave up")
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

func listDLQ(t *testing.T, db *storage.DB, q storage.DLQQuery) (ids []string, last []byte) {
	t.Helper()
	err := db.View(func(tx *storage.Tx) error {
		entries, err := tx.DLQ(q)
		for _, e := range entries {
			ids = append(ids, e.Record.Event.ID)
			last = e.Pos
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids, last
}

// Listing is newest first across types, pages by position, and stops at
// since.
func TestDLQListPagesNewestFirst(t *testing.T) {
	db := storagetest.Open(t)
	t0 := time.Unix(1000, 0)
	deadLetters(t, db, "a", 3, t0)                           // a-0 @0s, a-1 @1s, a-2 @2s
	deadLetters(t, db, "b", 2, t0.Add(500*time.Millisecond)) // b-0 @0.5s, b-1 @1.5s

	got, last := listDLQ(t, db, storage.DLQQuery{Limit: 3})
	if fmt.Sprint(got) != "[a-2 b-1 a-1]" {
		t.Fatalf("page 1 = %v", got)
	}
	got, _ = listDLQ(t, db, storage.DLQQuery{Limit: 3, Before: last})
	if fmt.Sprint(got) != "[b-0 a-0]" {
		t.Fatalf("page 2 = %v", got)
	}
	got, _ = listDLQ(t, db, storage.DLQQuery{Queue: "a"})
	if fmt.Sprint(got) != "[a-2 a-1 a-0]" {
		t.Fatalf("type a = %v", got)
	}
	got, _ = listDLQ(t, db, storage.DLQQuery{Since: t0.Add(time.Second)})
	if fmt.Sprint(got) != "[a-2 b-1 a-1]" {
		t.Fatalf("since 1s = %v", got)
	}
	got, _ = listDLQ(t, db, storage.DLQQuery{State: storage.StateResolved})
	if len(got) != 0 {
		t.Fatalf("resolved = %v", got)
	}
}

// Retry puts a dead letter back in its queue with a new sequence, attempts
// reset and delivered outputs kept; resolve moves it to the resolved index
// and the TTL removes it; delete removes it at once.
func TestDLQRetryResolveDelete(t *testing.T) {
	db := storagetest.Open(t)
	t0 := time.Unix(1000, 0)
	ids := deadLetters(t, db, "a", 3, t0)
	err := db.Update(ctx, func(tx *storage.Tx) error {
		r, _ := tx.Record(ids[0])
		r.Outputs = []storage.Output{{Destination: "nats.local:x", MsgID: ids[0], Delivered: true}, {Destination: "nats.local:y", MsgID: ids[0] + "-1"}}
		return tx.Save(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	var oldSeq uint64
	err = db.Update(ctx, func(tx *storage.Tx) error {
		r, _ := tx.Record(ids[0])
		oldSeq = r.QueueSeq
		if err := tx.RetryDeadLetter(r, t0.Add(time.Hour), true); err != nil {
			return err
		}
		r1, _ := tx.Record(ids[1])
		if err := tx.ResolveDeadLetter(r1, t0.Add(time.Hour), 24*time.Hour); err != nil {
			return err
		}
		r2, _ := tx.Record(ids[2])
		return tx.DeleteDeadLetter(r2)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := due(t, db, "a", t0.Add(time.Hour), true); fmt.Sprint(got) != "["+ids[0]+"]" {
		t.Fatalf("due after retry = %v", got)
	}
	db.View(func(tx *storage.Tx) error {
		r, _ := tx.Record(ids[0])
		if r.State != storage.StatePending || r.Attempts != 0 || r.QueueSeq == oldSeq || !r.Outputs[0].Delivered || r.Outputs[1].Delivered || len(r.History) != 1 {
			t.Errorf("retried record: %+v", r)
		}
		if _, err := tx.Record(ids[2]); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("deleted record: %v", err)
		}
		c := tx.DLQCounts()
		if len(c) != 1 || c[0] != (storage.DLQCount{Queue: "a", Dead: 0, Resolved: 1}) {
			t.Errorf("counts = %+v", c)
		}
		en, err := tx.DLQEntry(ids[1])
		if err != nil || en.Record.State != storage.StateResolved || !en.At.Equal(t0.Add(time.Hour)) {
			t.Errorf("resolved entry %+v %v", en, err)
		}
		if _, err := tx.DLQEntry(ids[0]); !errors.Is(err, storage.ErrNotDead) {
			t.Errorf("pending record as DLQ entry: %v", err)
		}
		s := tx.CountStates()
		if s != (storage.StateCounts{Pending: 1, Resolved: 1}) {
			t.Errorf("states = %+v", s)
		}
		return nil
	})
	got, _ := listDLQ(t, db, storage.DLQQuery{State: storage.StateResolved})
	if fmt.Sprint(got) != "["+ids[1]+"]" {
		t.Fatalf("resolved list = %v", got)
	}
	// Operations check the state: a pending record is not a dead letter.
	err = db.Update(ctx, func(tx *storage.Tx) error {
		r, _ := tx.Record(ids[0])
		return tx.DeleteDeadLetter(r)
	})
	if !errors.Is(err, storage.ErrNotDead) {
		t.Fatalf("delete of a pending record: %v", err)
	}
	// The resolved record goes after its TTL, not before.
	n := removed(t, db, func(tx *storage.Tx) (int, error) { return tx.DeleteExpiredResolved(t0.Add(2*time.Hour), 10) })
	if n != 0 {
		t.Fatalf("expired early: %d", n)
	}
	n = removed(t, db, func(tx *storage.Tx) (int, error) { return tx.DeleteExpiredResolved(t0.Add(26*time.Hour), 10) })
	if n != 1 {
		t.Fatalf("expired = %d", n)
	}
	db.View(func(tx *storage.Tx) error {
		if _, err := tx.Record(ids[1]); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("resolved record after TTL: %v", err)
		}
		if c := tx.DLQCounts(); len(c) != 0 {
			t.Errorf("counts after TTL = %+v", c)
		}
		return nil
	})
}

// A resolved record that is retried, dead again and resolved again is not
// removed by the first resolution's TTL entry.
func TestDLQStaleTTLEntryKeepsRecord(t *testing.T) {
	db := storagetest.Open(t)
	t0 := time.Unix(1000, 0)
	id := deadLetters(t, db, "a", 1, t0)[0]
	step := func(fn func(tx *storage.Tx, r *storage.Record) error) { t.Helper(); onRecord(t, db, id, fn) }
	step(func(tx *storage.Tx, r *storage.Record) error { return tx.ResolveDeadLetter(r, t0, time.Hour) })
	step(func(tx *storage.Tx, r *storage.Record) error { return tx.RetryDeadLetter(r, t0, false) })
	step(func(tx *storage.Tx, r *storage.Record) error { return tx.MoveToDLQ(r, t0.Add(time.Minute), "again") })
	step(func(tx *storage.Tx, r *storage.Record) error {
		return tx.ResolveDeadLetter(r, t0.Add(time.Minute), 10*time.Hour)
	})
	n := removed(t, db, func(tx *storage.Tx) (int, error) { return tx.DeleteExpiredResolved(t0.Add(2*time.Hour), 10) })
	db.View(func(tx *storage.Tx) error {
		if r, err := tx.Record(id); err != nil || r.State != storage.StateResolved {
			t.Errorf("removed by a stale TTL entry: %v", err)
		}
		return nil
	})
	n = removed(t, db, func(tx *storage.Tx) (int, error) { return tx.DeleteExpiredResolved(t0.Add(11*time.Hour), 10) })
	if n != 1 {
		t.Fatalf("expired = %d", n)
	}
}

// A late save that moves UpdatedAt (a commit of a batch that held the
// event) does not lose the record's DLQ position.
func TestDLQPositionFoundAfterLateSave(t *testing.T) {
	db := storagetest.Open(t)
	t0 := time.Unix(1000, 0)
	id := deadLetters(t, db, "a", 1, t0)[0]
	db.Update(ctx, func(tx *storage.Tx) error {
		r, _ := tx.Record(id)
		r.UpdatedAt = t0.Add(time.Hour)
		return tx.Save(r)
	})
	err := db.Update(ctx, func(tx *storage.Tx) error {
		r, _ := tx.Record(id)
		return tx.DeleteDeadLetter(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	db.View(func(tx *storage.Tx) error {
		if d := tx.DLQDepth("a"); d != 0 {
			t.Errorf("index entry left behind: depth %d", d)
		}
		return nil
	})
}
