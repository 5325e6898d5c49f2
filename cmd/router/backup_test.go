package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// A backup taken over the socket while events keep arriving is a
// consistent data file: `router db check` passes on it, and a router
// started on the copy has every event acknowledged before the backup began.
func TestBackupUnderLoadRestores(t *testing.T) {
	path, sock := writeConfig(t, "")
	runRouter(t, path, sock)
	c := testkit.UnixClient(sock, 10*time.Second)

	var mu sync.Mutex
	var acked []string
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				id := fmt.Sprintf("load-%d-%d", w, i)
				resp, err := c.Post("http://r/v1/events", "application/cloudevents+json",
					strings.NewReader(`{"specversion":"1.0","type":"t.order","source":"/t","id":"`+id+`","data":{"pad":"`+strings.Repeat("x", 300)+`"}}`))
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 202 {
					mu.Lock()
					acked = append(acked, id)
					mu.Unlock()
				}
			}
		})
	}
	time.Sleep(time.Second)
	mu.Lock()
	before := append([]string(nil), acked...)
	mu.Unlock()
	out := filepath.Join(t.TempDir(), "backup.db")
	var stdout, stderr bytes.Buffer
	if err := NewMain(nil, &stdout, &stderr).Run(context.Background(), []string{"backup", out, "-socket", sock}); err != nil {
		t.Fatalf("backup: %v\n%s", err, stderr.String())
	}
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	t.Logf("%s; %d events acknowledged before it began, %d in all", strings.TrimSpace(stdout.String()), len(before), len(acked))
	if len(before) < 100 {
		t.Fatalf("only %d events before the backup: no load to speak of", len(before))
	}

	stdout.Reset()
	if err := NewMain(nil, &stdout, &stderr).Run(context.Background(), []string{"db", "check", out}); err != nil {
		t.Fatalf("db check of the backup: %v\n%s", err, stdout.String())
	}

	// Restore: a router on the copy has every event acknowledged before.
	dir := filepath.Dir(out)
	restored := filepath.Join(dir, "restored")
	os.Mkdir(restored, 0o700)
	os.Rename(out, filepath.Join(restored, "r.db"))
	rpath := filepath.Join(restored, "policies.hcl")
	rsock := filepath.Join(restored, "r.sock")
	os.WriteFile(rpath, []byte(strings.NewReplacer(filepath.Dir(path), restored).Replace(mustRead(t, path))), 0o600)
	runRouter(t, rpath, rsock)
	rc := testkit.UnixClient(rsock, 10*time.Second)
	for _, id := range before {
		resp, err := rc.Get("http://r/v1/events/" + id)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("event %s, acknowledged before the backup began, is not in the copy: %d", id, resp.StatusCode)
		}
	}
}

// A backup never overwrites or removes a file it did not make: OUT that
// exists is refused, and so is an OUT.partial that exists (it was removed
// along with the refusal, found by an adversarial trial), left as it was.
func TestBackupLeavesOthersFiles(t *testing.T) {
	path, sock := writeConfig(t, "")
	runRouter(t, path, sock)
	dir := t.TempDir()
	out := filepath.Join(dir, "keep.db")
	for _, existing := range []string{out, out + ".partial"} {
		os.WriteFile(existing, []byte("precious"), 0o600)
		var stdout, stderr bytes.Buffer
		err := NewMain(nil, &stdout, &stderr).Run(context.Background(), []string{"backup", out, "-socket", sock})
		if err == nil || !strings.Contains(err.Error(), "exists") {
			t.Errorf("backup over %s: %v", filepath.Base(existing), err)
		}
		if got, err := os.ReadFile(existing); err != nil || string(got) != "precious" {
			t.Fatalf("%s after the refused backup: %q %v", filepath.Base(existing), got, err)
		}
		os.Remove(existing)
	}
	var stdout, stderr bytes.Buffer
	if err := NewMain(nil, &stdout, &stderr).Run(context.Background(), []string{"backup", out, "-socket", sock}); err != nil {
		t.Fatalf("a backup to a free name: %v\n%s", err, stderr.String())
	}
	if _, err := os.Stat(out + ".partial"); !os.IsNotExist(err) {
		t.Errorf("the .partial is left after a backup: %v", err)
	}
}

