package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// A disk that now and then refuses the sync after a commit's meta page
// (EIO, as from a failing write-back), once or twice in a row, under load
// on the real binary: every acknowledged event reaches the stream, none
// told "nothing was stored" does (before, each refusal told that of
// events the commit had stored, and delivered), the process stays up, and
// once the disk stops refusing the router is ready again.
// (docs/decisions/disk-full.md, "A sync refused after the meta page".)
func TestASyncRefusedNowAndThenLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("fails a disk's syncs under the real binary")
	}
	disk := testkit.NewFaultDisk(t)
	r := routerOnDisk(t, disk.Dir, "")
	stop := make(chan struct{})
	refusing := make(chan struct{})
	go func() {
		defer close(refusing)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(150 * time.Millisecond):
			}
			disk.FailSync(syscall.EIO, testkit.MetaPages)
			if i%4 == 3 { // the confirming commit's too
				disk.FailSync(syscall.EIO, testkit.MetaPages)
			}
		}
	}()
	told := postTelling(r.load, "SF", 6*time.Second)
	close(stop)
	<-refusing
	t.Logf("%d syncs refused; events acknowledged %d, told nothing was stored %d, told it may have taken effect %d, other answers %v",
		disk.SyncsFailed(), len(told.acked), len(told.notStored), len(told.maybe), told.other)
	if disk.SyncsFailed() < 10 || len(told.acked) == 0 {
		t.Fatal("want 10 refused syncs or more, and events acknowledged")
	}
	if err := r.proc.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the router ended: %v\n%s", err, r.logs.String())
	}
	// What is still queued to refuse is taken by the next commits.
	testkit.EventuallyWith(t, 20*time.Second, func() bool {
		resp, err := r.c.Get("http://r/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, func() string {
		return "the router is not ready again once the disk stopped refusing:\n" + r.logs.String()
	})
	waitDrained(t, r.c, "", "after the refused syncs", time.Minute)
	r.allInStream(t, told.acked, "")
	if missing := streamMissing(t, r.config, "", "events", told.notStored); len(missing) != len(told.notStored) {
		t.Fatalf("%d events told nothing was stored are in the stream", len(told.notStored)-len(missing))
	}
}

// answersTold sorts the events of a load by what their requests were told.
type answersTold struct {
	acked, notStored, maybe []string
	other                   map[int]int // status: requests
}

// postTelling posts batches of 10 events from 8 clients for d, and sorts
// their ids by the answer: 202, 503 "nothing was stored", 503 "may have
// taken effect"; other answers are counted by status.
func postTelling(c *http.Client, prefix string, d time.Duration) *answersTold {
	told := &answersTold{other: map[int]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	stopAt := time.Now().Add(d)
	for g := range 8 {
		wg.Go(func() {
			for n := 0; time.Now().Before(stopAt); n += 10 {
				var ids, evs []string
				for i := n; i < n+10; i++ {
					id := fmt.Sprintf("%s-%d-%d", prefix, g, i)
					ids = append(ids, id)
					evs = append(evs, fmt.Sprintf(`{"specversion":"1.0","type":"t.order","source":"/load","id":%q,"data":{}}`, id))
				}
				status, body := post(c, "["+strings.Join(evs, ",")+"]")
				mu.Lock()
				switch {
				case status == 202:
					told.acked = append(told.acked, ids...)
				case status == 503 && strings.Contains(body, "nothing was stored"):
					told.notStored = append(told.notStored, ids...)
				case status == 503 && strings.Contains(body, "may have taken effect"):
					told.maybe = append(told.maybe, ids...)
				default:
					told.other[status]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return told
}

// post posts a batch and returns the answer's status and body (0: none).
func post(c *http.Client, batch string) (int, string) {
	resp, err := c.Post("http://r/v1/events", "application/cloudevents-batch+json", strings.NewReader(batch))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
