package main

import (
	"github.com/switchyard-router/switchyard/cloudevents"
	"github.com/switchyard-router/switchyard/config"

	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchCommand loads a running router over its socket.
type BenchCommand struct {
	*Main
}

// benchOptions are the bench command's flags.
type benchOptions struct {
	Socket      string        `json:"socket"`
	Type        string        `json:"type"`
	Concurrency int           `json:"concurrency"`
	Requests    int           `json:"requests,omitempty"`
	Duration    time.Duration `json:"duration_ns,omitempty"`
	Batch       int           `json:"batch"`
	Rate        float64       `json:"rate,omitempty"` // offered events/s; 0 = closed loop
	DataBytes   int           `json:"data_bytes"`
	ClientIDs   bool          `json:"client_ids,omitempty"`
	Timeout     time.Duration `json:"timeout_ns"`
	Output      format        `json:"-"`
	FsyncProbe  string        `json:"fsync_probe,omitempty"`
	E2E         bool          `json:"e2e"`
	NATSURL     string        `json:"nats_url,omitempty"`
	Config      string        `json:"-"`
	Subject     string        `json:"subject,omitempty"`
	// KafkaBrokers, with -e2e, consumes Topic from Kafka instead of
	// subscribing to Subject on NATS.
	KafkaBrokers []string      `json:"kafka_brokers,omitempty"`
	Topic        string        `json:"topic,omitempty"`
	Drain        time.Duration `json:"drain_ns,omitempty"`
	// CPUProfile is where to write the load generator's own CPU profile:
	// on a small box it shares the cores with the router it measures.
	CPUProfile string `json:"-"`
}

// parseFlags reads router bench's flags and checks them.
func (c *BenchCommand) parseFlags(args []string) (*benchOptions, error) {
	o := &benchOptions{}
	fs := flag.NewFlagSet("router bench", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	fs.StringVar(&o.Socket, "socket", config.DefaultSocket, "the router's unix socket")
	fs.StringVar(&o.Type, "type", "demo.greeting", "the event type to send (it needs an event block)")
	fs.IntVar(&o.Concurrency, "c", 64, "concurrent clients (connections)")
	fs.IntVar(&o.Requests, "n", 0, "total requests (0 = until -d)")
	durationVar(fs, &o.Duration, "d", 0, "how long to send (default 10s when -n is not set)")
	fs.IntVar(&o.Batch, "batch", 1, "events per request: 1 = a structured event, > 1 = a batch request")
	fs.Float64Var(&o.Rate, "rate", 0, "offered load in events/s on an open-loop schedule (latency includes queueing); 0 = as fast as possible")
	fs.IntVar(&o.DataBytes, "data-bytes", 128, "size of each event's data")
	fs.BoolVar(&o.ClientIDs, "client-ids", false, "give each event an id of its own, as clients do (the router then also keeps an idempotency record per event); without it the router assigns the ids")
	durationVar(fs, &o.Timeout, "timeout", 30*time.Second, "per-request timeout")
	formatVar(fs, &o.Output, "o", "report", formatText, formatJSON)
	fs.StringVar(&o.FsyncProbe, "fsync-probe", "", "before the load, measure the raw fsync rate (4 KiB write + fdatasync) of the disk holding this directory")
	fs.BoolVar(&o.E2E, "e2e", false, "also measure end to end: subscribe to -subject on NATS (or consume -topic with -kafka-brokers) and time each event from POST to delivery")
	fs.StringVar(&o.Config, "config", defaultConfigPath, "with -e2e on NATS: the router's configuration; its first nats block says where the server is and the credentials to connect with")
	fs.StringVar(&o.NATSURL, "nats-url", "", "with -e2e: the NATS server the router publishes to (default: from -config)")
	fs.StringVar(&o.Subject, "subject", "", "with -e2e: the subject to subscribe to (default: the event type)")
	brokers := fs.String("kafka-brokers", "", "with -e2e: consume -topic from these Kafka brokers (comma-separated host:port) instead of subscribing on NATS")
	fs.StringVar(&o.Topic, "topic", "", "with -e2e and -kafka-brokers: the topic to consume (default: the event type)")
	durationVar(fs, &o.Drain, "drain", 30*time.Second, "with -e2e: after the load, how long to wait without progress for outstanding events")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write the bench's own CPU profile (the load generator's, not the router's) to this file")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	usage := func(err error) error { return &exitError{code: 2, err: err} } // as every command's bad usage
	switch {
	case fs.NArg() > 0:
		return nil, usage(fmt.Errorf("bench: unexpected arguments %q", fs.Args()))
	case o.Concurrency < 1:
		return nil, usage(errors.New("bench: -c must be at least 1"))
	case o.Batch < 1:
		return nil, usage(errors.New("bench: -batch must be at least 1"))
	case o.Requests < 0 || o.Duration < 0 || o.Rate < 0 || o.DataBytes < 0:
		return nil, usage(errors.New("bench: -n, -d, -rate and -data-bytes cannot be negative"))
	}
	if o.Requests == 0 && o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if *brokers != "" {
		o.KafkaBrokers = strings.Split(*brokers, ",")
	}
	o.endToEnd()
	return o, nil
}

// endToEnd settles what -e2e listens to: nothing without it, a Kafka
// topic with -kafka-brokers, else a NATS subject (both default to the
// event type).
func (o *benchOptions) endToEnd() {
	switch {
	case !o.E2E:
		o.NATSURL, o.Subject, o.KafkaBrokers, o.Topic, o.Drain = "", "", nil, "", 0
	case len(o.KafkaBrokers) > 0:
		o.NATSURL, o.Subject = "", ""
		if o.Topic == "" {
			o.Topic = o.Type
		}
	default:
		o.Topic = ""
		if o.Subject == "" {
			o.Subject = o.Type
		}
	}
}

// Run parses flags, runs the optional fsync probe, loads the router and
// prints the report.
func (c *BenchCommand) Run(ctx context.Context, args []string) error {
	o, err := c.parseFlags(args)
	if err != nil {
		return err
	}
	rep := &benchReport{Options: o}
	text := o.Output == formatText
	if text {
		rep.writeHeader(c.Stdout)
	}
	if o.FsyncProbe != "" {
		p, err := fsyncProbe(o.FsyncProbe, 2*time.Second)
		if err != nil {
			return fmt.Errorf("bench: fsync probe: %w", err)
		}
		rep.Fsync = p
		if text {
			rep.writeProbe(c.Stdout)
		}
	}
	b := newBench(o)
	defer b.api.hc.CloseIdleConnections()
	if err := b.healthy(ctx); err != nil {
		return err
	}
	if o.E2E {
		tr, err := newTracker(ctx, o)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer tr.close()
		b.tracker = tr
	}
	before, _ := b.routerUse(ctx)
	if o.CPUProfile != "" {
		stop, err := startCPUProfile(o.CPUProfile)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer stop()
	}
	b.run(ctx, rep)
	if b.tracker != nil {
		rep.E2E = b.tracker.wait(ctx, b.start, o.Drain)
	}
	if after, err := b.routerUse(ctx); err == nil && before != nil {
		rep.Router = after.since(before, rep.Events)
		b.measureDisk(ctx, rep.Router)
	}
	if text {
		rep.writeResults(c.Stdout)
	} else {
		enc := json.NewEncoder(c.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	}
	return rep.failed()
}

// failed is an error when no request succeeded and some failed (an event
// type with no block: every request a 422): a script that runs the bench
// took the run for a measurement.
func (r *benchReport) failed() error {
	if r.Requests > 0 || len(r.Errors) == 0 {
		return nil
	}
	return &exitError{code: 1, err: fmt.Errorf("bench: every request failed (%s)", errorsLine(r.Errors))}
}

// bench is one load run.
type bench struct {
	o       *benchOptions
	api     *apiClient // the router's API, besides the load
	body    []byte
	media   string
	head    []byte      // every POST's request line and headers
	tracker *e2eTracker // nil without -e2e

	start      time.Time
	next       atomic.Int64 // the next request's number
	ids        clientIDs    // with -client-ids
	sentEvents atomic.Int64 // events given a client id so far
}

func newBench(o *benchOptions) *bench {
	// The load goes through benchConns; this client is for /healthz and
	// /metrics only. On a socket, client cannot fail.
	api, _ := (&apiFlags{socket: o.Socket, timeout: o.Timeout, output: formatTable}).client()
	b := &bench{
		o:   o,
		api: api,
		ids: newClientIDs(),
	}
	b.body, b.media = requestBody(o.Type, o.Batch, o.DataBytes, o.ClientIDs)
	b.head = requestHead(b.media, len(b.body))
	return b
}

// idPlaceholder stands for a client id in the body template: the run's
// prefix and 16 hex digits of the event's number are written over it.
const idPlaceholder = "################-################"

// requestBody builds the body every request sends: one structured event,
// or a batch. Without clientIDs the router assigns the ids, so one body
// serves every request; with them the ids are idPlaceholders that
// bodyTemplate.fill replaces per request.
func requestBody(typ string, batch, dataBytes int, clientIDs bool) (body []byte, media string) {
	attrs := map[string]any{
		"specversion": "1.0",
		"type":        typ,
		"source":      "/switchyard/bench",
		"data":        strings.Repeat("x", max(dataBytes-2, 0)), // a JSON string: dataBytes with its quotes
	}
	if clientIDs {
		attrs["id"] = idPlaceholder
	}
	ev, _ := json.Marshal(attrs)
	if batch == 1 {
		return ev, cloudevents.MediaStructured
	}
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i := range batch {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(ev)
	}
	buf.WriteByte(']')
	return buf.Bytes(), cloudevents.MediaBatch
}

func (b *bench) healthy(ctx context.Context) error {
	if _, err := b.api.do(ctx, http.MethodGet, "/healthz", nil, nil); err != nil {
		return fmt.Errorf("bench: GET /healthz on %s: %w", b.o.Socket, err)
	}
	return nil
}

// run drives the load with Concurrency workers until -n requests are sent
// or -d has passed (requests in flight then still finish), and fills rep.
//
// Closed loop (-rate 0): each worker sends its next request as soon as the
// last one is answered; latency is the request's round trip. Open loop:
// request g is due at start + g/requestRate whatever happened before, the
// workers take due requests in order, and latency counts from the due time,
// so time spent waiting for a free worker (queueing) is included rather
// than hidden (no coordinated omission).
func (b *bench) run(ctx context.Context, rep *benchReport) {
	o := b.o
	var deadline time.Time
	b.start = time.Now()
	if o.Duration > 0 {
		deadline = b.start.Add(o.Duration)
	}
	var interval float64 // nanoseconds between requests, open loop
	if o.Rate > 0 {
		interval = float64(time.Second) * float64(o.Batch) / o.Rate
	}
	results := make([]workerResult, o.Concurrency)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { b.worker(ctx, deadline, interval, &results[i]) })
	}
	wg.Wait()
	rep.Elapsed = time.Since(b.start)
	rep.Errors = map[string]uint64{}
	var hist Histogram
	for i := range results {
		r := &results[i]
		hist.Merge(&r.latency)
		rep.Requests += r.ok
		for k, n := range r.errors {
			rep.Errors[k] += n
		}
	}
	rep.Events = rep.Requests * uint64(o.Batch)
	secs := rep.Elapsed.Seconds()
	rep.RequestsPerSec = float64(rep.Requests) / secs
	rep.EventsPerSec = float64(rep.Events) / secs
	rep.Latency = hist.Summarize()
}

// workerResult is one worker's tally; merged after the run.
type workerResult struct {
	ok      uint64
	latency Histogram // successful requests only
	errors  map[string]uint64
}

func (b *bench) worker(ctx context.Context, deadline time.Time, interval float64, r *workerResult) {
	r.errors = map[string]uint64{}
	conn := &benchConn{ctx: ctx, socket: b.o.Socket, timeout: b.o.Timeout}
	defer conn.close()
	for ctx.Err() == nil {
		g := b.next.Add(1) - 1
		if b.o.Requests > 0 && g >= int64(b.o.Requests) {
			return
		}
		start := time.Now()
		if interval > 0 {
			due := b.start.Add(time.Duration(float64(g) * interval))
			if !deadline.IsZero() && !due.Before(deadline) {
				return
			}
			if d := time.Until(due); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return
				}
			}
			start = due
		} else if !deadline.IsZero() && !start.Before(deadline) {
			return
		}
		if status, err := b.post(conn, start); err != nil {
			r.errors[errorClass(status, err)]++
			continue
		}
		r.ok++
		r.latency.Record(time.Since(start))
	}
}

