package engine_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/internal/testkit"
	"github.com/switchyard-router/switchyard/storage"
	"github.com/switchyard-router/switchyard/storage/storagetest"
)

// An ingest whose commit the disk took but whose last sync it refused once
// (an SD card's write-back error) is acknowledged: it is stored, and the
// next commit made it durable. Refused twice, the client is told 503 that
// it may be stored, not that nothing was: it is, and sent again with its
// Idempotency-Key it gets the first answer, stored once.
func TestIngestOnADiskThatRefusesItsSync(t *testing.T) {
	h, disk := onFaultDisk(t, twoRoutes, true)
	db := h.db
	request := func(id string) *engine.IngestRequest {
		return &engine.IngestRequest{
			Tenant: storage.DefaultTenant, Endpoint: "POST /v1/events", Key: "key-" + id, Digest: []byte(id),
			Events: []engine.IngestEvent{{Event: switchyard.Event{ID: id, Type: "t.two", Source: "/t", SpecVersion: "1.0"}}},
			Render: func([]engine.Outcome) engine.Response { return engine.Response{Status: 202, Body: []byte(id)} },
		}
	}

	disk.FailSync(syscall.EIO, testkit.MetaPages)
	if _, err := h.eng.Ingest(context.Background(), request("once")); err != nil {
		t.Fatalf("ingest with one sync refused: %v, want it acknowledged", err)
	}
	if h.record("once") == nil {
		t.Fatal("the acknowledged event is not stored")
	}

	disk.FailSync(syscall.EIO, testkit.MetaPages)
	disk.FailSync(syscall.EIO, testkit.MetaPages)
	_, err := h.eng.Ingest(context.Background(), request("twice"))
	var coded *switchyard.Error
	if !errors.As(err, &coded) || coded.Code != switchyard.EUNAVAILABLE || !strings.Contains(coded.Message, "may have taken effect") || strings.Contains(coded.Message, "nothing was stored") {
		t.Fatalf("ingest with the sync and its confirmation refused: %v, want 503 saying it may be stored", err)
	}
	if n := disk.SyncsFailed(); n != 3 {
		t.Fatalf("syncs refused: %d, want 3", n)
	}
	if h.record("twice") == nil {
		t.Fatal("the unconfirmed event is not stored: the answer's 'may be' was not needed")
	}
	// The resend's replay promises what a 202 does: it waits for a commit
	// that syncs, which covers the first (before, it was served from the
	// unconfirmed record with no sync since).
	commits := db.Commits()
	resp, err := h.eng.Ingest(context.Background(), request("twice"))
	if err != nil || !resp.Replayed || string(resp.Body) != "twice" {
		t.Fatalf("the same request sent again: %+v, %v, want the first answer replayed", resp, err)
	}
	if db.Commits() == commits || db.Writable() != nil {
		t.Fatalf("the replay was given with no commit since (%d) or the file not writable (%v)", db.Commits()-commits, db.Writable())
	}
}

// onFaultDisk is a harness whose engine stores on a FaultDisk (h.db).
func onFaultDisk(t *testing.T, policies string, fake bool, extra ...any) (*harness, *testkit.FaultDisk) {
	disk := testkit.NewFaultDisk(t)
	db := storagetest.OpenIn(t, disk.Dir)
	h := newHarness(t, policies, fake, append(extra, storeWrap(func(engine.Store) engine.Store { return db }))...)
	h.db = db
	return h, disk
}

// A delivery outcome whose commit the disk applied but would not confirm
// stands as recorded once: recorded again, a failed attempt counted twice
// (two history entries, max_retries = 1 spent on one attempt: a review).
func TestAnUnconfirmedOutcomeIsRecordedOnce(t *testing.T) {
	h, disk := onFaultDisk(t, `
kafka "busy" { brokers = ["127.0.0.1:1"] }
event "t.busy" {
  max_retries = 1
  route {
    to    = "kafka.busy"
    topic = "x"
  }
}
`, true, busySink{name: "kafka.busy"})
	id := h.ingest("t.busy", 1)[0]
	disk.FailSync(syscall.EIO, testkit.MetaPages)
	disk.FailSync(syscall.EIO, testkit.MetaPages)
	if _, err := h.eng.Loop("t.busy").Poll(context.Background()); err != nil {
		t.Fatalf("poll: %v", err)
	}
	if n := disk.SyncsFailed(); n != 2 {
		t.Fatalf("syncs refused: %d, want 2", n)
	}
	if rec := h.record(id); rec.State != storage.StatePending || rec.Attempts != 1 || len(rec.History) != 1 {
		t.Fatalf("one attempt made: %s, %d attempts, %d in history", rec.State, rec.Attempts, len(rec.History))
	}
}

