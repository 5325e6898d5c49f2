package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	// Once (1 run in ~80) CI's restart found a page the newest meta page
	// names full of zeros: say what the file held, for the next look.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the data file after the repair: %s", metaPages(filepath.Join(disk.Dir, "router.db")))
		}
	})
	c, logs, _ := serveBinaryProcess(t, r.config, r.sock)
	if !strings.Contains(logs.String(), "checking the whole data file") {
		t.Errorf("the restart did not check the file the read-only disk left:\n%s", logs.String())
	}
	waitDrained(t, c, "", "after the repaired disk's restart", time.Minute)
	r.allInStream(t, acked, "")
}

// metaPages describes the two meta pages of a bbolt file (bbolt's layout:
// a 16-byte page header, then magic, version, page size, flags, the root
// bucket's page and sequence, the free list's page, the high-water page,
// the transaction id), and the file's size, for a test that failed on it.
func metaPages(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	out := fmt.Sprintf("%d bytes", len(b))
	size := 4096
	if len(b) >= 28 {
		size = int(binary.LittleEndian.Uint32(b[24:28]))
	}
	for i := range 2 {
		m := b[min(len(b), i*size):]
		if len(m) < 80 || size < 80 {
			break
		}
		le := binary.LittleEndian
		out += fmt.Sprintf("; meta %d: txid %d, root page %d, free list page %d, high water page %d, magic %#x",
			i, le.Uint64(m[64:72]), le.Uint64(m[32:40]), le.Uint64(m[48:56]), le.Uint64(m[56:64]), le.Uint32(m[16:20]))
	}
	return out
}
