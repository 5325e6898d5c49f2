// Command fastingest measures what JetStream publishing costs per message,
// client and server, two ways: one acknowledgement per message
// (PublishMsgAsync, as the router's NATS sink publishes) and fast-ingest
// batches (ADR-50, nats-server 2.14+, orbit.go's jetstreamext), which the
// server acknowledges every -flow messages. Messages carry the headers the
// router writes (the NATS binding's ce- headers and Nats-Msg-Id) and 128
// bytes of data. BENCHMARKS.md, "Issue 14, session 10", has the results.
//
//	cd .ci/bench/fastingest
//	GOBIN=/tmp/fi go install github.com/nats-io/nats-server/v2@v2.15.2
//	/tmp/fi/nats-server -a 127.0.0.1 -p 14333 -js -sd /tmp/fi/js &
//	go build -o /tmp/fi/fastingest .
//	/tmp/fi/fastingest -mode async -batch 100 -n 120000 -pid $!
//	/tmp/fi/fastingest -mode fast -batch 100 -n 120000 -pid $!
//
// It (re)creates the stream "events" (demo.>, file storage, allow_batched).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

func cpu() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func procCPU(pid int) time.Duration {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	f := strings.Fields(string(b))
	u, _ := strconv.Atoi(f[13])
	s, _ := strconv.Atoi(f[14])
	return time.Duration(u+s) * 10 * time.Millisecond
}

func msg(i int, tag string) *nats.Msg {
	m := nats.NewMsg("demo.greeting")
	id := fmt.Sprintf("%s-%08d-0000-7000-8000-000000000000", tag, i)
	m.Header.Set("ce-specversion", "1.0")
	m.Header.Set("ce-id", id)
	m.Header.Set("ce-source", "bench")
	m.Header.Set("ce-type", "demo.greeting")
	m.Header.Set("ce-time", "2026-12-01T17:00:00.123456789Z")
	m.Header.Set("content-type", "application/json")
	m.Header.Set("ce-datacontenttype", "application/json")
	m.Header.Set("Nats-Msg-Id", id)
	m.Data = []byte(strings.Repeat("x", 128))
	return m
}

func main() {
	mode := flag.String("mode", "async", "async or fast")
	n := flag.Int("n", 200000, "messages")
	batch := flag.Int("batch", 100, "messages per batch")
	conc := flag.Int("c", 4, "concurrent batches")
	pid := flag.Int("pid", 0, "nats-server pid")
	url := flag.String("url", "nats://127.0.0.1:14333", "")
	flow := flag.Int("flow", 100, "fast: ack every flow messages")
	flag.Parse()
	if *pid == 0 {
		log.Fatal("-pid: the nats-server's process id is needed (its CPU is read from /proc)")
	}
	nc, err := nats.Connect(*url)
	if err != nil {
		log.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	js.DeleteStream(ctx, "events")
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "events", Subjects: []string{"demo.>"}, Storage: jetstream.FileStorage, AllowBatchPublish: true, Duplicates: 2 * time.Minute}); err != nil {
		log.Fatal(err)
	}
	tag := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffff)
	c0, s0, t0 := cpu(), procCPU(*pid), time.Now()
	var wg sync.WaitGroup
	// Each publisher sends whole batches; n is rounded down to fit.
	per := *n / *conc / *batch * *batch
	*n = per * *conc
	for w := 0; w < *conc; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for off := 0; off < per; off += *batch {
				base := w*per + off
				switch *mode {
				case "async":
					futs := make([]jetstream.PubAckFuture, 0, *batch)
					for i := 0; i < *batch; i++ {
						f, err := js.PublishMsgAsync(msg(base+i, tag))
						if err != nil {
							log.Fatal(err)
						}
						futs = append(futs, f)
					}
					for _, f := range futs {
						select {
						case <-f.Ok():
						case err := <-f.Err():
							log.Fatal(err)
						}
					}
				case "fast":
					fp, err := jetstreamext.NewFastPublisher(js, jetstreamext.FastPublishFlowControl{Flow: uint16(*flow), MaxOutstandingAcks: 2, AckTimeout: 5 * time.Second})
					if err != nil {
						log.Fatal(err)
					}
					for i := 0; i < *batch-1; i++ {
						if _, err := fp.AddMsg(msg(base+i, tag)); err != nil {
							log.Fatal(err)
						}
					}
					if _, err := fp.CommitMsg(ctx, msg(base+*batch-1, tag)); err != nil {
						log.Fatal(err)
					}
				}
			}
		}(w)
	}
	wg.Wait()
	el := time.Since(t0)
	c1, s1 := cpu(), procCPU(*pid)
	info, err := js.Stream(ctx, "events")
	if err != nil {
		log.Fatal(err)
	}
	st := info.CachedInfo().State
	fmt.Printf("%-5s batch %4d: %7.0f msg/s, client %5.2f µs/msg, server %5.2f µs/msg, stored %d\n", *mode, *batch, float64(*n)/el.Seconds(),
		float64((c1-c0).Nanoseconds())/1e3/float64(*n), float64((s1-s0).Nanoseconds())/1e3/float64(*n), st.Msgs)
}
