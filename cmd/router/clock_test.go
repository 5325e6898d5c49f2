package main

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/storage/storagetest"
)

// The real binary, started on a data file whose last router gave times
// two hours ahead of this system's clock (a node booted with its clock
// behind, before NTP answers), goes on from the file's time, says so, and
// gives every time from that one clock: the gauge, an event's created_at,
// and the time the API gives an event that came without one (the
// console's rate history keeps the system clock of its samples), and the
// CLI's ages count from it. Before, it
// took the system clock, and what the last run stored waited two hours.
func TestARouterStartedBehindItsFilesClockGoesOnFromIt(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	path, sock := writeConfig(t, "")
	ahead := 2 * time.Hour
	storagetest.MakeWithClock(t, filepath.Join(filepath.Dir(path), "r.db"), time.Now().Add(ahead))
	c, logs, _ := serveBinaryProcess(t, path, sock)
	if !strings.Contains(logs.String(), "the system clock is behind the time this data file last saw") {
		t.Errorf("no warning at the start:\n%s", logs.String())
	}
	if got := metricValue(t, c, "switchyard_clock_ahead_seconds"); got < ahead.Seconds()-60 || got > ahead.Seconds() {
		t.Errorf("switchyard_clock_ahead_seconds = %v, want about %v", got, ahead.Seconds())
	}
	resp, err := c.Post("http://r/v1/events", "application/cloudevents+json",
		strings.NewReader(`{"specversion":"1.0","type":"t.order","source":"/clock","id":"clock-1","data":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 202 {
		t.Fatalf("POST: %d", resp.StatusCode)
	}
	var view struct {
		CreatedAt time.Time `json:"created_at"`
		Event     struct {
			Time time.Time `json:"time"`
		} `json:"event"`
	}
	if err := json.Unmarshal([]byte(get(t, c, "/v1/events/clock-1?include=event")), &view); err != nil {
		t.Fatal(err)
	}
	// The console's rates keep the system clock, as their samples do: a
	// view at the router's time reached two hours back (a review).
	var hist struct {
		Window float64 `json:"window_seconds"`
	}
	if err := json.Unmarshal([]byte(get(t, c, "/v1/stats/history")), &hist); err != nil || hist.Window > 600 {
		t.Errorf("/v1/stats/history's window is %vs (%v), want the minutes since the start", hist.Window, err)
	}
	// The CLI counts ages from the router's time, which its answers'
	// Switchyard-Clock gives (every age read 0s: "moved 0s ago").
	cl, err := (&apiFlags{socket: sock}).client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.do(context.Background(), http.MethodGet, "/healthz", nil, nil); err != nil {
		t.Fatal(err)
	}
	want := time.Now().Add(ahead)
	for name, got := range map[string]time.Time{"created_at": view.CreatedAt, "the event's time": view.Event.Time, "the CLI's now": cl.now()} {
		if d := got.Sub(want); d < -time.Minute || d > time.Minute {
			t.Errorf("%s is %v, want about %v (the file's clock)", name, got.UTC(), want.UTC())
		}
	}
}
