package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// Disk full: the real binary run with a file-size limit (ulimit -f), so the
// data file cannot grow past ~30 MB. Ingest then answers 503
// storage_unavailable, stays up, and loses nothing it acknowledged; after a
// restart without the limit every acknowledged event is there and ingest
// works again.
func TestDiskFullIs503AndLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a data file")
	}
	bin := routerBinary(t)
	path, sock := writeConfig(t, `event "fill" {}`)
	logs := filepath.Join(filepath.Dir(path), "router.log")
	start := func(limitKiB int) *exec.Cmd {
		t.Helper()
		shell := fmt.Sprintf("exec %q run -config %q", bin, path)
		if limitKiB > 0 {
			shell = fmt.Sprintf("ulimit -f %d; %s", limitKiB, shell)
		}
		cmd := exec.Command("bash", "-c", shell)
		f, _ := os.OpenFile(logs, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		waitHealthy(t, testkit.UnixClient(sock, 10*time.Second))
		return cmd
	}
	stop := func(cmd *exec.Cmd) {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}
	c := testkit.UnixClient(sock, 10*time.Second)
	data := strings.Repeat("x", 60_000)
	post := func(id string) (int, string) {
		resp, err := c.Post("http://r/v1/events", "application/cloudevents+json",
			strings.NewReader(fmt.Sprintf(`{"specversion":"1.0","type":"fill","source":"/t","id":%q,"data":%q}`, id, data)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b := new(strings.Builder)
		buf := make([]byte, 512)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp.StatusCode, b.String()
	}

	cmd := start(30_000)
	var acked []string
	full := false
	for i := range 1000 {
		id := fmt.Sprintf("f-%d", i)
		code, body := post(id)
		if code == 202 {
			acked = append(acked, id)
			continue
		}
		if code != 503 || !strings.Contains(body, "storage_unavailable") {
			t.Fatalf("at %d events: %d %s", len(acked), code, body)
		}
		full = true
		break
	}
	if !full {
		t.Fatal("the data file never filled up")
	}
	// Later requests may fit in pages freed meanwhile, or not: each gets a
	// 202 (and counts) or a 503.
	refused := ""
	for i := range 20 {
		id := fmt.Sprintf("late-%d", i)
		switch code, body := post(id); code {
		case 202:
			acked = append(acked, id)
		case 503:
			refused = id
		default:
			t.Fatalf("late request: %d %s", code, body)
		}
	}
	if get(t, c, "/healthz") == "" {
		t.Fatal("router down after disk full")
	}
	stop(cmd)

	cmd = start(0)
	defer stop(cmd)
	for _, id := range acked {
		if body := get(t, c, "/v1/events/"+id); !strings.Contains(body, `"id": "`+id+`"`) {
			t.Fatalf("acknowledged %s lost: %s", id, body)
		}
	}
	if refused != "" {
		if body := get(t, c, "/v1/events/"+refused); !strings.Contains(body, "not_found") {
			t.Fatalf("a refused event was stored: %s", body)
		}
	}
	if code, body := post("after-restart"); code != 202 {
		t.Fatalf("ingest after the restart: %d %s", code, body)
	}
	t.Logf("%d events (60 KB each) acknowledged before the file could not grow; all found after a restart", len(acked))
}
