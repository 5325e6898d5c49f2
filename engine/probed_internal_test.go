package engine

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/internal/testkit"
	"github.com/switchyard-router/switchyard/storage"
	"github.com/switchyard-router/switchyard/storage/storagetest"
)

// The keys of events waiting out an outage in memory hold none of their
// records: a decoded record's strings share one copy of its bytes, data and
// all, and a loop keeps up to maxWaits keys for as long as an outage
// lasts. 64 events of 1 MiB read from a real data file, noted and dropped,
// leave far less than 64 MiB on the heap (a review: all of it, before).
func TestNotedEventsDoNotHoldTheirData(t *testing.T) {
	const n = 64
	db := storagetest.Open(t)
	ids := make([]string, n)
	err := db.Update(context.Background(), func(tx *storage.Tx) error {
		for i := range ids {
			ids[i] = fmt.Sprintf("big-%02d", i)
			r := &storage.Record{Event: switchyard.Event{ID: ids[i], Type: "t.big", Source: "/t", SpecVersion: "1.0",
				Data: bytes.Repeat([]byte{'d'}, 1<<20)}, Tenant: storage.DefaultTenant, CreatedAt: time.Now()}
			if err := tx.InsertEvent(r, false); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	l := &Loop{probed: make(map[string]uint64)}
	before := testkit.LiveHeap()
	for _, id := range ids { // one at a time: each record dropped once noted
		var recs []*storage.Record
		err := db.View(func(tx *storage.Tx) error {
			r, err := tx.Record(storage.EventKey(storage.DefaultTenant, id))
			recs = append(recs, r)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		l.inRound(recs, l.forgets)
	}
	held := testkit.LiveHeap() - before
	runtime.KeepAlive(l)
	if len(l.probed) != n {
		t.Fatalf("%d events noted, want %d", len(l.probed), n)
	}
	if held > 16<<20 {
		t.Fatalf("%d noted events of 1 MiB hold %d MiB of the heap: their keys keep their records' data", n, held>>20)
	}
	t.Logf("%d noted events hold %d KiB", n, held>>10)
}
