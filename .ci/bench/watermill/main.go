// Command watermill-peer is the outbox a Go user would build without
// Switchyard, for issue 14's side-by-side measurement: Watermill's forwarder
// component over a watermill-sql (PostgreSQL) outbox, forwarding to NATS
// JetStream with watermill-nats.
//
// It speaks the part of the router's HTTP API that `router bench` uses, on a
// unix socket:
//
//   - POST /v1/events, application/cloudevents+json (one event) or
//     application/cloudevents-batch+json (a JSON array): every event of the
//     request is inserted into the outbox table in ONE PostgreSQL transaction
//     (a watermill-sql publisher bound to that transaction, wrapped by
//     forwarder.NewPublisher: Watermill's documented outbox pattern); the 202
//     is written only after COMMIT returned. The answer has the router's
//     shape: {"id":..,"status":"accepted"} or a list of them.
//   - GET /healthz, GET /readyz: 200.
//   - GET /metrics: the few series `router bench` reads for its "router"
//     and "disk" lines. process_cpu_seconds_total is this process PLUS every
//     PostgreSQL process of the cluster (the peer's store is PostgreSQL, the
//     router's is in its own process); the memory series are this process's
//     only; the storage series are PostgreSQL's (see metrics below).
//
// The forwarder (forwarder.NewForwarder: a watermill-sql subscriber on the
// outbox table, a watermill-nats JetStream publisher) moves each message to
// the subject named by its event type, in CloudEvents binary mode: the body
// is the event's data, the attributes are ce-* headers (ce-id is what
// `router bench -e2e` matches on), plus Nats-Msg-Id = the event id for
// JetStream's de-duplication (watermill-nats TrackMsgId).
//
// With -setup-stream it only creates (or purges) the JetStream stream and
// exits.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
)

const forwarderTopic = "forwarder" // the outbox table: "watermill_forwarder"

type options struct {
	socket      string
	pg          string
	pgData      string
	natsURL     string
	pool        int
	poll        time.Duration
	subBatch    int
	stream      string
	subjects    string
	setupStream bool
	purge       bool
	maxBody     int64
	noForward   bool
}

func main() {
	var o options
	flag.StringVar(&o.socket, "socket", "./peer.sock", "unix socket to serve the API on")
	flag.StringVar(&o.pg, "pg", "host=/tmp port=5432 user=postgres dbname=postgres", "PostgreSQL connection string (pgx)")
	flag.StringVar(&o.pgData, "pg-data", "", "the cluster's data directory (its postmaster.pid names the processes whose CPU /metrics adds)")
	flag.StringVar(&o.natsURL, "nats", "nats://127.0.0.1:4222", "NATS server with JetStream")
	flag.IntVar(&o.pool, "pool", 16, "PostgreSQL connections for ingest (pgxpool MaxConns)")
	flag.DurationVar(&o.poll, "poll", 10*time.Millisecond, "watermill-sql subscriber PollInterval (wait after an empty poll; Watermill's default is 1s)")
	flag.IntVar(&o.subBatch, "sub-batch", 100, "watermill-sql SubscribeBatchSize (rows per SELECT; Watermill's default is 100)")
	flag.StringVar(&o.stream, "stream", "events", "JetStream stream to create if missing")
	flag.StringVar(&o.subjects, "subjects", "demo.>", "the stream's subjects (comma-separated)")
	flag.BoolVar(&o.setupStream, "setup-stream", false, "create the stream if missing, then exit")
	flag.BoolVar(&o.purge, "purge", false, "with -setup-stream: also purge the stream")
	flag.Int64Var(&o.maxBody, "max-body", 1<<20, "largest request body")
	flag.BoolVar(&o.noForward, "no-forward", false, "stop the forwarder once it has created the outbox tables: ingest only (run.sh FORWARD=0)")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)

	if err := ensureStream(o); err != nil {
		log.Fatal(err)
	}
	if o.setupStream {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		log.Fatal(err)
	}
}

