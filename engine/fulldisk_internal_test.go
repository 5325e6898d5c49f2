package engine

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/internal/testkit"
	"github.com/switchyard-router/switchyard/storage"
)

// On a full disk whose reserve is gone (another program took its room),
// the cleanup still removes every delivered record: a chunk of 500
// removals needs more new pages than the file has free, so it is tried at
// half the size until one fits, and grows again as each makes room.
// Before, the 500 failed with ENOSPC at every tick for as long as the
// disk stayed full.
func TestACleanupOnAFullDiskRemovesInSmallerChunks(t *testing.T) {
	dir := testkit.SmallDisk(t, 16<<20)
	db, err := storage.Open(filepath.Join(dir, "router.db"), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	now := time.Now()
	event := func() *storage.Record { // ids that land anywhere: each removal its own page
		return &storage.Record{Event: switchyard.Event{ID: uuid.NewString(), Type: "t", Source: "/s", SpecVersion: "1.0", Data: make([]byte, 100)},
			Tenant: storage.DefaultTenant, CreatedAt: now}
	}
	const delivered = 8_000
	for range delivered / 200 {
		if err := db.Update(context.Background(), func(tx *storage.Tx) error {
			for range 200 {
				r := event()
				if err := tx.InsertEvent(r, false); err != nil {
					return err
				}
				if err := tx.MarkDelivered(r, now, 0); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// The disk full, then the file's free pages taken one event at a time.
	testkit.FillDisk(t, dir)
	for db.Update(context.Background(), func(tx *storage.Tx) error { return tx.InsertEvent(event(), false) }) == nil {
	}

	e := &Engine{store: db, opts: Options{Now: time.Now}}
	smallest, tries := cleanupChunk, 0
	n, err := e.inChunks(context.Background(), func(tx *storage.Tx, now time.Time, limit int) (int, error) {
		smallest, tries = min(smallest, limit), tries+1
		return tx.DeleteExpiredDelivered(now.Add(time.Second), limit)
	})
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
