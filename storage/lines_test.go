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

// Events stored while their queue was not ordered by key are found page by
// page and put in their lines in the order they were stored, and one that
// left the queue between the finding and the writing gets no entry (an
// entry for it would hold its line for ever): the one after it is due.
func TestAddLinesLinesUpWhatIsStillPending(t *testing.T) {
	ctx := context.Background()
	db, err := Open(filepath.Join(t.TempDir(), "router.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	t0 := time.Unix(1000, 0)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(db.Update(ctx, func(tx *Tx) error {
		for _, id := range []string{"k1", "k2", "k3", "nokey"} {
			ev := switchyard.Event{ID: id, Type: "a", Source: "/t", SpecVersion: "1.0"}
			if id != "nokey" {
				ev.Extensions = []switchyard.Header{{Name: "partitionkey", Value: "k"}}
			}
			if err := tx.InsertEvent(&Record{CreatedAt: t0, Event: ev}, false); err != nil {
				return err
			}
		}
		return nil
	}))
	found, pages := missingLines(t, db, "a", 2)
	if len(found) != 3 || pages != 2 {
		t.Fatalf("found %d in %d pages, want 3 (not nokey) in 2", len(found), pages)
	}
	must(db.Update(ctx, func(tx *Tx) error {
		r, _ := tx.Record("k1")
		return tx.MarkDelivered(r, t0, time.Hour)
	}))
	var n int
	must(db.Update(ctx, func(tx *Tx) (err error) { n, err = tx.AddLines("a", found); return err }))
	due := func() string {
		var ids []string
		must(db.View(func(tx *Tx) error {
			recs, err := tx.Due("a", t0, 0, Limit{Events: 10}, true, nil)
			for _, r := range recs {
				ids = append(ids, r.Event.ID)
			}
			return err
		}))
		return fmt.Sprint(ids)
	}
	if got := due(); n != 2 || got != "[k2 nokey]" {
		t.Fatalf("added %d, due %s; want 2 and [k2 nokey]", n, got)
	}
	if found, _ = missingLines(t, db, "a", 10); len(found) != 0 {
		t.Fatalf("still missing after AddLines: %v", found)
	}
}

// missingLines is every event of queue q MissingLines finds, read limit at
// a time, and the number of reads it took.
func missingLines(t *testing.T, db *DB, q string, limit int) (found []Unlined, pages int) {
	t.Helper()
	var from []byte
	for {
		var page []Unlined
		if err := db.View(func(tx *Tx) (err error) {
			page, from, err = tx.MissingLines(q, from, limit)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		found, pages = append(found, page...), pages+1
		if from == nil {
			return found, pages
		}
	}
}

// BenchmarkMissingLinesScan is what a start with ordering = "key" read
// before the file remembered a lined-up queue (Tx.LinedUp): the whole
// queue of 100,000 pending events, each with a partition key and in its
// line already, in reads of 1,024 (engine.linesPerStep). It finds none.
func BenchmarkMissingLinesScan(b *testing.B) {
	db := keyedEvents(b, 100_000, func(i int) string { return fmt.Sprint("k", i%100) })
	for b.Loop() {
		var from []byte
		for {
			var found []Unlined
			if err := db.View(func(tx *Tx) (err error) {
				found, from, err = tx.MissingLines("orders.created", from, 1024)
				return err
			}); err != nil {
				b.Fatal(err)
			}
			if len(found) != 0 {
				b.Fatalf("found %d outside their lines", len(found))
			}
			if from == nil {
				break
			}
		}
	}
}

// A queue's lined-up mark outlives a clean close and open, and is
// forgotten when the file was written by a router that does not keep the
// marks (an older version: here bbolt itself, storing an event's sequence
// as InsertEvent does), or stopped uncleanly.
func TestLinedUpMarkOnlyInAFileAsLeft(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "router.db")
	lined := func() (ok bool) {
		t.Helper()
		db, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close(ctx)
		_ = db.View(func(tx *Tx) error { ok = tx.LinedUp("a"); return nil })
		if err := db.Update(ctx, func(tx *Tx) error {
			if err := tx.BeginLining("a"); err != nil {
				return err
			}
			_, err := tx.EndLining("a")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if lined() {
		t.Fatal("a new file's queue marked lined up")
	}
	if !lined() {
		t.Fatal("the mark did not outlive a clean close")
	}
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bdb.Update(func(tx *bolt.Tx) error { _, err := tx.Bucket(bucketMeta).NextSequence(); return err }); err != nil {
		t.Fatal(err)
	}
	bdb.Close()
	if lined() {
		t.Fatal("the mark outlived a write by a router that does not keep it")
	}
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(ctx, func(tx *Tx) error { _, err := tx.nextSeq(); return err }); err != nil {
		t.Fatal(err)
	}
	db.bolt.Close() // the process ends: no clean close
	if lined() {
		t.Fatal("the mark outlived an unclean stop after a write")
	}
}

// BenchmarkOneKeyBacklogDue is one poll of a type ordered by key whose
// backlog of 10,000 events has one partition key: Due takes the first and
// passes over the 9,999 behind it (linesBehind).
func BenchmarkOneKeyBacklogDue(b *testing.B) {
	db := keyedEvents(b, 10_000, func(int) string { return "device-1" })
	for b.Loop() {
		if err := db.View(func(tx *Tx) error {
			recs, err := tx.Due("orders.created", time.Now(), 0, Limit{Events: 100}, true, nil)
			if err == nil && len(recs) != 1 {
				b.Fatalf("took %d, want the line's first", len(recs))
			}
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
}

// keyedEvents is an open data file (closed when b ends) with n pending
// events of diskEvent's type, in their lines, the i-th with the partition
// key key(i), stored 1,000 a commit.
func keyedEvents(b *testing.B, n int, key func(i int) string) *DB {
	db, err := Open(filepath.Join(b.TempDir(), "router.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close(context.Background()) })
	now := time.Now()
	for done := 0; done < n; {
		if err := db.Update(context.Background(), func(tx *Tx) error {
			for ; done < n; done++ {
				r := diskEvent(now)
				r.Event.Extensions = []switchyard.Header{{Name: "partitionkey", Value: key(done)}}
				if err := tx.InsertEvent(r, true); err != nil {
					return err
				}
				if done%1000 == 999 {
					done++
					return nil
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	return db
}
