package storage

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
)

// A small group waits only after a commit of delayedGroup writes or more,
// only while it holds less than half as many, and never longer than half
// that commit's time or maxRegroupWait.
func TestRegroupRule(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		last      lastCommit
		n, want   int
		wait      time.Duration
		whyNoWait string
	}{
		{lastCommit{writes: 1, took: ms}, 1, 0, 0, "idle: the last commit held one write"},
		{lastCommit{writes: delayedGroup - 1, took: ms}, 1, 0, 0, "moderate load: a small last commit"},
		{lastCommit{writes: 40, took: 800 * time.Microsecond}, 20, 0, 0, "half the writers are back already"},
		{lastCommit{writes: 40, took: 800 * time.Microsecond}, 1, 20, 400 * time.Microsecond, ""},
		{lastCommit{writes: delayedGroup, took: 10 * ms}, 7, 8, maxRegroupWait, ""},
	} {
		want, wait := c.last.regroup(c.n)
		if want != c.want || wait != c.wait {
			t.Errorf("after %+v, a group of %d: wait %v for %d; want %v for %d %s", c.last, c.n, wait, want, c.wait, c.want, c.whyNoWait)
		}
	}
}

// The convoy on a real file: after a commit of 32 writes, the first writer
// back does not commit alone while the other 15 of half the convoy come
// 20 ms later; all 16 share one commit. A lone write after that waits at
// most the bound, not for writers that never come.
func TestRegroupJoinsTheConvoy(t *testing.T) {
	defer func(d time.Duration) { maxRegroupWait = d }(maxRegroupWait)
	maxRegroupWait = 500 * time.Millisecond // far beyond the 20 ms stagger, even on a slow CI box
	db, err := Open(filepath.Join(t.TempDir(), "router.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	ctx := context.Background()
	insert := func(id string) func(*Tx) error {
		return func(tx *Tx) error {
			r := &Record{Event: switchyard.Event{ID: id, Type: "a", Source: "/t", SpecVersion: "1.0"}, CreatedAt: time.Unix(1, 0)}
			return tx.InsertEvent(r, false)
		}
	}
	concurrently := func(prefix string, n int) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				if err := db.Update(ctx, insert(fmt.Sprintf("%s-%d", prefix, i))); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}

	// The convoy: a write holds the writer until 32 more are queued; they
	// then commit as one group, which takes over a second (one of them
	// sleeps), so the wait after it is maxRegroupWait.
	hold, holding, queued := make(chan error, 1), make(chan struct{}), make(chan struct{})
	go func() {
		hold <- db.Update(ctx, func(tx *Tx) error { close(holding); <-queued; return insert("hold")(tx) })
	}()
	<-holding
	go func() {
		for len(db.writes) < 32 {
			time.Sleep(time.Millisecond)
		}
		close(queued)
	}()
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			err := db.Update(ctx, func(tx *Tx) error {
				if i == 0 {
					time.Sleep(1200 * time.Millisecond)
				}
				return insert(fmt.Sprintf("convoy-%d", i))(tx)
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := <-hold; err != nil {
		t.Fatal(err)
	}

	before := db.Commits()
	first := make(chan error, 1)
	go func() { first <- db.Update(ctx, insert("back-first")) }()
	time.Sleep(20 * time.Millisecond)
	concurrently("back", 15)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n := db.Commits() - before; n != 1 {
		t.Fatalf("16 writers back from a 32-write commit, the first 20 ms ahead: %d commits, want 1", n)
	}

	// The last commit held 16 and took a few ms: a lone write now waits
	// half that, well under maxRegroupWait (slack for a slow fsync).
	start := time.Now()
	if err := db.Update(ctx, insert("lone")); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > maxRegroupWait+250*time.Millisecond {
		t.Fatalf("a lone write took %v after a 16-write commit; the wait is bounded by %v", took, maxRegroupWait)
	}
}