// post sends one request on conn. A 2xx returns nil; with -e2e its ids are
// handed to the tracker with start.
func (b *bench) post(conn *benchConn, start time.Time) (int, error) {
	body := b.body
	if b.o.ClientIDs {
		body = b.ids.fill(b.body, b.sentEvents.Add(int64(b.o.Batch))-int64(b.o.Batch))
	}
	status, body, err := conn.post(b.head, body)
	if err != nil {
		return 0, err
	}
	if status < 200 || status > 299 {
		return status, fmt.Errorf("%d %s", status, http.StatusText(status))
	}
	if b.tracker != nil {
		ids, err := acceptedIDs(body)
		if err != nil {
			return 0, err
		}
		b.tracker.sent(ids, start)
	}
	return status, nil
}

// clientIDs numbers the events of one run: a random prefix (so that runs
// against the same data file do not collide) and a counter.
type clientIDs struct{ prefix [16]byte }

func newClientIDs() clientIDs {
	var c clientIDs
	var r [8]byte
	rand.Read(r[:])
	hex.Encode(c.prefix[:], r[:])
	return c
}

// fill copies the body template and writes the ids first, first+1, ...
// over its idPlaceholders.
func (c clientIDs) fill(template []byte, first int64) []byte {
	body := bytes.Clone(template)
	var n [8]byte
	for i, at := int64(0), 0; ; i++ {
		j := bytes.Index(body[at:], []byte(idPlaceholder))
		if j < 0 {
			return body
		}
		at += j
		binary.BigEndian.PutUint64(n[:], uint64(first+i))
		copy(body[at:], c.prefix[:])
		hex.Encode(body[at+17:], n[:])
		at += len(idPlaceholder)
	}
}