// `router db check` finds a damaged data file (bytes overwritten in the
// middle) and says so with exit code 1, without crashing or changing it.
func TestDBCheckFindsDamage(t *testing.T) {
	path, sock := writeConfig(t, "")
	stop := runRouter(t, path, sock)
	c := testkit.UnixClient(sock, 10*time.Second)
	for b := range 20 {
		var batch []string
		for i := range 100 {
			batch = append(batch, fmt.Sprintf(`{"specversion":"1.0","type":"t.order","source":"/t","id":"d-%d-%d","data":%q}`, b, i, strings.Repeat("y", 200)))
		}
		resp, err := c.Post("http://r/v1/events", "application/cloudevents-batch+json", strings.NewReader("["+strings.Join(batch, ",")+"]"))
		if err != nil || resp.StatusCode != 202 {
			t.Fatalf("post: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	stop()
	db := filepath.Join(filepath.Dir(path), "r.db")
	var out bytes.Buffer
	if err := NewMain(nil, &out, &out).Run(context.Background(), []string{"db", "check", db}); err != nil || !strings.Contains(out.String(), "2000 events") {
		t.Fatalf("a good file: %v\n%s", err, out.String())
	}
	b, _ := os.ReadFile(db)
	for i := 64 << 10; i < 64<<10+16<<10; i++ {
		b[i] = 0xA5
	}
	os.WriteFile(db, b, 0o600)
	out.Reset()
	err := NewMain(nil, &out, &out).Run(context.Background(), []string{"db", "check", db})
	if err == nil || exitCode(err) != 1 || !strings.Contains(out.String(), "problem:") {
		t.Fatalf("a damaged file: %v\n%s", err, out.String())
	}
	t.Logf("%s", strings.SplitN(out.String(), "\n", 3)[:2])
	if after, _ := os.ReadFile(db); !bytes.Equal(after, b) {
		t.Error("db check changed the file")
	}
}

// `router db compact` refuses the file of a running router, and on a
// stopped one gives space back and leaves every event readable: the router
// starts on the compacted file and serves the events it stored.
func TestDBCompact(t *testing.T) {
	path, sock := writeConfig(t, "")
	stop := runRouter(t, path, sock)
	c := testkit.UnixClient(sock, 10*time.Second)
	for b := range 10 {
		var batch []string
		for i := range 100 {
			batch = append(batch, fmt.Sprintf(`{"specversion":"1.0","type":"t.order","source":"/t","id":"c-%d-%d","data":%q}`, b, i, strings.Repeat("z", 300)))
		}
		resp, err := c.Post("http://r/v1/events", "application/cloudevents-batch+json", strings.NewReader("["+strings.Join(batch, ",")+"]"))
		if err != nil || resp.StatusCode != 202 {
			t.Fatalf("post: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	db := filepath.Join(filepath.Dir(path), "r.db")
	var out bytes.Buffer
	if err := NewMain(nil, &out, &out).Run(context.Background(), []string{"db", "compact", db}); err == nil || !strings.Contains(err.Error(), "running router") {
		t.Fatalf("compacting a running router's file: %v\n%s", err, out.String())
	}
	stop()
	out.Reset()
	if err := NewMain(nil, &out, &out).Run(context.Background(), []string{"db", "compact", db, "-o", "json"}); err != nil {
		t.Fatalf("compact: %v\n%s", err, out.String())
	}
	var rep struct{ Before, After int64 }
	if err := json.Unmarshal(out.Bytes(), &struct {
		Before *int64 `json:"before_bytes"`
		After  *int64 `json:"after_bytes"`
	}{&rep.Before, &rep.After}); err != nil || rep.After <= 0 || rep.After > rep.Before {
		t.Fatalf("report %s: %v", out.String(), err)
	}
	t.Logf("compacted %d → %d bytes", rep.Before, rep.After)
	runRouter(t, path, sock)
	resp, err := c.Get("http://r/v1/events/c-9-99")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("an event after compaction: %v %v", resp, err)
	}
	resp.Body.Close()
}

// A backup the router cuts short (it stopped mid-copy) says so, and keeps
// nothing: it said "backup: unexpected EOF".
func TestBackupCutShortSaysWhy(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "r.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.Write(make([]byte, 100))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection ends mid-body
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	out := filepath.Join(dir, "b.db")
	var stdout bytes.Buffer
	err = NewMain(nil, &stdout, &stdout).Run(context.Background(), []string{"backup", out, "-socket", sock})
	if err == nil || !strings.Contains(err.Error(), "the router ended the copy after 100 of 1000 bytes") {
		t.Fatalf("backup cut short: %v", err)
	}
	for _, p := range []string{out, out + ".partial"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s after the cut: %v", p, err)
		}
	}
}
