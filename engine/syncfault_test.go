package engine_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

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
	disk := testkit.NewFaultDisk(t)
	db := storagetest.OpenIn(t, disk.Dir)
	h := newHarness(t, twoRoutes, true, storeWrap(func(engine.Store) engine.Store { return db }))
	metaPages := int64(2 * os.Getpagesize()) // bbolt's meta page, written last
	request := func(id string) *engine.IngestRequest {
		return &engine.IngestRequest{
			Tenant: storage.DefaultTenant, Endpoint: "POST /v1/events", Key: "key-" + id, Digest: []byte(id),
			Events: []engine.IngestEvent{{Event: switchyard.Event{ID: id, Type: "t.two", Source: "/t", SpecVersion: "1.0"}}},
			Render: func([]engine.Outcome) engine.Response { return engine.Response{Status: 202, Body: []byte(id)} },
		}
	}

	disk.FailSync(syscall.EIO, metaPages)
	if _, err := h.eng.Ingest(context.Background(), request("once")); err != nil {
		t.Fatalf("ingest with one sync refused: %v, want it acknowledged", err)
	}
	if h.record("once") == nil {
		t.Fatal("the acknowledged event is not stored")
	}

	disk.FailSync(syscall.EIO, metaPages)
	disk.FailSync(syscall.EIO, metaPages)
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
	resp, err := h.eng.Ingest(context.Background(), request("twice"))
	if err != nil || !resp.Replayed || string(resp.Body) != "twice" {
		t.Fatalf("the same request sent again: %+v, %v, want the first answer replayed", resp, err)
	}
}
