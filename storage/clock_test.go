package storage

import (
	"context"
	"errors"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The clock the router told the file rides on the commits that happen
// anyway, once it is a second past the one kept (a SIGKILL loses at most
// that second), but not on one that fails; a clean close keeps the last
// one told; the next open gives it back.
func TestTheClockRidesOnCommits(t *testing.T) {
	db := openTemp(t)
	kept := func() time.Time {
		var mark time.Time
		db.bolt.View(func(tx *bolt.Tx) error { mark = readClockMark(tx); return nil })
		return mark
	}
	commit := func() {
		if err := db.Update(context.Background(), func(*Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for _, step := range []struct {
		told, want time.Time
		commit     bool
	}{
		{t0, time.Time{}, false},                   // told, no commit yet: nothing written
		{t0, t0, true},                             // the first commit keeps it
		{t0.Add(500 * time.Millisecond), t0, true}, // under a second past: not yet
		{t0.Add(300 * time.Millisecond), t0, true}, // earlier than told before: ignored
		{t0.Add(1200 * time.Millisecond), t0.Add(1200 * time.Millisecond), true},
	} {
		db.SeeTime(step.told)
		if step.commit {
			commit()
		}
		if got := kept(); !got.Equal(step.want) {
			t.Fatalf("told %v (commit %v): the file keeps %v, want %v", step.told.Sub(t0), step.commit, got.UTC(), step.want.UTC())
		}
	}
	// A commit that fails keeps nothing.
	db.SeeTime(t0.Add(3 * time.Second))
	if err := db.Update(context.Background(), func(*Tx) error { return errors.New("refused") }); err == nil {
		t.Fatal("a write whose function failed committed")
	}
	if got, want := kept(), t0.Add(1200*time.Millisecond); !got.Equal(want) {
		t.Fatalf("after a failed commit the file keeps %v, want %v", got.UTC(), want.UTC())
	}
	db.SeeTime(t0.Add(4 * time.Second))
	if err := db.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	re, err := Open(db.Path(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer re.Close(context.Background())
	if got, want := re.ClockMark(), t0.Add(4*time.Second); !got.Equal(want) {
		t.Errorf("after a clean close the file gives %v, want %v", got.UTC(), want.UTC())
	}
}
