package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// A router that fills its own disk does not wedge the data file
// (docs/decisions/disk-full.md). On a 60 MiB disk with min_free = 8 MiB, a
// heavy load (batches of 100) fills it to the floor faster than delivery
// drains it; delivering the backlog then
// grows the file (each record by its outputs) while the embedded stream's
// replay window keeps the delivered records for seconds. Before, that
// growth took the last free byte and every commit, the cleanup's
// included, failed with ENOSPC for ever (tens of thousands of events
// pending, ingest refused). Now delivery waits short of the floor's last
// part, the cleanup makes room, the backlog drains, and every
// acknowledged event is in the stream.
func TestARouterThatFillsItsDiskDrains(t *testing.T) {
	r := smallDiskRouter(t, "")
	acked := load(t, r.load, "L", 100, 8*time.Second, true, nil)
	waitDrained(t, r.c, "", "after the disk filled up to the floor", time.Minute)
	if !strings.Contains(r.logs.String(), "delivery waits") {
		t.Errorf("the backlog drained, but delivery never waited for the cleanup: was the floor's last part reached?")
	}
	if n := strings.Count(r.logs.String(), "no space left on device"); n > 0 {
		t.Logf("%d writes met a full disk while the router filled it", n)
	}
	r.allInStream(t, acked, "")
}

// A disk that another program fills while a backlog waits does not wedge
// the data file either. The broker is away while the load comes, so that
// the router writes nothing while the filler takes every free byte; then
// it comes back. Delivery's first outcome commit meets the full disk: the
// router gives up its reserve and commits again, the cleanup removes what
// was delivered (an external broker has no replay window), the backlog
// drains, and ingest resumes in the room the cleanup made inside the
// file. Once the disk has room again (the filler removed, the volume
// grown) the reserve is back. Before, every commit failed with ENOSPC
// until the filler went.
func TestADiskAnotherProgramFillsDrains(t *testing.T) {
	port := testkit.FreePort(t)
	r := smallDiskRouter(t, fmt.Sprintf(`url = "nats://127.0.0.1:%d"`, port))
	// A backlog of at least 24 MiB, so that what the cleanup frees of it
	// once delivered is past min_free (8 MiB) even with the disk full.
	acked := load(t, r.load, "L", 10, 10*time.Second, false, func() bool { return storageStat(t, r.c)["used_bytes"] >= 24<<20 })
	if used := storageStat(t, r.c)["used_bytes"]; used < 24<<20 {
		t.Fatalf("a backlog of %d bytes after 10 s of load, want 24 MiB", used)
	}
	// Paused meanwhile, the router meets the full disk only once the
	// filler holds every byte: then nothing else takes what it gives up.
	r.proc.Signal(syscall.SIGSTOP)
	filler := testkit.FillDisk(t, r.disk)
	jetStreamServer(t, port)
	r.proc.Signal(syscall.SIGCONT)
	waitDrained(t, r.c, "", "after another program filled the disk", time.Minute)
	if !strings.Contains(r.logs.String(), "gave up its reserve") {
		t.Errorf("the backlog drained on a full disk, but the reserve was not given up: was the disk full?")
	}
	testkit.Eventually(t, "ingest to resume in the room the cleanup made inside the file", 30*time.Second, func() bool {
		ids := postLoad(r.c, "R", 0, 0, 10)
		acked = append(acked, ids...)
		return len(ids) > 0
	})
	os.Remove(filler)
	testkit.GrowDisk(t, r.disk, 100<<20)
	testkit.Eventually(t, "the reserve to be made again", 10*time.Second, func() bool {
		return storageStat(t, r.c)["reserve_bytes"] == 2<<20
	})
	waitDrained(t, r.c, "", "at the end", time.Minute)
	r.allInStream(t, acked, fmt.Sprintf("nats://127.0.0.1:%d", port))
}

// smallDisk is the real binary with its data file on a disk of its own of
// 60 MiB, min_free = 8 MiB (a reserve of 2 MiB), routing t.order to the
// NATS server nats (the inside of its block: the embedded server when
// empty, whose store is on another disk).
type smallDisk struct {
	c      *http.Client
	load   *http.Client // keeps a connection per load client (testkit.UnixClient keeps two)
	logs   *testkit.Buffer
	disk   string
	config string
	sock   string
	proc   *os.Process
}

func smallDiskRouter(t *testing.T, nats string) *smallDisk {
	t.Helper()
	if testing.Short() {
		t.Skip("fills a disk through the real binary")
	}
	return routerOnDisk(t, testkit.SmallDisk(t, 60<<20), nats)
}

