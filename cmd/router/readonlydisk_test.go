package main

import (
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// A data file whose filesystem turns read-only under load (ext4's
// errors=remount-ro after an I/O error: an SD card's usual end) loses
// nothing acknowledged and does not end the process: ingest answers 503
// storage_unavailable, /readyz says why, and once an operator has stopped
// the router, repaired the filesystem and started it again, the router
// checks the file (its stop was not clean) and every acknowledged event
// reaches the stream.
func TestADiskThatTurnsReadOnlyLosesNothing(t *testing.T) {
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
	c, logs, _ := serveBinaryProcess(t, r.config, r.sock)
	if !strings.Contains(logs.String(), "checking the whole data file") {
		t.Errorf("the restart did not check the file the read-only disk left:\n%s", logs.String())
	}
	waitDrained(t, c, "", "after the repaired disk's restart", time.Minute)
	r.allInStream(t, acked, "")
}