// acceptedIDs reads the ids from a 202 body: one object, or a list.
func acceptedIDs(body []byte) ([]string, error) {
	type accepted struct {
		ID string `json:"id"`
	}
	var list []accepted
	if body = bytes.TrimSpace(body); len(body) > 0 && body[0] == '{' {
		list = make([]accepted, 1)
		if err := json.Unmarshal(body, &list[0]); err != nil {
			return nil, fmt.Errorf("response body: %w", err)
		}
	} else if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("response body: %w", err)
	}
	ids := make([]string, len(list))
	for i, a := range list {
		ids[i] = a.ID
	}
	return ids, nil
}

// errorClass names an error for the report: the HTTP status, or the root
// cause of a transport error ("connection refused", "timeout", ...).
func errorClass(status int, err error) string {
	var ne net.Error
	switch {
	case status != 0:
		return strconv.Itoa(status)
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "unexpected EOF"
	}
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return s
}

// e2eTracker pairs each acknowledged event with its message on the NATS
// subject or the Kafka topic, whichever comes first: the message can arrive
// before the POST's response.
type e2eTracker struct {
	stop  func() // no more messages after it returns
	close func()

	mu       sync.Mutex
	pending  map[string]time.Time // acknowledged, not received yet: POST start
	early    map[string]time.Time // received, not (yet) acknowledged: arrival
	latency  Histogram
	last     time.Time // the last match
	progress chan struct{}
}

