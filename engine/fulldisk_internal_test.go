package engine

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/internal/testkit"
	"github.com/switchyard-router/switchyard/storage"
	"github.com/switchyard-router/switchyard/storage/storagetest"
)

// On a full disk whose reserve is gone (another program took its room),
// the cleanup still removes every delivered record: a chunk of 500
// removals needs more new pages than the file has free, so it is tried at
// half the size until one fits, and grows again as each makes room.
// Before, the 500 failed with ENOSPC at every tick for as long as the
// disk stayed full.
func TestACleanupOnAFullDiskRemovesInSmallerChunks(t *testing.T) {
	at := time.Now().Add(-time.Hour)
	const delivered = 8_000
	db := fullDisk(t, delivered, func(tx *storage.Tx) error {
		// Delivered one after another with ids that land anywhere: the
		// cleanup, in the order they were delivered, removes from every page.
		at = at.Add(time.Millisecond)
		r := anywhereEvent(at)
		if err := tx.InsertEvent(r, false); err != nil {
			return err
		}
		return tx.MarkDelivered(r, at, 0)
	})

	e := &Engine{store: db, clock: newSteadyClock(time.Now, time.Time{}, nil)}
	smallest, tries := cleanupChunk, 0
	n, err := e.inChunks(context.Background(), counted(func(tx *storage.Tx, now time.Time, limit int) (int, error) {
		smallest, tries = min(smallest, limit), tries+1
		return tx.DeleteExpiredDelivered(now.Add(time.Second), limit)
	}))
	if err != nil || n != delivered {
		t.Fatalf("removed %d of %d delivered records: %v", n, delivered, err)
	}
	if smallest == cleanupChunk {
		t.Fatalf("every chunk of %d fitted: the disk was not full enough to test anything", cleanupChunk)
	}
	// Each refusal is a failed commit: the size that fitted is kept, not
	// doubled back into the one the disk refused.
	if fits := (delivered + smallest - 1) / smallest; tries > fits+8 {
		t.Errorf("%d transactions for %d removals in chunks of %d: sizes the disk refused were tried again", tries, n, smallest)
	}
	if next := int(e.chunk.Load()); next != smallest {
		t.Errorf("the next cleanup starts at %d records a chunk, want %d (what fitted)", next, smallest)
	}
	t.Logf("all %d removed in %d transactions; the smallest chunk tried: %d", n, tries, smallest)
}

// The same for the idempotency records older than min_window, the last
// step that makes room (Engine.dropIdempotency): on a full disk without
// its reserve, its chunks shrink until one fits. Before, it had a chunk
// loop of its own, and its 500 failed with ENOSPC at every tick.
func TestAnIdempotencyCleanupOnAFullDiskRemovesInSmallerChunks(t *testing.T) {
	now := time.Now()
	const records = 8_000
	made := now.Add(-2 * time.Hour)
	db := fullDisk(t, records, func(tx *storage.Tx) error {
		// Made one after another with keys that land anywhere: the walk in
		// the order they were made removes records from every page.
		made = made.Add(time.Millisecond)
		return tx.ReplaceIdempotency(uuid.NewString(), &storage.IdemRecord{Status: 202,
			CreatedAt: made, ExpiresAt: made.Add(24 * time.Hour)}, time.Time{})
	})

	e := &Engine{store: db, clock: newSteadyClock(time.Now, time.Time{}, nil)}
	n, err := e.dropIdempotency(context.Background(), config.Idempotency{MinWindow: time.Hour, Window: 24 * time.Hour})
	if err != nil || n != records {
		t.Fatalf("removed %d of %d idempotency records: %v", n, records, err)
	}
	if chunk := int(e.chunk.Load()); chunk == cleanupChunk {
		t.Fatalf("every chunk of %d fitted: the disk was not full enough to test anything", cleanupChunk)
	}
}

// anywhereEvent is an event whose id lands anywhere in the file: each
// removal then needs a page of its own.
func anywhereEvent(now time.Time) *storage.Record {
	return &storage.Record{Event: switchyard.Event{ID: uuid.NewString(), Type: "t", Source: "/s", SpecVersion: "1.0", Data: make([]byte, 100)},
		Tenant: storage.DefaultTenant, CreatedAt: now}
}

// fullDisk opens a data file on a 16 MiB disk and stores n records with
// put (200 to a commit). Then another program fills the disk, the file's
// free pages are taken one event at a time, and the other program gives
// back 256 KiB: room for 64 new pages in all, so that a commit that needs
// more fails, and one that needs a few always fits. (With no room at
// all, the cleanup could not commit even one removal: two runs in ten
// of an earlier version of this test failed so.)
func fullDisk(t *testing.T, n int, put func(*storage.Tx) error) *storage.DB {
	t.Helper()
	dir := testkit.SmallDisk(t, 16<<20)
	db := storagetest.OpenIn(t, dir)
	for range n / 200 {
		if err := db.Update(context.Background(), func(tx *storage.Tx) error {
			for range 200 {
				if err := put(tx); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	filler := testkit.FillDisk(t, dir)
	for db.Update(context.Background(), func(tx *storage.Tx) error { return tx.InsertEvent(anywhereEvent(time.Now()), false) }) == nil {
	}
	st, err := os.Stat(filler)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filler, st.Size()-256<<10); err != nil {
		t.Fatal(err)
	}
	return db
}
