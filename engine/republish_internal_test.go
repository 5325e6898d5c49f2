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

// The start's check after an unclean stop holds of each output delivered in
// the window its message id and position, not its record: a crash under
// load leaves hundreds of thousands of them, and holding the records took
// the live heap to ~300 MB (a restart killed in a 128 MiB group). 20,000
// delivered events of 4 KiB read from a real data file leave under 200
// bytes an output on the heap, and every output is there.
func TestTheCheckAfterAnUncleanStopHoldsNoRecords(t *testing.T) {
	const n = 20000
	db := storagetest.Open(t)
	t0 := time.Now().Add(-time.Second)
	data := bytes.Repeat([]byte{'d'}, 4<<10)
	for done := 0; done < n; {
		err := db.Update(context.Background(), func(tx *storage.Tx) error {
			for i := done; i < min(done+1000, n); i++ {
				id := fmt.Sprintf("019ae5f2-0000-7000-8000-%012d", i)
				r := &storage.Record{Event: switchyard.Event{ID: id, Type: "t.x", Source: "/t", SpecVersion: "1.0", Data: data},
					Tenant: storage.DefaultTenant, CreatedAt: t0}
				if err := tx.InsertEvent(r, false); err != nil {
					return err
				}
				at := t0.Add(time.Duration(i) * time.Microsecond)
				r.Outputs = []storage.Output{{Destination: "nats.local:t.x", MsgID: id, Delivered: true, DeliveredAt: at,
					Position: &switchyard.Position{Stream: "events", Sequence: uint64(i + 1)}}}
				if err := tx.MarkDelivered(r, at, time.Hour); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		done = min(done+1000, n)
	}
	e := &Engine{store: db}
	before := testkit.LiveHeap()
	sent, err := e.sentLast(7*time.Second, time.Now(), []string{"nats.local"})
	if err != nil {
		t.Fatal(err)
	}
	held := testkit.LiveHeap() - before
	runtime.KeepAlive(sent)
	if got := len(sent["nats.local"].acked); got != n {
		t.Fatalf("%d outputs read, want %d", got, n)
	}
	if per := held / n; per > 200 {
		t.Fatalf("the check holds %d bytes an output (%d MiB for %d): more than their ids and positions", per, held>>20, n)
	}
	t.Logf("%d outputs held in %d KiB (%d bytes each)", n, held>>10, held/n)
}