// newTracker starts receiving o's messages: from -kafka-brokers if set,
// else from NATS. Messages published before it returns are not counted.
func newTracker(ctx context.Context, o *benchOptions) (*e2eTracker, error) {
	t := &e2eTracker{
		pending:  map[string]time.Time{},
		early:    map[string]time.Time{},
		progress: make(chan struct{}, 1),
	}
	var err error
	if len(o.KafkaBrokers) > 0 {
		err = t.consumeKafka(ctx, o.KafkaBrokers, o.Topic)
	} else {
		err = t.subscribeNATS(o.Config, o.NATSURL, o.Subject)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// subscribeNATS takes the messages of a core NATS subscription; the router
// sets the event id in the ce-id header.
func (t *e2eTracker) subscribeNATS(config, url, subject string) error {
	nc, err := connectNATS(config, "", url, natsgo.Name("switchyard-bench"))
	if err != nil {
		return err
	}
	sub, err := nc.Subscribe(subject, func(m *natsgo.Msg) {
		t.received(m.Header.Get(cloudevents.NATS.Prefix()+cloudevents.AttrID), time.Now())
	})
	if err == nil {
		err = sub.SetPendingLimits(-1, -1)
	}
	if err == nil {
		err = nc.Flush() // the subscription is in place before the first POST
	}
	if err != nil {
		nc.Close()
		return fmt.Errorf("subscribe to %s: %w", subject, err)
	}
	t.stop = func() { sub.Unsubscribe() }
	t.close = nc.Close
	return nil
}

// consumeKafka consumes every partition of topic from the first record
// produced from now on (found by timestamp, so the consumer need not have
// its offsets before the first POST); the router sets the event id in the
// ce_id header. A consumer sees a record only once the broker has
// acknowledged it (up to the high watermark).
func (t *e2eTracker) consumeKafka(ctx context.Context, brokers []string, topic string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ClientID("switchyard-bench"),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AfterMilli(time.Now().UnixMilli())))
	if err != nil {
		return fmt.Errorf("kafka %v: %w", brokers, err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := cl.Ping(pingCtx); err != nil {
		cl.Close()
		return fmt.Errorf("kafka %v: %w", brokers, err)
	}
	pollCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for pollCtx.Err() == nil {
			fetches := cl.PollFetches(pollCtx)
			if fetches.IsClientClosed() {
				return
			}
			now := time.Now()
			fetches.EachRecord(func(r *kgo.Record) {
				for _, h := range r.Headers {
					if h.Key == cloudevents.Kafka.Prefix()+cloudevents.AttrID {
						t.received(string(h.Value), now)
						return
					}
				}
			})
		}
	}()
	t.stop = func() {
		stop()
		<-done
	}
	t.close = cl.Close
	return nil
}

func (t *e2eTracker) sent(ids []string, start time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		if at, ok := t.early[id]; ok {
			delete(t.early, id)
			t.match(at.Sub(start), at)
			continue
		}
		t.pending[id] = start
	}
}

