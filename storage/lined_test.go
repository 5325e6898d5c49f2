package storage_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/storage"
	"github.com/switchyard-router/switchyard/storage/storagetest"
)

// A queue's lined-up mark holds only while every pending event with a
// partition key is in its line: EndLining sets it only if nothing was
// stored outside a line since BeginLining; an event stored in its line, or
// one without a partition key, keeps it; one with a key stored outside its
// line (a type not ordered by key) removes it, as does one retried from
// the DLQ outside its line.
func TestLinedUpMark(t *testing.T) {
	ctx := context.Background()
	db := storagetest.Open(t)
	t0 := time.Unix(1000, 0)
	n := 0
	insert := func(tx *storage.Tx, withKey, byKey bool) error {
		n++
		ev := switchyard.Event{ID: fmt.Sprint("e", n), Type: "a", Source: "/t", SpecVersion: "1.0"}
		if withKey {
			ev.Extensions = []switchyard.Header{{Name: "partitionkey", Value: "k"}}
		}
		return tx.InsertEvent(&storage.Record{CreatedAt: t0, Event: ev}, byKey)
	}
	step := func(what string, fn func(tx *storage.Tx) error, want bool) {
		t.Helper()
		if err := db.Update(ctx, fn); err != nil {
			t.Fatal(what, err)
		}
		var got bool
		_ = db.View(func(tx *storage.Tx) error { got = tx.LinedUp("a"); return nil })
		if got != want {
			t.Fatalf("after %s: lined up %v, want %v", what, got, want)
		}
	}
	// end fails the write (the writer's goroutine may not end the test)
	// when EndLining's answer is not want.
	end := func(want bool) func(tx *storage.Tx) error {
		return func(tx *storage.Tx) error {
			ok, err := tx.EndLining("a")
			if err == nil && ok != want {
				return fmt.Errorf("EndLining: %v, want %v", ok, want)
			}
			return err
		}
	}
	step("nothing yet", func(tx *storage.Tx) error { return nil }, false)
	step("begin", func(tx *storage.Tx) error { return tx.BeginLining("a") }, false)
	step("an event outside its line", func(tx *storage.Tx) error { return insert(tx, true, false) }, false)
	step("end after it", end(false), false)
	step("begin again", func(tx *storage.Tx) error { return tx.BeginLining("a") }, false)
	step("end", end(true), true)
	step("an event in its line", func(tx *storage.Tx) error { return insert(tx, true, true) }, true)
	step("an event without a key", func(tx *storage.Tx) error { return insert(tx, false, false) }, true)
	step("an event of another queue outside its line", func(tx *storage.Tx) error {
		return tx.InsertEvent(&storage.Record{CreatedAt: t0, Event: switchyard.Event{ID: "b1", Type: "b", Source: "/t", SpecVersion: "1.0",
			Extensions: []switchyard.Header{{Name: "partitionkey", Value: "k"}}}}, false)
	}, true)
	step("two outside their line", func(tx *storage.Tx) error {
		if err := insert(tx, true, false); err != nil {
			return err
		}
		return insert(tx, true, false)
	}, false)
	step("lined again", func(tx *storage.Tx) error {
		if err := tx.BeginLining("a"); err != nil {
			return err
		}
		return end(true)(tx)
	}, true)
	step("to the DLQ and back outside its line", func(tx *storage.Tx) error {
		r, err := tx.Record("e1")
		if err != nil {
			return err
		}
		if err := tx.MoveToDLQ(r, t0, "test"); err != nil {
			return err
		}
		return tx.RetryDeadLetter(r, t0, false)
	}, false)
}

// EndLining marks the queue lined only if no event was stored outside its
// line since BeginLining, also within one transaction (a group commit
// shares one Tx among writers) after an earlier event already removed the
// mark.
func TestEndLiningAfterAnEarlierRemovalInTheSameTransaction(t *testing.T) {
	db := storagetest.Open(t)
	t0 := time.Unix(1000, 0)
	ev := func(id string) *storage.Record {
		return &storage.Record{CreatedAt: t0, Event: switchyard.Event{ID: id, Type: "a", Source: "/t", SpecVersion: "1.0",
			Extensions: []switchyard.Header{{Name: "partitionkey", Value: "k"}}}}
	}
	var ended bool
	if err := db.Update(context.Background(), func(tx *storage.Tx) (err error) {
		if err := tx.InsertEvent(ev("e1"), false); err != nil { // removes the mark
			return err
		}
		if err := tx.BeginLining("a"); err != nil {
			return err
		}
		if err := tx.InsertEvent(ev("e2"), false); err != nil { // outside its line, after BeginLining
			return err
		}
		ended, err = tx.EndLining("a")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if ended {
		t.Fatal("EndLining marked the queue lined though e2 was stored outside its line after BeginLining")
	}
}
