package main

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// `router tail -o json` against a running router prints each published
// output once, with its type, tenant, the stored event's id, destination,
// stream position and the event;
// the table form names the same; a tail of another type prints none, and
// says the router has no such type.
func TestTail(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the router binary")
	}
	r := newCrashRouter(t, 2*time.Minute)
	r.start()
	all, _ := startTail(t, r, "-o", "json")
	other, otherErr := startTail(t, r, "-o", "json", "-type", "not.this.one")
	table, tableErr := startTail(t, r, "-type", crashType)
	// A type the router has neither configured nor stored is said to be so.
	if want := `no event type "not.this.one" configured or stored`; !strings.Contains(otherErr.String(), want) {
		t.Errorf("router tail -type not.this.one said %q, want %q", otherErr.String(), want)
	}
	if tableErr.String() != "" {
		t.Errorf("router tail -type %s said %q", crashType, tableErr.String())
	}
	ids := postBatches(t, r.client, crashType, 5)
	select {
	case line := <-table:
		if !strings.Contains(line, crashType) || !strings.Contains(line, " → nats.local:"+crashSubject+".events (stream "+crashStream+" #") {
			t.Fatalf("table line: %q", line)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the table tail printed nothing in 30s")
	}

	seen := map[string]bool{}
	deadline := time.After(30 * time.Second)
	for len(seen) < len(ids) {
		select {
		case line := <-all:
			var p struct {
				Type        string `json:"type"`
				Tenant      string `json:"tenant"`
				EventID     string `json:"event_id"`
				Destination string `json:"destination"`
				Position    struct {
					Stream   string `json:"stream"`
					Sequence uint64 `json:"sequence"`
				} `json:"position"`
				Event struct {
					ID   string          `json:"id"`
					Data json.RawMessage `json:"data"`
				} `json:"event"`
			}
			if err := json.Unmarshal([]byte(line), &p); err != nil {
				t.Fatalf("tail line %q: %v", line, err)
			}
			if p.Type != crashType || p.Destination != "nats.local:"+crashSubject+".events" ||
				p.Position.Stream != crashStream || p.Position.Sequence == 0 || len(p.Event.Data) == 0 ||
				p.Tenant != "default" || p.EventID != p.Event.ID {
				t.Fatalf("tail line: %s", line)
			}
			if seen[p.Event.ID] {
				t.Fatalf("%s printed twice", p.Event.ID)
			}
			seen[p.Event.ID] = true
		case <-deadline:
			t.Fatalf("tail printed %d of %d events in 30s", len(seen), len(ids))
		}
	}
	select {
	case line := <-other:
		t.Fatalf("a tail of another type printed %s", line)
	case <-time.After(200 * time.Millisecond):
	}
}

// startTail runs `router tail` against r and returns its output lines.
func startTail(t *testing.T, r *crashRouter, args ...string) (<-chan string, *testkit.Buffer) {
	t.Helper()
	cmd := exec.Command(r.bin, append([]string{"tail", "-socket", r.socket}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := new(testkit.Buffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() && stderr.String() != "" {
			t.Logf("router tail %v: %s", args, stderr.String())
		}
	})
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// The stream is open once the router has it registered: give the
	// request a moment before the test posts.
	waitTailing(t, r)
	return lines, stderr
}

// waitTailing waits until the router counts one more live tail than the
// tails this test started before.
func waitTailing(t *testing.T, r *crashRouter) {
	t.Helper()
	r.tails++
	testkit.Eventually(t, "the tail to be registered", 10*time.Second, func() bool {
		return metricValue(t, r.client, "switchyard_tail_watchers") >= float64(r.tails)
	})
}

// A stop (SIGTERM) while `router tail` streams ends the stream at once and
// stops cleanly: the open stream held http.Server.Shutdown for the whole
// shutdown timeout (30 s), which left the engine and the data file no time
// to close, the exit status was 1 and the next start checked the whole
// file. The tail says the router ended the stream.
func TestStopEndsTheTail(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the router binary")
	}
	r := newCrashRouter(t, 2*time.Minute)
	r.start()
	_, tailErr := startTail(t, r)
	cmd, exited := r.cmd, r.exited
	begin := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		r.dumpLog()
		t.Fatal("no exit 20 s after SIGTERM with a tail open")
	}
	took := time.Since(begin)
	r.cmd = nil
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		r.dumpLog()
		t.Fatalf("exit status %d after %v", code, took)
	}
	testkit.Eventually(t, "the tail to say the stream ended", 5*time.Second, func() bool {
		return strings.Contains(tailErr.String(), "the router ended the stream")
	})
	r.start()
	if log := mustRead(t, r.logPath); strings.Contains(log, "did not stop cleanly") || strings.Contains(log, "deadline exceeded") {
		t.Fatalf("the stop with a tail open (%v) was not clean:\n%s", took, log)
	}
}