func (t *e2eTracker) received(id string, at time.Time) {
	if id == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if start, ok := t.pending[id]; ok {
		delete(t.pending, id)
		t.match(at.Sub(start), at)
		return
	}
	t.early[id] = at
	t.signal()
}

func (t *e2eTracker) match(d time.Duration, at time.Time) {
	t.latency.Record(d)
	if at.After(t.last) {
		t.last = at
	}
	t.signal()
}

// signal tells wait that messages are still arriving.
func (t *e2eTracker) signal() {
	select {
	case t.progress <- struct{}{}:
	default:
	}
}

// wait lets outstanding events arrive until none is left or drain passes
// without progress, and reports.
func (t *e2eTracker) wait(ctx context.Context, start time.Time, drain time.Duration) *e2eReport {
	idle := time.NewTimer(drain)
	defer idle.Stop()
	for {
		t.mu.Lock()
		left := len(t.pending)
		t.mu.Unlock()
		if left == 0 {
			break
		}
		select {
		case <-t.progress:
			idle.Reset(drain)
			continue
		case <-idle.C:
		case <-ctx.Done():
		}
		break
	}
	t.stop()
	t.mu.Lock()
	defer t.mu.Unlock()
	r := &e2eReport{
		Received:  t.latency.Count(),
		Missing:   uint64(len(t.pending)),
		Unmatched: uint64(len(t.early)),
		Latency:   t.latency.Summarize(),
	}
	if r.Received > 0 {
		r.Elapsed = t.last.Sub(start)
		r.EventsPerSec = float64(r.Received) / r.Elapsed.Seconds()
	}
	return r
}