// routerOnDisk is smallDiskRouter's router with its data file on disk, a
// folder the test mounted.
func routerOnDisk(t *testing.T, disk, nats string) *smallDisk {
	t.Helper()
	dir := t.TempDir()
	if nats == "" {
		nats = fmt.Sprintf("embedded = true\n  port = %d\n  store_dir = %q", testkit.FreePort(t), filepath.Join(dir, "nats"))
	}
	sock := filepath.Join(dir, "r.sock")
	path := filepath.Join(dir, "policies.hcl")
	os.WriteFile(path, []byte(fmt.Sprintf(`
listen  { socket = %q }
storage {
  path     = %q
  min_free = "8MiB"
}
nats "local" {
  %s
  stream "events" { subjects = ["t.>"] }
}
event "t.order" {
  route {
    to      = "nats.local"
    subject = "t.orders"
  }
}
`, sock, filepath.Join(disk, "router.db"), nats)), 0o600)
	c, logs, proc := serveBinaryProcess(t, path, sock)
	load := testkit.UnixClient(sock, 10*time.Second)
	load.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	return &smallDisk{c: c, load: load, logs: logs, disk: disk, config: path, sock: sock, proc: proc}
}

// allInStream fails the test unless every id is in the stream of the
// router's NATS server at url ("": the embedded one's).
func (r *smallDisk) allInStream(t *testing.T, ids []string, url string) {
	t.Helper()
	if missing := streamMissing(t, r.config, url, "events", ids); len(missing) > 0 {
		t.Fatalf("%d of %d acknowledged events are not in the stream, e.g. %v", len(missing), len(ids), missing[:min(5, len(missing))])
	}
	t.Logf("%d acknowledged events, every one in the stream", len(ids))
}

// load posts batches of size events of ~110 bytes of data from 16
// clients, ids prefix-client-n, for d (or, untilRefused, until a second
// after the first refusal, which must come within d; or until enough,
// asked every 100 ms, says so), and returns the ids acknowledged.
func load(t *testing.T, c *http.Client, prefix string, size int, d time.Duration, untilRefused bool, enough func() bool) []string {
	t.Helper()
	var done atomic.Bool
	if enough != nil {
		go func() {
			for !done.Load() && !enough() {
				time.Sleep(100 * time.Millisecond)
			}
			done.Store(true)
		}()
	}
	defer done.Store(true)
	var mu sync.Mutex
	var acked []string
	stopAt := time.Now().Add(d)
	refusedAt := time.Time{}
	var wg sync.WaitGroup
	var next atomic.Int64 // one count for all clients: ids land all over the events bucket
	for g := range 16 {
		wg.Go(func() {
			for {
				mu.Lock()
				over := done.Load() || time.Now().After(stopAt) || (untilRefused && !refusedAt.IsZero() && time.Since(refusedAt) > time.Second)
				mu.Unlock()
				if over {
					return
				}
				ids := postLoad(c, prefix, g, int(next.Add(int64(size))), size)
				mu.Lock()
				acked = append(acked, ids...)
				if ids == nil && refusedAt.IsZero() {
					refusedAt = time.Now()
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if untilRefused && refusedAt.IsZero() {
		t.Fatalf("%d events acknowledged in %s, none refused: the disk did not fill", len(acked), d)
	}
	return acked
}

// postLoad posts one batch of n events and returns their ids if it was
// acknowledged (nil if refused: 507, or 503 for a commit the full disk
// refused).
func postLoad(c *http.Client, prefix string, g, first, n int) []string {
	var ids, evs []string
	for i := first; i < first+n; i++ {
		id := fmt.Sprintf("%s-%d-%d", prefix, g, i)
		ids = append(ids, id)
		evs = append(evs, fmt.Sprintf(`{"specversion":"1.0","type":"t.order","source":"/load","id":%q,"data":{"pad":%q}}`, id, strings.Repeat("x", 100)))
	}
	resp, err := c.Post("http://r/v1/events", "application/cloudevents-batch+json", strings.NewReader("["+strings.Join(evs, ",")+"]"))
	if err != nil {
		return nil
	}
	resp.Body.Close()
	if resp.StatusCode != 202 {
		return nil
	}
	return ids
}

// storageStat is /v1/stats "storage".
func storageStat(t *testing.T, c *http.Client) map[string]int64 {
	t.Helper()
	st, err := fetchStats(c)
	if err != nil {
		t.Fatal(err)
	}
	return st.Storage
}

// streamMissing returns the ids that the router's embedded stream does
// not hold.
func streamMissing(t *testing.T, config, url, stream string, ids []string) []string {
	t.Helper()
	bySeq, _ := readStream(t, config, url, stream)
	seen := make(map[string]bool, len(bySeq))
	for _, id := range bySeq {
		seen[id] = true
	}
	var missing []string
	for _, id := range ids {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	return missing
}