// A catch-all type's first event, stored by a commit the disk would not
// confirm, gets its loop and is delivered: the 503 returned before the
// new type was settled, and it waited for a restart (a review).
func TestAnUnconfirmedNewTypeIsDelivered(t *testing.T) {
	h, disk := onFaultDisk(t, catchAllOf8, false)
	disk.FailSync(syscall.EIO, testkit.MetaPages)
	disk.FailSync(syscall.EIO, testkit.MetaPages)
	_, err := h.eng.Ingest(context.Background(), &engine.IngestRequest{
		Tenant: storage.DefaultTenant, Endpoint: "POST /v1/events",
		Events: []engine.IngestEvent{{Event: switchyard.Event{ID: "e1", Type: "t.new", Source: "/t", SpecVersion: "1.0"}}},
		Render: func([]engine.Outcome) engine.Response { return engine.Response{Status: 202} },
	})
	if !errors.Is(err, storage.ErrUnconfirmed) {
		t.Fatalf("ingest with two syncs refused: %v, want ErrUnconfirmed", err)
	}
	h.waitDelivered([]string{"e1"}, 10*time.Second)
}

// A replay waits for the disk through other failures: a commit that fails
// before its meta page, after an unconfirmed one, does not make the file
// look confirmed (a 202 replay was given with nothing synced, the event
// not on the disk: a review), and a replay whose confirming commit fails
// says the request may have taken effect, not that nothing was stored.
func TestAReplayWaitsForTheDiskThroughOtherFailures(t *testing.T) {
	h, disk := onFaultDisk(t, twoRoutes, true)
	db := h.db
	request := &engine.IngestRequest{
		Tenant: storage.DefaultTenant, Endpoint: "POST /v1/events", Key: "k", Digest: []byte("d"),
		Events: []engine.IngestEvent{{Event: switchyard.Event{ID: "x", Type: "t.two", Source: "/t", SpecVersion: "1.0"}}},
		Render: func([]engine.Outcome) engine.Response { return engine.Response{Status: 202} },
	}
	disk.FailSync(syscall.EIO, testkit.MetaPages)
	disk.FailSync(syscall.EIO, testkit.MetaPages)
	if _, err := h.eng.Ingest(context.Background(), request); !errors.Is(err, storage.ErrUnconfirmed) {
		t.Fatalf("ingest with two syncs refused: %v, want ErrUnconfirmed", err)
	}
	disk.FailSync(syscall.EIO, testkit.AnySync) // a commit refused before its meta page
	if err := db.Update(context.Background(), func(tx *storage.Tx) error { return tx.StatePut("t", []byte("k"), []byte("v"), time.Time{}) }); err == nil || errors.Is(err, storage.ErrUnconfirmed) {
		t.Fatalf("a commit refused before its meta page: %v", err)
	}
	disk.FailSync(syscall.EIO, testkit.AnySync) // the replay's confirming commit
	_, err := h.eng.Ingest(context.Background(), request)
	var coded *switchyard.Error
	if !errors.As(err, &coded) || !strings.Contains(coded.Message, "may have taken effect") {
		t.Fatalf("the replay whose confirming commit failed: %v, want 503 saying it may have taken effect", err)
	}
	resp, err := h.eng.Ingest(context.Background(), request)
	if err != nil || !resp.Replayed {
		t.Fatalf("the replay once the disk syncs: %+v, %v", resp, err)
	}
	if !onDisk(t, disk, storage.EventKey(storage.DefaultTenant, "x")) {
		t.Fatal("a 202 was replayed for an event the disk does not hold")
	}
}

// onDisk reports whether what the disk holds of the data file (a copy,
// opened anew) has the record under key.
func onDisk(t *testing.T, disk *testkit.FaultDisk, key string) bool {
	t.Helper()
	db := storagetest.OpenAt(t, disk.Held(t, "router.db"))
	err := db.View(func(tx *storage.Tx) error { _, err := tx.Record(key); return err })
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}