// benchReport is what the bench prints.
type benchReport struct {
	Options        *benchOptions     `json:"options"`
	Fsync          *fsyncResult      `json:"fsync_probe,omitempty"`
	Elapsed        time.Duration     `json:"elapsed_ns"`
	Requests       uint64            `json:"requests_ok"`
	Events         uint64            `json:"events_ok"`
	RequestsPerSec float64           `json:"requests_per_sec"`
	EventsPerSec   float64           `json:"events_per_sec"`
	Latency        Summary           `json:"latency"`
	Errors         map[string]uint64 `json:"errors"`
	E2E            *e2eReport        `json:"e2e,omitempty"`
	Router         *routerReport     `json:"router,omitempty"`
}

// routerReport is what the run cost the router process, from its own
// /metrics before and after (with -e2e, until the last event arrived, so
// delivery is included): CPU, allocations and memory per event.
type routerReport struct {
	CPUPerEvent        float64 `json:"cpu_us_per_event"`
	AllocBytesPerEvent float64 `json:"alloc_bytes_per_event"`
	AllocsPerEvent     float64 `json:"allocs_per_event"`
	HeapInuse          float64 `json:"heap_inuse_bytes"`    // at the end
	Resident           float64 `json:"resident_bytes"`      // at the end, with the pages of the data file it has mapped
	AnonResident       float64 `json:"anon_resident_bytes"` // at the end, without them (Linux)
	// The data file at the end: pages holding data, its size, the records
	// it holds (every state) and the pages per record.
	DiskUsed      float64 `json:"disk_used_bytes"`
	DiskFile      float64 `json:"disk_file_bytes"`
	Records       float64 `json:"records"`
	DiskPerRecord float64 `json:"disk_bytes_per_record"`
	// The group commits of the run (each with bbolt's two fdatasyncs) and
	// the writes they held: requests, and the loops' delivery outcomes.
	// A router without these metrics (another system under the same load)
	// reports 0.
	Commits         float64 `json:"commits"`
	WritesPerCommit float64 `json:"writes_per_commit"`
}

// routerUse is the process counters of the router's /metrics.
type routerUse map[string]float64

var routerUseNames = []string{"process_cpu_seconds_total", "go_memstats_alloc_bytes_total", "go_memstats_mallocs_total",
	"go_memstats_heap_inuse_bytes", "process_resident_memory_bytes",
	"switchyard_storage_used_bytes", "switchyard_storage_file_size_bytes", "switchyard_process_anon_resident_bytes",
	"switchyard_storage_group_commit_writes_count", "switchyard_storage_group_commit_writes_sum"}

// recordsMetric is summed over its states: every record in the data file.
const recordsMetric = "switchyard_events"

