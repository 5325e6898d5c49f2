package engine_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/internal/testkit"
	"github.com/switchyard-router/switchyard/storage"
	"github.com/switchyard-router/switchyard/storage/storagetest"
)

// A route into a subject no stream captures: every attempt fails, and the
// next comes a minute later.
const retryAMinuteLater = `
event "x.retry" {
  max_retries = 5
  backoff {
    delay      = "1m"
    multiplier = 1
  }
  route {
    to      = "nats.local"
    subject = "nowhere.retry"
  }
}
`

// A router started with its wall clock a day behind the time its data file
// last saw (an edge node without a real-time clock, booting at an old
// saved time) goes on from that time: an event whose retry was due a
// minute later is tried a minute later. Before, the restarted router took
// the wall clock as it was, and the retry waited a day and a minute.
func TestARestartWithTheClockBehindGoesOnFromTheFile(t *testing.T) {
	h := newHarness(t, retryAMinuteLater, true)
	ctx := context.Background()
	id := h.ingest("x.retry", 1)[0]
	h.pollAll("x.retry")
	first := h.record(id)
	if first.Attempts != 1 || first.State != storage.StatePending {
		t.Fatalf("after the first attempt: %s, %d attempts", first.State, first.Attempts)
	}
	h.clock.Advance(10 * time.Second)
	seen := h.eng.Now() // the file keeps what the clock gave at its next commit
	h.ingest("x.retry", 1)
	h.eng.Close(ctx)
	if err := h.db.Close(ctx); err != nil {
		t.Fatal(err)
	}

	db, err := storage.Open(h.db.Path(), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	if mark := db.ClockMark(); !mark.Equal(seen) {
		t.Fatalf("the file kept %v as its clock, want %v", mark.UTC(), seen.UTC())
	}
	behind := &clock{now: seen.Add(-24 * time.Hour)}
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	eng, err := engine.New(db, h.cfg, []switchyard.Sink{h.sink}, engine.Options{
		Now: behind.Now, CleanupInterval: time.Hour, Registerer: reg,
		Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn}),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	if now := eng.Now(); now.Before(seen) {
		t.Errorf("the restarted engine's clock is %v, behind the %v its file saw", now.UTC(), seen.UTC())
	}
	if !strings.Contains(logs.String(), "the system clock is behind the time this data file last saw") || !strings.Contains(logs.String(), "behind=24h0m0s") {
		t.Errorf("no warning that the clock is a day behind the file's: %q", logs.String())
	}
	behind.Advance(time.Minute)
	if _, err := eng.Loop("x.retry").Poll(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err := eng.EventStatus(storage.DefaultTenant, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Attempts != 2 {
		t.Errorf("a minute after the restart: %d attempts (the retry due %v), want 2", rec.Attempts, first.NextAttemptAt.UTC())
	}
	if ahead := testkit.MetricSum(t, reg, "switchyard_clock_ahead_seconds", nil); ahead != (24 * time.Hour).Seconds() {
		t.Errorf("switchyard_clock_ahead_seconds = %v, want a day (%v)", ahead, (24 * time.Hour).Seconds())
	}
}

// After an unclean stop, an earlier event's message is not taken for a
// pending event of the same source, id and time (a corrected resend, its
// first record gone) made since by a router whose clock runs an hour
// ahead of the broker's (the data file's time carried over a step back):
// the new event would then never be sent, a loss. Two reviews' cases,
// against versions that read brokers' times by the router's lead, and
// that took a message carrying the event's time attribute for its own.
func TestRepublishDoesNotTakeAnEarlierMessageForANewEvent(t *testing.T) {
	first := newHarness(t, tbRoute, true)
	old := switchyard.Event{ID: "re-1", Type: "t.b", Source: "/t", SpecVersion: "1.0", Time: time.Now().Add(-time.Minute).UTC(), Data: []byte(`{"v":1}`)}
	if res := first.sink.Publish(context.Background(), []*switchyard.Message{{Event: &old, Topic: "t.b", MsgID: old.ID}}); res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	time.Sleep(1200 * time.Millisecond) // past the stream's duplicates window
	path := filepath.Join(t.TempDir(), "router.db")
	storagetest.MakeWithClock(t, path, time.Now().Add(time.Hour))
	ahead := storagetest.OpenAt(t, path)
	eng, err := engine.New(ahead, first.cfg, []switchyard.Sink{first.sink}, engine.Options{CleanupInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(context.Background())
	nu := old
	nu.Data = []byte(`{"v":2}`)
	if _, err := eng.Ingest(context.Background(), &engine.IngestRequest{Tenant: "default", Events: []engine.IngestEvent{{Event: nu}},
		Render: func([]engine.Outcome) engine.Response { return engine.Response{Status: 202} }}); err != nil {
		t.Fatal(err)
	}
	done, err := eng.Republish(context.Background(), []string{"nats.local"}, 7*time.Second)
	if err != nil || done.Recalled != 0 {
		t.Fatalf("Republish = %+v, %v: the earlier message was taken for the new event", done, err)
	}
}
