package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/internal/testkit"
	"github.com/switchyard-router/switchyard/storage"
)

// A data file whose filesystem turns read-only under load (ext4's
// errors=remount-ro after an I/O error: an SD card's usual end) does not
// end the process: ingest answers 503 storage_unavailable, /readyz says
// why, and once an operator has stopped the router, repaired the
// filesystem and started it again, the router checks the file (its stop
// was not clean) and every acknowledged event reaches the stream; or, where
// the kernel lost the pages of the last commit though their sync had
// succeeded, the router refuses the file and names router db rollback,
// which sets it back one commit, and every acknowledged event but those of
// that commit reaches the stream.
func TestADiskThatTurnsReadOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("fails a disk under the real binary")
	}
	disk := testkit.NewFailingDisk(t, 128<<20)
	r := routerOnDisk(t, disk.Dir, "")
	failed := make(chan error, 1)
	time.AfterFunc(time.Second, func() { failed <- disk.Fail() })
	acked := load(t, r.load, "RO", 10, 15*time.Second, true, nil)
	if err := <-failed; err != nil {
		t.Fatal(err)
	}
	if len(acked) == 0 {
		t.Fatal("nothing acknowledged before the disk failed")
	}

	var ready string
	testkit.EventuallyWith(t, 10*time.Second, func() bool {
		resp, err := r.c.Get("http://r/readyz")
		if err != nil {
			t.Fatalf("readyz on the read-only disk: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ready = string(b)
		return resp.StatusCode == 503 && strings.Contains(ready, "read-only file system")
	}, func() string { return "readyz on the read-only disk: " + ready })
	resp, err := r.c.Post("http://r/v1/events", "application/cloudevents+json",
		strings.NewReader(`{"specversion":"1.0","type":"t.order","source":"/load","id":"RO-after","data":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(body), `"storage_unavailable"`) {
		t.Fatalf("ingest on the read-only disk: %d %s", resp.StatusCode, body)
	}
	if err := r.proc.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the router ended on the read-only disk: %v\n%s", err, r.logs.String())
	}

	r.proc.Signal(syscall.SIGTERM)
	testkit.Eventually(t, "the router to stop", 30*time.Second, func() bool { return r.proc.Signal(syscall.Signal(0)) != nil })
	disk.Repair()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the data file after the repair: %s", metaPages(filepath.Join(disk.Dir, "router.db")))
		}
	})
	torn := rollBackIfTorn(t, r.config, filepath.Join(disk.Dir, "router.db"))
	c, logs, _ := serveBinaryProcess(t, r.config, r.sock)
	if !strings.Contains(logs.String(), "checking the whole data file") {
		t.Errorf("the restart did not check the file the read-only disk left:\n%s", logs.String())
	}
	waitDrained(t, c, "", "after the repaired disk's restart", time.Minute)
	if !torn {
		r.allInStream(t, acked, "")
		return
	}
	// The commit torn was the last: it held at most one batch of each
	// client (each waits for its answer before it sends the next), that
	// client's last acknowledged.
	last := lastBatches(acked, 10)
	missing := streamMissing(t, r.config, "", "events", acked)
	for _, id := range missing {
		if !last[id] {
			t.Fatalf("%d acknowledged events are not in the stream after the rollback, among them %s, not of its client's last batch", len(missing), id)
		}
	}
	t.Logf("the disk tore the last commit: %d of %d acknowledged events in the stream, the %d missing of the clients' last batches", len(acked)-len(missing), len(acked), len(missing))
}

// rollBackIfTorn checks the data file a failed disk left; if it does not
// check, that the router refuses to start on it and says to roll it back,
// and that router db rollback does. Linux 6.18's ext4 turned read-only
// (errors=remount-ro) lost the pages of a commit whose fdatasync had
// returned success about once in 150 failures
// (docs/decisions/torn-commit.md): the file's last commit is torn.
func rollBackIfTorn(t *testing.T, config, data string) (torn bool) {
	t.Helper()
	var said bytes.Buffer
	if err := NewMain(nil, &said, &said).Run(context.Background(), []string{"db", "check", data}); err == nil {
		return false
	}
	t.Logf("the repaired disk's data file does not check:\n%s", said.String())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, routerBinary(t), "run", "-config", config).CombinedOutput(); err == nil || !strings.Contains(string(out), "`router db rollback` on it") {
		t.Fatalf("the start on the file that does not check: %v\n%s", err, out)
	}
	said.Reset()
	before := mustRead(t, data)
	err := NewMain(nil, &said, &said).Run(ctx, []string{"db", "rollback", data})
	if err != nil && strings.Contains(err.Error(), "does not check either") && strings.Contains(err.Error(), "put back as it was") {
		if mustRead(t, data) != before {
			t.Fatal("db rollback said it put the file back, and changed it")
		}
		// The next commit's pages reached the disk over the commit
		// before: the file needs its backup, and the rollback said so and
		// left it (docs/decisions/torn-commit.md). No more to check.
		t.Skipf("the kernel tore the last commit and the one before does not check either; db rollback left the file as it was: %v", err)
	}
	if err != nil {
		t.Fatalf("db rollback: %v\n%s", err, said.String())
	}
	t.Logf("%s", said.String())
	return true
}

// lastBatches is the ids of each load client's last acknowledged batch of
// size events (ids prefix-client-n, acknowledged in order).
func lastBatches(acked []string, size int) map[string]bool {
	last := make(map[string]bool)
	per := make(map[string]int)
	for _, id := range slices.Backward(acked) {
		client := id[:strings.LastIndexByte(id, '-')]
		if per[client] < size {
			per[client]++
			last[id] = true
		}
	}
	return last
}

// metaPages describes the two meta pages of a bbolt file and its size, for
// a test that failed on it.
func metaPages(path string) string {
	metas, size, err := storage.Metas(path)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%d bytes; meta 0: %s; meta 1: %s", size, metas[0], metas[1])
}