func (b *bench) routerUse(ctx context.Context) (routerUse, error) {
	resp, err := b.api.send(ctx, http.MethodGet, "/metrics", nil, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	u := routerUse{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		v, _ := strconv.ParseFloat(value, 64)
		switch {
		case !ok:
		case slices.Contains(routerUseNames, name):
			u[name] = v
		case strings.HasPrefix(name, recordsMetric+"{"):
			u[recordsMetric] += v
		}
	}
	return u, sc.Err()
}

// diskSettle is how long the data file's measure may lag behind: the
// router measures it every 250 ms (engine.spaceEvery).
const diskSettle = 500 * time.Millisecond

// measureDisk reads the data file's numbers once the router's own measure
// has caught up with the run's last commit.
func (b *bench) measureDisk(ctx context.Context, r *routerReport) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(diskSettle):
	}
	u, err := b.routerUse(ctx)
	if err != nil {
		return
	}
	r.DiskUsed = u["switchyard_storage_used_bytes"]
	r.DiskFile = u["switchyard_storage_file_size_bytes"]
	r.Records = u[recordsMetric]
	r.DiskPerRecord = r.DiskUsed / max(r.Records, 1)
}

// since is the use from before to u, per event.
func (u routerUse) since(before routerUse, events uint64) *routerReport {
	n := float64(max(events, 1))
	d := func(name string) float64 { return u[name] - before[name] }
	r := &routerReport{
		CPUPerEvent:        1e6 * d("process_cpu_seconds_total") / n,
		AllocBytesPerEvent: d("go_memstats_alloc_bytes_total") / n,
		AllocsPerEvent:     d("go_memstats_mallocs_total") / n,
		HeapInuse:          u["go_memstats_heap_inuse_bytes"],
		Resident:           u["process_resident_memory_bytes"],
		AnonResident:       u["switchyard_process_anon_resident_bytes"],
		Commits:            d("switchyard_storage_group_commit_writes_count"),
	}
	if r.Commits > 0 {
		r.WritesPerCommit = d("switchyard_storage_group_commit_writes_sum") / r.Commits
	}
	return r
}

// e2eReport is the end-to-end part: POST start to message receipt.
type e2eReport struct {
	Received uint64 `json:"received"`
	Missing  uint64 `json:"missing"` // acknowledged, never received
	// Unmatched counts messages whose ce-id this run was never given: a
	// second copy of an event (it matched already), or another publisher's.
	Unmatched    uint64        `json:"unmatched"`
	Elapsed      time.Duration `json:"elapsed_ns"` // load start to the last receipt
	EventsPerSec float64       `json:"events_per_sec"`
	Latency      Summary       `json:"latency"`
}

// writeHeader, writeProbe and writeResults print the text report, each
// part as soon as it is known.
func (r *benchReport) writeHeader(w io.Writer) {
	o := r.Options
	mode := "closed loop"
	if o.Rate > 0 {
		mode = fmt.Sprintf("open loop at %.0f events/s offered", o.Rate)
	}
	limit := fmt.Sprintf("%d requests", o.Requests)
	if o.Requests == 0 {
		limit = o.Duration.String()
	}
	fmt.Fprintf(w, "switchyard bench: %s, %d clients, batch %d, %s, %d-byte data, type %s, socket %s\n",
		limit, o.Concurrency, o.Batch, mode, o.DataBytes, o.Type, o.Socket)
	switch {
	case len(o.KafkaBrokers) > 0:
		fmt.Fprintf(w, "end to end    Kafka topic %s on %s\n", o.Topic, strings.Join(o.KafkaBrokers, ","))
	case o.E2E:
		where := o.NATSURL
		if where == "" {
			where = "the server of " + o.Config
		}
		fmt.Fprintf(w, "end to end    NATS subject %s on %s\n", o.Subject, where)
	}
}

func (r *benchReport) writeProbe(w io.Writer) {
	f := r.Fsync
	fmt.Fprintf(w, "fsync probe   %.0f fsyncs/s (%d × 4 KiB write + fdatasync in %.1fs, %s)\n",
		f.PerSec, f.Syncs, f.Elapsed.Seconds(), f.Dir)
}