// ensureStream creates the stream the router's config declares (file
// storage, one replica, kept forever, 2 m de-duplication window) unless it
// exists; with -purge it empties it.
func ensureStream(o options) error {
	nc, err := nats.Connect(o.natsURL)
	if err != nil {
		return fmt.Errorf("nats %s: %w", o.natsURL, err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		return err
	}
	if _, err := js.StreamInfo(o.stream); errors.Is(err, nats.ErrStreamNotFound) {
		_, err = js.AddStream(&nats.StreamConfig{
			Name:       o.stream,
			Subjects:   strings.Split(o.subjects, ","),
			Storage:    nats.FileStorage,
			Replicas:   1,
			Duplicates: 2 * time.Minute,
		})
		if err != nil {
			return fmt.Errorf("add stream %s: %w", o.stream, err)
		}
	} else if err != nil {
		return fmt.Errorf("stream %s: %w", o.stream, err)
	}
	if o.purge {
		if err := js.PurgeStream(o.stream); err != nil {
			return fmt.Errorf("purge stream %s: %w", o.stream, err)
		}
	}
	return nil
}

type server struct {
	o      options
	pool   *pgxpool.Pool
	logger watermill.LoggerAdapter
	schema wsql.DefaultPostgreSQLSchema
}

func run(ctx context.Context, o options) error {
	logger := watermill.NewSlogLoggerWithLevelMapping(nil, nil) // Info and up
	cfg, err := pgxpool.ParseConfig(o.pg)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(o.pool)
	cfg.MinConns = int32(o.pool)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}

	// The forwarder: its own connection for the subscriber (not taken from
	// the ingest pool), the outbox table read in batches, each message
	// published to JetStream and acknowledged before the next.
	subPool, err := pgxpool.New(ctx, o.pg)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer subPool.Close()
	schema := wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: o.subBatch}
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(subPool), wsql.SubscriberConfig{
		SchemaAdapter:    schema,
		OffsetsAdapter:   wsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true,
		PollInterval:     o.poll,
	}, logger)
	if err != nil {
		return err
	}
	pub, err := wnats.NewPublisher(wnats.PublisherConfig{
		URL:         o.natsURL,
		NatsOptions: []nats.Option{nats.Name("watermill-peer")},
		Marshaler:   &wnats.NATSMarshaler{},
		JetStream: wnats.JetStreamConfig{
			AutoProvision: false, // ensureStream made it, as the router's config does
			TrackMsgId:    true,  // Nats-Msg-Id = the event id, like the router
		},
	}, logger)
	if err != nil {
		return err
	}
	fwd, err := forwarder.NewForwarder(sub, pub, logger, forwarder.Config{ForwarderTopic: forwarderTopic})
	if err != nil {
		return err
	}
	fwdDone := make(chan error, 1)
	go func() { fwdDone <- fwd.Run(ctx) }()
	select {
	case <-fwd.Running(): // the subscriber created the outbox tables
	case err := <-fwdDone:
		return fmt.Errorf("forwarder: %w", err)
	}
	if o.noForward {
		if err := fwd.Close(); err != nil {
			return fmt.Errorf("forwarder: %w", err)
		}
	}

	s := &server{o: o, pool: pool, logger: logger, schema: schema}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/events", s.ingest)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /metrics", s.metrics)

	os.Remove(o.socket)
	ln, err := net.Listen("unix", o.socket)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(sctx)
		fwd.Close()
	}()
	log.Printf("watermill-peer: serving on %s (pool %d, poll %s, sub-batch %d)", o.socket, o.pool, o.poll, o.subBatch)
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// event is a structured CloudEvent as the bench sends it.
type event struct {
	SpecVersion     string          `json:"specversion"`
	Type            string          `json:"type"`
	Source          string          `json:"source"`
	ID              string          `json:"id"`
	Time            string          `json:"time"`
	Subject         string          `json:"subject"`
	DataContentType string          `json:"datacontenttype"`
	DataSchema      string          `json:"dataschema"`
	Data            json.RawMessage `json:"data"`
	DataBase64      string          `json:"data_base64"`
}

type accepted struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

func problem(w http.ResponseWriter, status int, code, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"status": status, "code": code, "detail": detail})
}