func (r *benchReport) writeResults(w io.Writer) {
	fmt.Fprintf(w, "throughput    %.0f req/s, %.0f events/s (%d requests, %d events ok in %.2fs)\n",
		r.RequestsPerSec, r.EventsPerSec, r.Requests, r.Events, r.Elapsed.Seconds())
	fmt.Fprintf(w, "latency       %s\n", latencyLine(r.Latency))
	fmt.Fprintf(w, "errors        %s\n", errorsLine(r.Errors))
	if e := r.E2E; e != nil {
		fmt.Fprintf(w, "end to end    %.0f events/s (%d received in %.2fs), missing %d, unmatched (duplicates or not ours) %d\n",
			e.EventsPerSec, e.Received, e.Elapsed.Seconds(), e.Missing, e.Unmatched)
		fmt.Fprintf(w, "e2e latency   %s\n", latencyLine(e.Latency))
	}
	if u := r.Router; u != nil {
		per := "per event"
		var failed uint64
		for _, n := range r.Errors {
			failed += n
		}
		if failed > 0 {
			// The refused requests cost CPU too, and count in no event.
			per = fmt.Sprintf("per event ok (%d requests failed, their cost included)", failed)
		}
		fmt.Fprintf(w, "router        %.1f µs CPU, %.0f bytes and %.1f allocations %s; heap in use %.0f MiB, resident %.0f MiB (%.0f MiB without the mapped data file)\n",
			u.CPUPerEvent, u.AllocBytesPerEvent, u.AllocsPerEvent, per, u.HeapInuse/(1<<20), u.Resident/(1<<20), u.AnonResident/(1<<20))
		fmt.Fprintf(w, "disk          %.0f bytes of pages per stored record (%.1f MiB in use for %.0f records; file %.1f MiB)\n",
			u.DiskPerRecord, u.DiskUsed/(1<<20), u.Records, u.DiskFile/(1<<20))
		if u.Commits > 0 {
			fmt.Fprintf(w, "commits       %.0f, %.1f writes each (requests and delivery outcomes); %.2f per event\n",
				u.Commits, u.WritesPerCommit, u.Commits/float64(max(r.Events, 1)))
		}
	}
}

func latencyLine(s Summary) string {
	return fmt.Sprintf("p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  (mean %s)",
		ms(s.P50), ms(s.P90), ms(s.P99), ms(s.P999), ms(s.Max), ms(s.Mean))
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64) + "ms"
}

func errorsLine(errs map[string]uint64) string {
	if len(errs) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(errs))
	for k := range errs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, errs[k])
	}
	return strings.Join(parts, ", ")
}

// fsyncResult is the raw fsync rate of a disk.
type fsyncResult struct {
	Dir     string        `json:"dir"`
	Syncs   int           `json:"syncs"`
	Elapsed time.Duration `json:"elapsed_ns"`
	PerSec  float64       `json:"per_sec"`
}

// fsyncProbe measures how many small durable writes the disk under dir
// takes per second: the ceiling of any fsync-per-commit design, and what
// group commit has to amortize. It overwrites 4 KiB blocks of a
// preallocated 1 MiB file round robin, each followed by fdatasync (what
// bbolt does per commit on Linux), for about d.
func fsyncProbe(dir string, d time.Duration) (*fsyncResult, error) {
	const block, blocks = 4096, 256
	f, err := os.CreateTemp(dir, ".fsync-probe-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := bytes.Repeat([]byte{0xA5}, block)
	for i := range blocks {
		if _, err := f.WriteAt(buf, int64(i*block)); err != nil {
			return nil, err
		}
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	r := &fsyncResult{Dir: dir}
	start := time.Now()
	for time.Since(start) < d {
		buf[0] = byte(r.Syncs)
		if _, err := f.WriteAt(buf, int64(r.Syncs%blocks*block)); err != nil {
			return nil, err
		}
		if err := fdatasync(f); err != nil {
			return nil, err
		}
		r.Syncs++
	}
	r.Elapsed = time.Since(start)
	r.PerSec = float64(r.Syncs) / r.Elapsed.Seconds()
	return r, nil
}

// startCPUProfile profiles this process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