func (s *server) ingest(w http.ResponseWriter, r *http.Request) {
	media := r.Header.Get("Content-Type")
	if i := strings.IndexByte(media, ';'); i >= 0 {
		media = media[:i]
	}
	body, err := readAll(r, s.o.maxBody)
	if err != nil {
		problem(w, http.StatusRequestEntityTooLarge, "payload_too_large", err.Error())
		return
	}
	var events []event
	batch := false
	switch strings.TrimSpace(media) {
	case "application/cloudevents+json":
		events = make([]event, 1)
		err = json.Unmarshal(body, &events[0])
	case "application/cloudevents-batch+json":
		batch = true
		err = json.Unmarshal(body, &events)
	default:
		problem(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "structured or batch CloudEvents only")
		return
	}
	if err == nil && len(events) == 0 {
		err = errors.New("empty batch")
	}
	if err != nil {
		problem(w, http.StatusBadRequest, "invalid_event", err.Error())
		return
	}
	// One Watermill message per event, grouped by destination topic (the
	// event type = the NATS subject), in request order.
	byTopic := map[string][]*message.Message{}
	var topics []string
	out := make([]accepted, len(events))
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for i := range events {
		e := &events[i]
		if e.SpecVersion != "1.0" || e.Type == "" || e.Source == "" {
			problem(w, http.StatusBadRequest, "invalid_event", fmt.Sprintf("event %d: specversion 1.0, type and source are required", i))
			return
		}
		if e.ID == "" {
			id, err := uuid.NewV7()
			if err != nil {
				problem(w, http.StatusInternalServerError, "internal", err.Error())
				return
			}
			e.ID = id.String()
		}
		if e.Time == "" {
			e.Time = now
		}
		payload := []byte(e.Data)
		ct := e.DataContentType
		switch {
		case e.DataBase64 != "":
			payload, err = base64.StdEncoding.DecodeString(e.DataBase64)
			if err != nil {
				problem(w, http.StatusBadRequest, "invalid_event", err.Error())
				return
			}
		case len(e.Data) > 0 && ct == "":
			ct = "application/json"
		}
		msg := message.NewMessage(e.ID, payload)
		msg.Metadata.Set("ce-specversion", e.SpecVersion)
		msg.Metadata.Set("ce-id", e.ID)
		msg.Metadata.Set("ce-type", e.Type)
		msg.Metadata.Set("ce-source", e.Source)
		msg.Metadata.Set("ce-time", e.Time)
		if e.Subject != "" {
			msg.Metadata.Set("ce-subject", e.Subject)
		}
		if e.DataSchema != "" {
			msg.Metadata.Set("ce-dataschema", e.DataSchema)
		}
		if ct != "" {
			msg.Metadata.Set("content-type", ct)
		}
		if _, ok := byTopic[e.Type]; !ok {
			topics = append(topics, e.Type)
		}
		byTopic[e.Type] = append(byTopic[e.Type], msg)
		out[i] = accepted{ID: e.ID, Status: "accepted"}
	}

	if err := s.store(r.Context(), topics, byTopic); err != nil {
		s.logger.Error("ingest", err, nil)
		problem(w, http.StatusServiceUnavailable, "storage_unavailable", err.Error())
		return
	}
	var resp []byte
	if batch {
		resp, _ = json.Marshal(out)
	} else {
		resp, _ = json.Marshal(out[0])
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	w.Write(append(resp, '\n'))
}

// store is Watermill's outbox pattern: a watermill-sql publisher bound to
// the request's transaction, wrapped by the forwarder's publisher (which
// puts each message in an envelope naming its destination topic and writes
// it to the forwarder's table), then COMMIT.
func (s *server) store(ctx context.Context, topics []string, byTopic map[string][]*message.Message) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background()) // a no-op after Commit
	sqlPub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: s.schema}, s.logger)
	if err != nil {
		return err
	}
	pub := forwarder.NewPublisher(sqlPub, forwarder.PublisherConfig{ForwarderTopic: forwarderTopic})
	for _, t := range topics {
		if err := pub.Publish(t, byTopic[t]...); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

func readAll(r *http.Request, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(min(r.ContentLength, limit)))
	}
	n, err := buf.ReadFrom(http.MaxBytesReader(nil, r.Body, limit))
	if err != nil {
		return nil, err
	}
	return buf.Bytes()[:n], nil
}

// metrics serves what `router bench` reads (cmd/router/bench.go
// routerUseNames and switchyard_events{...}):
//
//	process_cpu_seconds_total           this process + the PostgreSQL cluster's processes
//	go_memstats_alloc_bytes_total,
//	go_memstats_mallocs_total,
//	go_memstats_heap_inuse_bytes        this process (runtime.ReadMemStats)
//	process_resident_memory_bytes       this process only (PostgreSQL's shared buffers would be counted once per backend)
//	switchyard_process_anon_resident_bytes  this process's RssAnon
//	switchyard_storage_used_bytes       pg_total_relation_size of the outbox and offsets tables
//	switchyard_storage_file_size_bytes  pg_database_size of the database
//	switchyard_events{state="stored"}   rows in the outbox table (Watermill's default schema never deletes them)
func (s *server) metrics(w http.ResponseWriter, r *http.Request) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	cpu := selfCPU()
	var pgCPU float64
	if s.o.pgData != "" {
		pgCPU = clusterCPU(s.o.pgData)
	}
	var used, file, rows float64
	ctx := r.Context()
	q := `SELECT pg_total_relation_size('watermill_` + forwarderTopic + `') + pg_total_relation_size('watermill_offsets_` + forwarderTopic + `'),
	             pg_database_size(current_database()),
	             (SELECT count(*) FROM watermill_` + forwarderTopic + `)`
	if err := s.pool.QueryRow(ctx, q).Scan(&used, &file, &rows); err != nil {
		s.logger.Error("metrics", err, nil)
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "process_cpu_seconds_total %g\n", cpu+pgCPU)
	fmt.Fprintf(bw, "watermill_peer_process_cpu_seconds_total %g\n", cpu)
	fmt.Fprintf(bw, "watermill_peer_postgres_cpu_seconds_total %g\n", pgCPU)
	fmt.Fprintf(bw, "go_memstats_alloc_bytes_total %d\n", ms.TotalAlloc)
	fmt.Fprintf(bw, "go_memstats_mallocs_total %d\n", ms.Mallocs)
	fmt.Fprintf(bw, "go_memstats_heap_inuse_bytes %d\n", ms.HeapInuse)
	fmt.Fprintf(bw, "process_resident_memory_bytes %d\n", selfRSS())
	fmt.Fprintf(bw, "switchyard_process_anon_resident_bytes %d\n", selfRssAnon())
	fmt.Fprintf(bw, "switchyard_storage_used_bytes %g\n", used)
	fmt.Fprintf(bw, "switchyard_storage_file_size_bytes %g\n", file)
	fmt.Fprintf(bw, "switchyard_events{state=\"stored\"} %g\n", rows)
	bw.Flush()
}

var clockTicks = 100.0 // USER_HZ on Linux

// procStat returns utime, stime, cutime, cstime (seconds) and ppid of pid.
func procStat(pid string) (ut, st, cut, cst float64, ppid string, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return
	}
	i := bytes.LastIndexByte(b, ')') // comm may hold spaces
	if i < 0 {
		return
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15, cutime 16, cstime 17.
	if len(f) < 15 {
		return
	}
	p := func(k int) float64 { v, _ := strconv.ParseFloat(f[k-3], 64); return v / clockTicks }
	return p(14), p(15), p(16), p(17), f[1], true
}

func selfCPU() float64 {
	ut, st, _, _, _, _ := procStat("self")
	return ut + st
}

func selfRSS() int64 {
	b, _ := os.ReadFile("/proc/self/statm")
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func selfRssAnon() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// clusterCPU is the CPU time of the postmaster (with its reaped children)
// and of every live child of it: backends, WAL writer, checkpointer, ...
func clusterCPU(dataDir string) float64 {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pm, _, _ := strings.Cut(string(b), "\n")
	pm = strings.TrimSpace(pm)
	ut, st, cut, cst, _, ok := procStat(pm)
	if !ok {
		return 0
	}
	total := ut + st + cut + cst
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		ut, st, _, _, ppid, ok := procStat(e.Name())
		if ok && ppid == pm {
			total += ut + st
		}
	}
	return total
}
