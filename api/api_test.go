package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/api"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/internal/testkit"
	"github.com/switchyard-router/switchyard/storage"
	"github.com/switchyard-router/switchyard/storage/storagetest"
)

const testConfig = `
listen {
  max_body  = "4KiB"
  max_batch = 10
}
event "order.created" {}
event "order.paid" {}
nats "local" { url = "nats://127.0.0.1:1" }
inbox "pay" {
  from    = "nats.local"
  subject = "pay"
}
`

// router is an API server on a real unix socket over a real data file. Its
// engine is not opened: events stay pending, which is what ingest tests
// want to see.
type router struct {
	t      *testing.T
	db     *storage.DB
	srv    *api.Server
	client *http.Client
	sock   string
}

func newRouter(t *testing.T) *router { t.Helper(); return newRouterWith(t, nil) }

// newRouterWith is newRouter with change made to the configuration first.
func newRouterWith(t *testing.T, change func(*config.Config)) *router {
	t.Helper()
	return newRouterOpts(t, change, api.Options{})
}

// newRouterOpts is newRouterWith with the server's options.
func newRouterOpts(t *testing.T, change func(*config.Config), opts api.Options) *router {
	t.Helper()
	cfg, err := config.Parse([]byte(testConfig), "test.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if change != nil {
		change(cfg)
	}
	dir, err := os.MkdirTemp("", "sy") // short: unix socket paths must stay under ~100 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg.Listen.Socket = filepath.Join(dir, "r.sock")
	db := storagetest.Open(t)
	eng, err := engine.New(db, cfg, nil, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := api.New(eng, cfg.Listen, opts)
	if err := srv.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	return &router{t: t, db: db, srv: srv, sock: cfg.Listen.Socket, client: testkit.UnixClient(cfg.Listen.Socket, 0, 128)}
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r *router) do(method, path string, header map[string]string, body string) reply {
	r.t.Helper()
	req, _ := http.NewRequest(method, "http://router"+path, strings.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, b}
}

func (r *router) post(header map[string]string, body string) reply {
	return r.do("POST", "/v1/events", header, body)
}

func structured(extra ...string) map[string]string {
	h := map[string]string{"Content-Type": "application/cloudevents+json"}
	for i := 0; i+1 < len(extra); i += 2 {
		h[extra[i]] = extra[i+1]
	}
	return h
}

// stored counts the events in the data file.
func (r *router) stored() int {
	n := 0
	r.db.View(func(tx *storage.Tx) error {
		for _, typ := range tx.Types() {
			n += tx.Queue(typ).Pending
		}
		return nil
	})
	return n
}

func (r *router) event(id string) map[string]any {
	r.t.Helper()
	rep := r.do("GET", "/v1/events/"+id, nil, "")
	if rep.status != 200 {
		r.t.Fatalf("GET %s = %d %s", id, rep.status, rep.body)
	}
	var v map[string]any
	json.Unmarshal(rep.body, &v)
	return v
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

const orderJSON = `{"specversion":"1.0","type":"order.created","source":"/shop","subject":"o-1","partitionkey":"cust-7","data":{"total":12}}`

// A structured-mode event without an id is a 202 with a UUIDv7 the router
// gave it, and is stored pending with its JSON data as application/json,
// its partition key, the request's traceparent and a time.
func TestPostStructured(t *testing.T) {
	r := newRouter(t)
	rep := r.post(structured("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), orderJSON)
	if rep.status != 202 {
		t.Fatalf("status %d: %s", rep.status, rep.body)
	}
	acc := decode[struct{ ID, Status string }](t, rep.body)
	if acc.Status != "accepted" || len(acc.ID) != 36 || acc.ID[14] != '7' {
		t.Fatalf("want a UUIDv7 id, got %+v", acc)
	}
	ev := r.event(acc.ID)
	if ev["state"] != "pending" || ev["type"] != "order.created" || ev["source"] != "/shop" {
		t.Fatalf("stored event: %v", ev)
	}
	var rec *storage.Record
	r.db.View(func(tx *storage.Tx) (err error) { rec, err = tx.Record(acc.ID); return })
	if string(rec.Event.Data) != `{"total":12}` || rec.Event.DataContentType != "application/json" ||
		rec.Event.PartitionKey() != "cust-7" || rec.Event.Extension("traceparent") == "" || rec.Event.Time.IsZero() {
		t.Fatalf("stored record: %+v", rec.Event)
	}
}

// GET /v1/events/{id}?include=history,event adds the attempts (an empty
// list before the first: asked for, the key is there) and the event as
// stored, its data byte for byte; without include, neither.
func TestEventViewIncludes(t *testing.T) {
	r := newRouter(t)
	body := `{"specversion":"1.0","id":"inc-1","type":"order.created","source":"/shop","datacontenttype":"application/json","data":{ "total" : 12 }}`
	if rep := r.post(structured(), body); rep.status != 202 {
		t.Fatalf("status %d: %s", rep.status, rep.body)
	}
	full := r.do("GET", "/v1/events/inc-1?include=history,event", nil, "")
	v := decode[struct {
		State   string `json:"state"`
		History *[]any `json:"history"`
		Event   struct {
			ID   string          `json:"id"`
			Data json.RawMessage `json:"data"`
		} `json:"event"`
	}](t, full.body)
	if full.status != 200 || v.State != "pending" || v.Event.ID != "inc-1" || string(v.Event.Data) != `{ "total" : 12 }` {
		t.Fatalf("include=history,event: %d %s", full.status, full.body)
	}
	if v.History == nil || len(*v.History) != 0 {
		t.Fatalf("include=history before any attempt: want \"history\": [], got %s", full.body)
	}
	if plain := r.event("inc-1"); plain["event"] != nil || plain["history"] != nil {
		t.Fatalf("without include: %v", plain)
	}
}

// A binary-mode event is stored from its headers and body: the body as its
// data, Content-Type as its content type, the partition key percent-decoded
// ("k%201" is "k 1") and Ce-Time as its time.
func TestPostBinary(t *testing.T) {
	r := newRouter(t)
	rep := r.post(map[string]string{
		"Content-Type": "text/plain", "Ce-Specversion": "1.0", "Ce-Type": "order.paid",
		"Ce-Source": "/pay", "Ce-Id": "pay-1", "Ce-Partitionkey": "k%201", "Ce-Time": "2026-01-02T03:04:05Z",
	}, "paid in full")
	if rep.status != 202 {
		t.Fatalf("status %d: %s", rep.status, rep.body)
	}
	var rec *storage.Record
	r.db.View(func(tx *storage.Tx) (err error) { rec, err = tx.Record("pay-1"); return })
	if rec == nil || string(rec.Event.Data) != "paid in full" || rec.Event.DataContentType != "text/plain" ||
		rec.Event.PartitionKey() != "k 1" || rec.Event.Time.Year() != 2026 {
		t.Fatalf("stored: %+v", rec)
	}
}

// A batch is stored whole or not at all: one bad event refuses it. An
// empty batch, which the HTTP binding allows, is a 202 with an empty list
// that stores nothing.
func TestPostBatchIsAllOrNothing(t *testing.T) {
	r := newRouter(t)
	if rep := r.post(map[string]string{"Content-Type": "application/cloudevents-batch+json"}, " [ ] "); rep.status != 202 || strings.TrimSpace(string(rep.body)) != "[]" || r.stored() != 0 {
		t.Fatalf("empty batch: %d %s, stored %d", rep.status, rep.body, r.stored())
	}
	// Under an Idempotency-Key the key's contract holds for it too: the
	// same empty batch replays, another body under the key is a 422.
	keyed := map[string]string{"Content-Type": "application/cloudevents-batch+json", "Idempotency-Key": "empty"}
	if rep := r.post(keyed, "[]"); rep.status != 202 || strings.TrimSpace(string(rep.body)) != "[]" {
		t.Fatalf("keyed empty batch: %d %s", rep.status, rep.body)
	}
	if rep := r.post(keyed, "[]"); rep.status != 202 || rep.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("keyed empty batch again: %d %s %v", rep.status, rep.body, rep.header)
	}
	if rep := r.post(keyed, "["+orderJSON+"]"); rep.status != 422 || r.stored() != 0 {
		t.Fatalf("another body under the empty batch's key: %d %s, stored %d", rep.status, rep.body, r.stored())
	}
	batch := `[` + orderJSON + `,{"specversion":"1.0","type":"order.paid","source":"/pay","id":"p-1","data_base64":"AAEC"}]`
	rep := r.post(map[string]string{"Content-Type": "application/cloudevents-batch+json"}, batch)
	if rep.status != 202 {
		t.Fatalf("status %d: %s", rep.status, rep.body)
	}
	list := decode[[]struct{ ID, Status string }](t, rep.body)
	if len(list) != 2 || list[1].ID != "p-1" || r.stored() != 2 {
		t.Fatalf("batch reply %s, stored %d", rep.body, r.stored())
	}
	// One bad event sinks the whole batch.
	bad := `[` + orderJSON + `,{"specversion":"1.0","source":"/x"}]`
	rep = r.post(map[string]string{"Content-Type": "application/cloudevents-batch+json"}, bad)
	if rep.status != 400 || r.stored() != 2 {
		t.Fatalf("bad batch: %d %s, stored %d", rep.status, rep.body, r.stored())
	}
}

// Every bad request gets problem+json with its stable code, and nothing is
// stored.
func TestBadInputStoresNothing(t *testing.T) {
	r := newRouter(t)
	big := `{"specversion":"1.0","type":"order.created","source":"/s","data":"` + strings.Repeat("x", 5000) + `"}`
	var many []string
	for range 11 {
		many = append(many, orderJSON)
	}
	batchCT := map[string]string{"Content-Type": "application/cloudevents-batch+json"}
	cases := []struct {
		name   string
		header map[string]string
		body   string
		status int
		code   string
	}{
		{"malformed json", structured(), `{"specversion":`, 400, "invalid_event"},
		{"not an object", structured(), `[1,2]`, 400, "invalid_event"},
		{"missing type", structured(), `{"specversion":"1.0","source":"/s"}`, 400, "invalid_event"},
		{"missing source", structured(), `{"specversion":"1.0","type":"order.created"}`, 400, "invalid_event"},
		{"missing specversion", structured(), `{"type":"order.created","source":"/s"}`, 400, "invalid_event"},
		{"wrong specversion", structured(), `{"specversion":"0.3","type":"order.created","source":"/s"}`, 400, "invalid_event"},
		{"time past 2261", structured(), `{"specversion":"1.0","type":"order.created","source":"/s","time":"2300-01-01T00:00:00Z"}`, 400, "invalid_event"},
		{"time before 1678", structured(), `{"specversion":"1.0","type":"order.created","source":"/s","time":"1000-01-01T00:00:00Z"}`, 400, "invalid_event"},
		{"bad time", structured(), `{"specversion":"1.0","type":"order.created","source":"/s","time":"yesterday"}`, 400, "invalid_event"},
		// Valid RFC 3339 that a Go time cannot hold: stored as the second
		// after, it would be another instant than the one sent.
		{"leap second", structured(), `{"specversion":"1.0","type":"order.created","source":"/s","time":"2016-12-31T23:59:60Z"}`, 400, "invalid_event"},
		// Go's zero time, which was taken as no time and replaced by the
		// time of ingest (an adversarial trial).
		{"time of year 1", structured(), `{"specversion":"1.0","type":"order.created","source":"/s","time":"0001-01-01T00:00:00Z"}`, 400, "invalid_event"},
		{"time of year 1 in a header", map[string]string{"Ce-Specversion": "1.0", "Ce-Type": "order.created", "Ce-Source": "/s", "Ce-Time": "0001-01-01T00:00:00Z"}, "", 400, "invalid_event"},
		// A member named twice: a proxy that read the first would not see
		// the event the router stored (the last).
		{"type named twice", structured(), `{"specversion":"1.0","type":"order.created","source":"/s","type":"other.type"}`, 400, "invalid_event"},
		{"data named twice", structured(), `{"specversion":"1.0","type":"order.created","source":"/s","data":1,"data":2}`, 400, "invalid_event"},
		{"extension named twice", structured(), `{"specversion":"1.0","type":"order.created","source":"/s","ext":"a","ext":"b"}`, 400, "invalid_event"},
		{"bad extension name", structured(), `{"specversion":"1.0","type":"order.created","source":"/s","Bad-Name":"x"}`, 400, "invalid_event"},
		// The JSON format's types: context attributes are strings, an
		// extension's number a whole 32-bit one.
		{"number specversion", structured(), `{"specversion":1.0,"type":"order.created","source":"/s"}`, 400, "invalid_event"},
		{"number id", structured(), `{"specversion":"1.0","id":5,"type":"order.created","source":"/s"}`, 400, "invalid_event"},
		{"boolean type", structured(), `{"specversion":"1.0","type":true,"source":"/s"}`, 400, "invalid_event"},
		{"fraction extension", structured(), `{"specversion":"1.0","type":"order.created","source":"/s","amount":1.5}`, 400, "invalid_event"},
		{"huge extension", structured(), `{"specversion":"1.0","type":"order.created","source":"/s","amount":1e400}`, 400, "invalid_event"},
		{"object attribute", structured(), `{"specversion":"1.0","type":"order.created","source":"/s","subject":{}}`, 400, "invalid_event"},
		{"data and data_base64", structured(), `{"specversion":"1.0","type":"order.created","source":"/s","data":1,"data_base64":"AA=="}`, 400, "invalid_event"},
		{"slash in id", structured(), `{"specversion":"1.0","type":"order.created","source":"/s","id":"../x"}`, 400, "invalid_event"},
		// Ids no URL can name: clients resolve them away (router dlq show .
		// asked for the list; an adversarial trial).
		{"id dot", structured(), `{"specversion":"1.0","type":"order.created","source":"/s","id":"."}`, 400, "invalid_event"},
		// An empty id was read as no id: the router assigned one, and
		// each retry of the event was stored again (an adversarial trial).
		{"empty id", structured(), `{"specversion":"1.0","type":"order.created","source":"/s","id":""}`, 400, "invalid_event"},
		{"empty id in a batch", batchCT, `[{"specversion":"1.0","type":"order.paid","source":"/s","id":""}]`, 400, "invalid_event"},
		{"empty id in a header", map[string]string{"Ce-Specversion": "1.0", "Ce-Type": "order.created", "Ce-Source": "/s", "Ce-Id": ""}, "", 400, "invalid_event"},
		// The prefix alone names no attribute: it was dropped unsaid.
		{"a ce- header without a name", map[string]string{"Ce-Specversion": "1.0", "Ce-Type": "order.created", "Ce-Source": "/s", "Ce-": "x"}, "", 400, "invalid_event"},
		{"latin-1 structured", map[string]string{"Content-Type": "application/cloudevents+json; charset=iso-8859-1"}, `{"specversion":"1.0","type":"order.created","source":"/s"}`, 415, "unsupported_media_type"},
		{"binary without ce-specversion", map[string]string{"Ce-Type": "order.created", "Ce-Source": "/s", "Content-Type": "text/plain"}, "hi", 400, "invalid_event"},
		{"id dot dot", map[string]string{"Ce-Specversion": "1.0", "Ce-Type": "order.created", "Ce-Source": "/s", "Ce-Id": ".."}, "", 400, "invalid_event"},
		{"invalid utf-8", structured(), "{\"specversion\":\"1.0\",\"type\":\"order.created\",\"source\":\"/\xff\"}", 400, "invalid_event"},
		{"invalid utf-8 header", map[string]string{"Ce-Specversion": "1.0", "Ce-Type": "order.created", "Ce-Source": "/\xff"}, "", 400, "invalid_event"},
		// CR, LF, NUL and C1 controls as JSON escapes: stored as sent, they
		// would be published otherwise (header bindings cannot carry them).
		{"CR LF in subject", structured(), `{"specversion":"1.0","type":"order.created","source":"/s","subject":"a\r\nb"}`, 400, "invalid_event"},
		{"NUL in an extension", structured(), `{"specversion":"1.0","type":"order.created","source":"/s","tenantid":"a\u0000b"}`, 400, "invalid_event"},
		{"C1 control in source", structured(), `{"specversion":"1.0","type":"order.created","source":"/s\u0085"}`, 400, "invalid_event"},
		{"DEL in type", structured(), `{"specversion":"1.0","type":"order.created\u007f","source":"/s"}`, 400, "invalid_event"},
		{"control in a binary header", map[string]string{"Ce-Specversion": "1.0", "Ce-Type": "order.created", "Ce-Source": "/s", "Ce-Subject": "a%0Ab"}, "", 400, "invalid_event"},
		{"wrong content type", map[string]string{"Content-Type": "application/json"}, orderJSON, 415, "unsupported_media_type"},
		// No route decodes a content coding: the coded bytes would be
		// stored and published as the data.
		{"gzip body", map[string]string{"Content-Type": "application/cloudevents+json", "Content-Encoding": "gzip"}, orderJSON, 415, "unsupported_media_type"},
		{"gzip binary", map[string]string{"Ce-Specversion": "1.0", "Ce-Type": "order.created", "Ce-Source": "/s", "Content-Type": "application/json", "Content-Encoding": "gzip"}, "x", 415, "unsupported_media_type"},
		{"body too large", structured(), big, 413, "payload_too_large"},
		{"batch too large", batchCT, "[" + strings.Join(many, ",") + "]", 413, "payload_too_large"},
		{"batch duplicate ids", batchCT, `[{"specversion":"1.0","type":"order.paid","source":"/s","id":"1"},{"specversion":"1.0","type":"order.paid","source":"/s","id":"1"}]`, 400, "invalid_event"},
		// Events are stored by id: one id from two sources is the same
		// problem, said so (it was a 409 "already stored").
		{"batch duplicate ids, two sources", batchCT, `[{"specversion":"1.0","type":"order.paid","source":"/a","id":"1"},{"specversion":"1.0","type":"order.paid","source":"/b","id":"1"}]`, 400, "invalid_event"},
		{"the catch-all's name as a type", structured(), `{"specversion":"1.0","type":"*","source":"/s"}`, 400, "invalid_event"},
		{"unknown type", structured(), `{"specversion":"1.0","type":"nope","source":"/s"}`, 422, "unknown_event_type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := r.post(c.header, c.body)
			if rep.status != c.status {
				t.Fatalf("status = %d, want %d: %s", rep.status, c.status, rep.body)
			}
			if ct := rep.header.Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("content type %q", ct)
			}
			p := decode[struct {
				Type, Code, Detail string
				Status             int
			}](t, rep.body)
			if p.Code != c.code || p.Status != c.status || !strings.HasSuffix(p.Type, c.code) || p.Detail == "" {
				t.Fatalf("problem = %+v, want code %s", p, c.code)
			}
			if n := r.stored(); n != 0 {
				t.Fatalf("%d events stored", n)
			}
		})
	}
}

// 100 concurrent posts of one body under one Idempotency-Key store one
// event and get the same answer, 99 of them marked Idempotent-Replayed, and
// the event is found again by its key.
func TestIdempotencyKeyConcurrentSameBody(t *testing.T) {
	r := newRouter(t)
	const n = 100
	replies := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = r.post(structured("Idempotency-Key", "k-1"), orderJSON)
		}()
	}
	wg.Wait()
	replayed := 0
	for i, rep := range replies {
		if rep.status != replies[0].status || !bytes.Equal(rep.body, replies[0].body) {
			t.Fatalf("reply %d = %d %s; reply 0 = %d %s", i, rep.status, rep.body, replies[0].status, replies[0].body)
		}
		if rep.header.Get("Idempotent-Replayed") == "true" {
			replayed++
		}
	}
	if replies[0].status != 202 || r.stored() != 1 || replayed != n-1 {
		t.Fatalf("status %d, stored %d, replayed %d", replies[0].status, r.stored(), replayed)
	}
	// Found again by the key: the way out of "did my request land?".
	rep := r.do("GET", "/v1/events?idempotency_key=k-1", nil, "")
	found := decode[struct{ Events []struct{ ID string } }](t, rep.body)
	acc := decode[struct{ ID string }](t, replies[0].body)
	if rep.status != 200 || len(found.Events) != 1 || found.Events[0].ID != acc.ID {
		t.Fatalf("by key: %d %s", rep.status, rep.body)
	}
}

// A retry under the same Idempotency-Key replays the stored response when
// only how it was sent changed: a new traceparent (tracing middleware
// makes one per attempt), none, or the structured content type spelled
// with other case or a charset.
func TestIdempotencyKeyRetryWithNewTrace(t *testing.T) {
	r := newRouter(t)
	first := r.post(structured("Idempotency-Key", "k", "Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), orderJSON)
	if first.status != 202 {
		t.Fatal(first.status, string(first.body))
	}
	for _, h := range []map[string]string{
		structured("Idempotency-Key", "k", "Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01"),
		structured("Idempotency-Key", "k"),
		{"Content-Type": "Application/CloudEvents+JSON; charset=utf-8", "Idempotency-Key": "k"},
		{"Content-Type": "application/cloudevents+json; charset=US-ASCII", "Idempotency-Key": "k"}, // a part of UTF-8
	} {
		rep := r.post(h, orderJSON)
		if rep.status != 202 || rep.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(rep.body, first.body) {
			t.Errorf("retry %v: %d %s", h, rep.status, rep.body)
		}
	}
	if n := r.stored(); n != 1 {
		t.Errorf("%d events stored, want 1", n)
	}
}

// A binary-mode attribute header or an Idempotency-Key sent twice is a 400
// that stores nothing (which value would count?); a refusal never says it
// kept or dropped what it refused. Repeated trace headers are no reason to
// refuse: tracestate's lines join into its list, traceparent's first counts.
func TestRepeatedHeadersAreRefused(t *testing.T) {
	r := newRouter(t)
	for _, c := range []struct {
		name   string
		header http.Header
		want   string
	}{
		{"ce-id twice", http.Header{"Ce-Specversion": {"1.0"}, "Ce-Type": {"order.created"}, "Ce-Source": {"/s"}, "Ce-Id": {"b1", "b2"}, "Content-Type": {"text/plain"}}, "header Ce-Id: the header is repeated"},
		{"Idempotency-Key twice", http.Header{"Content-Type": {"application/cloudevents+json"}, "Idempotency-Key": {"k1", "k2"}}, "Idempotency-Key is repeated"},
		{"bad percent-encoding", http.Header{"Ce-Specversion": {"1.0"}, "Ce-Type": {"order.created"}, "Ce-Source": {"/a%zzb"}, "Content-Type": {"text/plain"}}, "header Ce-Source: bad percent-encoding"},
		{"bad extension name", http.Header{"Ce-Specversion": {"1.0"}, "Ce-Type": {"order.created"}, "Ce-Source": {"/s"}, "Ce-Bad_name": {"x"}, "Content-Type": {"text/plain"}}, "names are 1 to 64 lower-case letters and digits"},
	} {
		req, _ := http.NewRequest("POST", "http://r/v1/events", strings.NewReader(orderJSON))
		req.Header = c.header
		resp, err := r.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(body), c.want) || strings.Contains(string(body), "kept") || strings.Contains(string(body), "dropped") {
			t.Errorf("%s: %d %s", c.name, resp.StatusCode, body)
		}
	}
	if n := r.stored(); n != 0 {
		t.Errorf("%d events stored", n)
	}
	// Trace headers are not the event's to refuse: tracestate is a list
	// (its lines join), of traceparent the first counts.
	req, _ := http.NewRequest("POST", "http://r/v1/events", strings.NewReader("x"))
	req.Header = http.Header{"Ce-Specversion": {"1.0"}, "Ce-Type": {"order.created"}, "Ce-Source": {"/s"}, "Ce-Id": {"traced"}, "Content-Type": {"text/plain"},
		"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01"},
		"Tracestate":  {"a=1", "b=2"}}
	resp, err := r.client.Do(req)
	if err != nil || resp.StatusCode != 202 {
		t.Fatalf("repeated trace headers: %v %v", resp, err)
	}
	resp.Body.Close()
	r.db.View(func(tx *storage.Tx) error {
		rec, err := tx.Record("traced")
		if err != nil || rec.Event.Extension("tracestate") != "a=1,b=2" || !strings.HasSuffix(rec.Event.Extension("traceparent"), "00f067aa0ba902b7-01") {
			t.Errorf("the stored event's trace context: %+v, %v", rec, err)
		}
		return nil
	})
}

// A body that does not arrive within read_timeout is a 408
// request_timeout (problem+json) that stores nothing: not a 400 that
// calls a valid event invalid and tells its client to drop it.
func TestSlowBodyIsATimeout(t *testing.T) {
	r := newRouterWith(t, func(cfg *config.Config) { cfg.Listen.ReadTimeout = 300 * time.Millisecond })
	conn, err := net.Dial("unix", r.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/events HTTP/1.1\r\nHost: r\r\nContent-Type: application/cloudevents+json\r\nContent-Length: %d\r\n\r\n%s", len(orderJSON), orderJSON[:10])
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), `"code":"request_timeout"`) || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if n := r.stored(); n != 0 {
		t.Fatalf("%d events stored", n)
	}
}

// The same Idempotency-Key with another body is a 422 idempotency_key_reuse
// that stores nothing; keys are each tenant's own: another tenant's k is
// new to it, and a third tenant cannot find the event by k.
func TestIdempotencyKeyReuseWithAnotherBody(t *testing.T) {
	r := newRouter(t)
	if rep := r.post(structured("Idempotency-Key", "k"), orderJSON); rep.status != 202 {
		t.Fatal(rep.status)
	}
	other := strings.Replace(orderJSON, `"total":12`, `"total":13`, 1)
	rep := r.post(structured("Idempotency-Key", "k"), other)
	if rep.status != 422 || decode[struct{ Code string }](t, rep.body).Code != "idempotency_key_reuse" || r.stored() != 1 {
		t.Fatalf("reuse: %d %s, stored %d", rep.status, rep.body, r.stored())
	}
	// Keys are scoped by tenant: another tenant's k is its own.
	if rep := r.post(structured("Idempotency-Key", "k", "X-Tenant", "other"), other); rep.status != 202 || rep.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("other tenant: %d %s", rep.status, rep.body)
	}
	if rep := r.do("GET", "/v1/events?idempotency_key=k", map[string]string{"X-Tenant": "third"}, ""); rep.status != 404 {
		t.Fatalf("third tenant sees the key: %d", rep.status)
	}
}

// An event sent again under the client's own id, in either mode or with a
// new traceparent, is a replayed 202 stored once; the same id with other
// data is a 422, and a batch repeating it stores only the new event,
// marking the repeat "duplicate".
func TestClientIDIsANaturalKey(t *testing.T) {
	r := newRouter(t)
	ev := `{"specversion":"1.0","type":"order.paid","source":"/pay","id":"p-9","data":{"n":1}}`
	first := r.post(structured(), ev)
	again := r.post(structured(), ev)
	if first.status != 202 || again.status != 202 || !bytes.Equal(first.body, again.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %d %s; again %d %s %v", first.status, first.body, again.status, again.body, again.header)
	}
	// The same event in binary mode is the same event.
	bin := r.post(map[string]string{"Content-Type": "application/json", "Ce-Specversion": "1.0", "Ce-Type": "order.paid", "Ce-Source": "/pay", "Ce-Id": "p-9"}, `{"n":1}`)
	if bin.status != 202 || bin.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("binary resend: %d %s", bin.status, bin.body)
	}
	// A retry carries a new traceparent (per attempt): still the same event.
	for _, h := range []map[string]string{
		{"Content-Type": "application/json", "Ce-Specversion": "1.0", "Ce-Type": "order.paid", "Ce-Source": "/pay", "Ce-Id": "p-9",
			"Traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		structured("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
	} {
		body := `{"n":1}`
		if h["Ce-Id"] == "" {
			body = ev
		}
		if rep := r.post(h, body); rep.status != 202 || rep.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("resend with a new traceparent: %d %s", rep.status, rep.body)
		}
	}
	changed := r.post(structured(), strings.Replace(ev, `"n":1`, `"n":2`, 1))
	if changed.status != 422 || r.stored() != 1 {
		t.Fatalf("changed: %d %s, stored %d", changed.status, changed.body, r.stored())
	}
	// A batch repeating it stores only the new event and says so.
	rep := r.post(map[string]string{"Content-Type": "application/cloudevents-batch+json"}, "["+ev+","+orderJSON+"]")
	list := decode[[]struct{ ID, Status string }](t, rep.body)
	if rep.status != 202 || list[0].Status != "duplicate" || list[1].Status != "accepted" || r.stored() != 2 {
		t.Fatalf("batch: %d %s, stored %d", rep.status, rep.body, r.stored())
	}
}

// An event is read only by its tenant: another tenant's GET of its id is a
// 404.
func TestTenantsSeeOnlyTheirEvents(t *testing.T) {
	r := newRouter(t)
	rep := r.post(structured("X-Tenant", "a"), orderJSON)
	id := decode[struct{ ID string }](t, rep.body).ID
	if got := r.do("GET", "/v1/events/"+id, map[string]string{"X-Tenant": "b"}, ""); got.status != 404 {
		t.Fatalf("tenant b reads tenant a's event: %d", got.status)
	}
	if got := r.do("GET", "/v1/events/"+id, map[string]string{"X-Tenant": "a"}, ""); got.status != 200 {
		t.Fatalf("tenant a: %d", got.status)
	}
}

// An event posted while the data file is closed is a 503
// storage_unavailable with a Retry-After.
func TestStorageClosedIs503(t *testing.T) {
	r := newRouter(t)
	r.db.Close(context.Background())
	rep := r.post(structured(), orderJSON)
	if rep.status != 503 || decode[struct{ Code string }](t, rep.body).Code != "storage_unavailable" || rep.header.Get("Retry-After") == "" {
		t.Fatalf("%d %s", rep.status, rep.body)
	}
}

// The socket is created 0660; a live one is refused, a stale one
// replaced, and one in a directory anyone may write to is not created.
func TestSocketPermissionsAndStaleSocket(t *testing.T) {
	r := newRouter(t)
	fi, err := os.Stat(r.sock)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o660 {
		t.Fatalf("socket mode %o, want 660", perm)
	}
	// A live socket is refused.
	cfg := listenOn(r.sock, "", "")
	if err := api.New(nil, cfg, api.Options{}).Open(); err == nil || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("second server on a live socket: %v", err)
	}
	// A stale one (nobody listening) is replaced.
	stale := filepath.Join(filepath.Dir(r.sock), "stale.sock")
	ln, _ := net.Listen("unix", stale)
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	srv := api.New(nil, listenOn(stale, "", ""), api.Options{})
	if err := srv.Open(); err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	srv.Close(context.Background())
	// In a directory another user could write to, they could move the
	// socket aside and answer in its place (internal/fsperm).
	open := filepath.Join(filepath.Dir(r.sock), "open")
	os.Mkdir(open, 0o700)
	os.Chmod(open, 0o777)
	sock := filepath.Join(open, "r.sock")
	if err := api.New(nil, listenOn(sock, "", ""), api.Options{}).Open(); err == nil || !strings.Contains(err.Error(), "may be written by anyone (mode 0777)") {
		t.Fatalf("a socket in a world-writable directory: %v", err)
	}
	if _, err := os.Lstat(sock); err == nil {
		t.Error("the socket was created")
	}
}

// A path no route serves, or a console file that does not exist, is a
// 404 problem; a route asked with a method it
// does not take is a 405 problem whose Allow header says which it takes.
func TestUnknownRouteIsProblem(t *testing.T) {
	r := newRouter(t)
	rep := r.do("GET", "/v2/nothing", nil, "")
	if rep.status != 404 || rep.header.Get("Content-Type") != "application/problem+json" || rep.header.Get("Allow") != "" {
		t.Fatalf("%d %s", rep.status, rep.body)
	}
	// A file the console does not have too (it was the file server's text).
	if rep := r.do("GET", "/ui/nothing.js", nil, ""); rep.status != 404 || rep.header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("GET /ui/nothing.js: %d %q %s", rep.status, rep.header.Get("Content-Type"), rep.body)
	}
	if rep := r.do("GET", "/ui/console.js", nil, ""); rep.status != 200 {
		t.Errorf("GET /ui/console.js: %d", rep.status)
	}
	rep = r.do("PUT", "/v1/events", nil, "")
	if rep.status != 405 || rep.header.Get("Allow") != "GET, POST" || !strings.Contains(string(rep.body), `"code":"method_not_allowed"`) {
		t.Errorf("PUT /v1/events: %d, Allow %q: %s", rep.status, rep.header.Get("Allow"), rep.body)
	}
	rep = r.do("GET", "/v1/events/"+fmt.Sprint("missing"), nil, "")
	if rep.status != 404 {
		t.Fatal(rep.status)
	}
}

// 100 concurrent claims of one id over the socket: one 201, 99 409s with
// Retry-After; complete, then claims get 200 and the stored result.
func TestClaimsOverHTTP(t *testing.T) {
	r := newRouter(t)
	const n = 100
	codes := make([]int, n)
	retry := make([]string, n)
	var tokens []string
	var tokensMu sync.Mutex
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep := r.do("POST", "/v1/inbox/mailer/claims", nil, `{"id":"evt-1","lease":"1m"}`)
			codes[i], retry[i] = rep.status, rep.header.Get("Retry-After")
			if rep.status == 201 {
				tokensMu.Lock()
				tokens = append(tokens, decode[struct{ Token string }](t, rep.body).Token)
				tokensMu.Unlock()
			}
		}()
	}
	wg.Wait()
	count := map[int]int{}
	for i, c := range codes {
		count[c]++
		if c == 409 && retry[i] == "" {
			t.Fatal("409 without Retry-After")
		}
	}
	if count[201] != 1 || count[409] != n-1 {
		t.Fatalf("statuses: %v", count)
	}
	// Complete needs the claim's token: the 201 gave it; a claim's answer
	// while the lease holds does not.
	if rep := r.do("POST", "/v1/inbox/mailer/claims/evt-1/complete", nil, `{"result":{"sent":true}}`); rep.status != 400 || !strings.Contains(string(rep.body), "token") {
		t.Fatalf("complete without the token: %d %s", rep.status, rep.body)
	}
	if rep := r.do("POST", "/v1/inbox/mailer/claims/evt-1/complete", nil, `{"token":"0","result":{"sent":true}}`); rep.status != 409 {
		t.Fatalf("complete with another token: %d %s", rep.status, rep.body)
	}
	if rep := r.do("POST", "/v1/inbox/mailer/claims/evt-1/complete", nil, `{"token":"`+tokens[0]+`","result":{"sent":true}}`); rep.status != 200 {
		t.Fatalf("complete: %d %s", rep.status, rep.body)
	}
	rep := r.do("POST", "/v1/inbox/mailer/claims", nil, `{"id":"evt-1"}`)
	v := decode[struct {
		State  string
		Result map[string]bool
	}](t, rep.body)
	if rep.status != 200 || v.State != "completed" || !v.Result["sent"] {
		t.Fatalf("claim after complete: %d %s", rep.status, rep.body)
	}
	if rep := r.do("POST", "/v1/inbox/mailer/claims", nil, `{"id":"x","mode":"sometimes"}`); rep.status != 400 {
		t.Fatalf("bad mode: %d", rep.status)
	}
	if rep := r.do("GET", "/v1/inbox/nope/dedup", nil, ""); rep.status != 404 {
		t.Fatalf("unknown inbox audit: %d", rep.status)
	}
	if rep := r.do("GET", "/v1/subscriptions/pay/messages?max=5&wait=10ms", nil, ""); rep.status != 200 || !strings.Contains(string(rep.body), `"messages":[]`) {
		t.Fatalf("empty pull: %d %s", rep.status, rep.body)
	}
}

// GET /v1/claims pages through every claim with an opaque cursor that
// neither skips nor repeats one, and a cursor the router did not hand out
// for that listing (made up, or another listing's, whatever its shape) is
// a 400, not a page from somewhere; so is one given with other filters.
func TestClaimsPaging(t *testing.T) {
	r := newRouter(t)
	for _, id := range []string{"c", "a", "b"} {
		if rep := r.do("POST", "/v1/inbox/mailer/claims", nil, `{"id":"`+id+`","lease":"1m"}`); rep.status != 201 {
			t.Fatalf("claim %s: %d %s", id, rep.status, rep.body)
		}
	}
	var seen []string
	for path := "/v1/claims?limit=1"; ; {
		rep := r.do("GET", path, nil, "")
		page := decode[struct {
			Claims     []struct{ ID string }
			NextCursor string `json:"next_cursor"`
		}](t, rep.body)
		if rep.status != 200 || len(page.Claims) > 1 {
			t.Fatalf("%s: %d %s", path, rep.status, rep.body)
		}
		for _, c := range page.Claims {
			seen = append(seen, c.ID)
		}
		if page.NextCursor == "" {
			break
		}
		if strings.ContainsRune(page.NextCursor, 0) || url.QueryEscape(page.NextCursor) != page.NextCursor {
			t.Fatalf("cursor %q needs escaping in a URL", page.NextCursor)
		}
		path = "/v1/claims?limit=1&cursor=" + page.NextCursor
	}
	if strings.Join(seen, " ") != "a b c" {
		t.Fatalf("paged %v, want a b c", seen)
	}
	// A cursor of every consumer's listing, given with a consumer: refused
	// as one handed out with other filters.
	all := decode[struct {
		NextCursor string `json:"next_cursor"`
	}](t, r.do("GET", "/v1/claims?limit=1", nil, "").body)
	if rep := r.do("GET", "/v1/claims?limit=1&consumer=mailer&cursor="+all.NextCursor, nil, ""); rep.status != 400 || !strings.Contains(string(rep.body), "other filters") {
		t.Errorf("every consumer's cursor given with consumer=mailer: %d %s", rep.status, rep.body)
	}
	// A DLQ cursor whose position has the form of a claim's key, a claims
	// cursor without that form, and a claims cursor given to the DLQ.
	dlqCursor := engine.EncodeCursor(engine.CursorDLQ, "", []byte("0123456\x00mailer\x00a"))
	for _, c := range []string{"/v1/claims?cursor=zzz", "/v1/claims?cursor=%00mailer%00a", "/v1/claims?cursor=" + dlqCursor,
		"/v1/claims?cursor=" + engine.EncodeCursor(engine.CursorClaims, "", []byte("no separators")),
		"/v1/dlq?cursor=" + engine.EncodeCursor(engine.CursorClaims, "", []byte("0123456789abcdef")),
	} {
		rep := r.do("GET", c, nil, "")
		if rep.status != 400 || decode[struct{ Code string }](t, rep.body).Code != "invalid_request" || !strings.Contains(string(rep.body), "cursor") {
			t.Errorf("%s: %d %s", c, rep.status, rep.body)
		}
	}
}

// listenOn is a resolved listen block (config.NewListen) on socket, with a
// TCP listener on http and its tokens file when they are not "", and small
// limits.
func listenOn(socket, http, tokens string) config.Listen {
	l := config.NewListen(socket)
	l.HTTP, l.TokensFile, l.MaxBody, l.MaxBatch = http, tokens, 1024, 1
	return l
}

// An id longer than any the router stores is refused with 400, and the
// problem's instance does not echo a path of any length back whole.
func TestLongIDIsRefusedNotEchoed(t *testing.T) {
	r := newRouter(t)
	rep := r.do("GET", "/v1/events/"+strings.Repeat("x", 100_000), nil, "")
	if rep.status != 400 || !strings.Contains(string(rep.body), "longer than 1024 bytes") {
		t.Fatalf("a 100 KB id: %d %.200s", rep.status, rep.body)
	}
	if len(rep.body) > 2048 {
		t.Errorf("the answer is %d bytes: the path was echoed whole", len(rep.body))
	}
}

// A body announced past max_body is refused before it is sent: a client
// that asks Expect: 100-continue gets the 413, not a go-ahead to send 2 MB
// that would then be refused (an adversarial trial).
func TestAnnouncedBodyTooLargeIsRefusedFirst(t *testing.T) {
	r := newRouter(t)
	c, err := net.Dial("unix", r.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "POST /v1/events HTTP/1.1\r\nHost: r\r\nContent-Type: application/cloudevents+json\r\nContent-Length: 2000000\r\nExpect: 100-continue\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 413 {
		t.Errorf("status %d, want 413 before the body", resp.StatusCode)
	}
}

// Close ends a pull that waits for messages (wait up to 30 s) at once,
// answering it with none: it held the graceful stop for its wait, as a
// tail's stream held it for the whole shutdown timeout (TestStopEndsTheTail
// in cmd/router).
func TestCloseEndsAWaitingPull(t *testing.T) {
	r := newRouter(t)
	// The request is on the connection before Close begins, whether or not
	// its handler runs yet: one that starts after sees the server closing.
	conn, err := net.Dial("unix", r.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /v1/subscriptions/pay/messages?max=5&wait=30s HTTP/1.1\r\nHost: r\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	answered := make(chan reply, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			answered <- reply{body: []byte(err.Error())}
			return
		}
		body, _ := io.ReadAll(resp.Body)
		answered <- reply{status: resp.StatusCode, body: body}
	}()
	time.Sleep(100 * time.Millisecond) // most often, the pull waits by now
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.srv.Close(ctx); err != nil {
		t.Fatalf("close after %v: %v", time.Since(begin), err)
	}
	if took := time.Since(begin); took > 10*time.Second {
		t.Fatalf("close took %v with a pull waiting", took)
	}
	if rep := <-answered; rep.status != 200 || !strings.Contains(string(rep.body), `"messages":[]`) {
		t.Fatalf("the waiting pull: %d %s", rep.status, rep.body)
	}
}

// Close ends a backup being streamed at once, to a client that reads it
// and to one that stopped reading: it holds a read transaction of the
// data file, which closing the file would wait for until the stop's time
// ran out. The client gets a body shorter than it was told.
func TestCloseEndsABackup(t *testing.T) {
	writing := make(chan struct{}, 1)
	endless := func(w io.Writer, size func(int64)) (int64, error) { // a file that takes for ever to copy
		size(1 << 40)
		var n int64
		for {
			m, err := w.Write(make([]byte, 4096))
			n += int64(m)
			if err != nil {
				return n, err
			}
			select {
			case writing <- struct{}{}:
			default:
			}
			time.Sleep(time.Millisecond)
		}
	}
	r := newRouterOpts(t, nil, api.Options{Backup: endless})
	srv := r.srv
	got := make(chan error, 1)
	go func() {
		resp, err := r.client.Get("http://r/v1/backup")
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		got <- err
	}()
	// A second client asks and then reads nothing: the copy's writes to it
	// wait on a full socket, each up to read_timeout (30 s).
	stalled, err := net.Dial("unix", r.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	io.WriteString(stalled, "GET /v1/backup HTTP/1.1\r\nHost: r\r\n\r\n")
	<-writing
	time.Sleep(500 * time.Millisecond) // the stalled one's buffers fill
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	begin := time.Now()
	if err := srv.Close(ctx); err != nil {
		t.Fatalf("close after %v: %v", time.Since(begin), err)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("close took %v with a client that reads nothing", took)
	}
	if err := <-got; err == nil {
		t.Fatal("the client read a whole backup of a stream cut short")
	}
}

// An API socket removed while the router runs (an rm, a cleaner of /tmp)
// is made again within seconds, and answers: the listener went on
// accepting on a file nobody could reach, until a restart (an adversarial
// trial).
func TestRemovedSocketIsMadeAgain(t *testing.T) {
	r := newRouter(t)
	for round := range 2 { // the second time, the socket made the first
		if err := os.Remove(r.sock); err != nil {
			t.Fatal(err)
		}
		testkit.EventuallyWith(t, 10*time.Second, func() bool {
			resp, err := testkit.UnixClient(r.sock, 0, 128).Get("http://r/healthz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == 200
		}, func() string { return fmt.Sprintf("round %d: the socket was not made again", round) })
		fi, err := os.Lstat(r.sock)
		if err != nil || fi.Mode().Perm() != 0o660 {
			t.Fatalf("round %d: the socket made again: %v %v", round, fi, err)
		}
	}
	time.Sleep(1500 * time.Millisecond) // the replaced listener closed: the path stays
	if _, err := os.Lstat(r.sock); err != nil {
		t.Fatalf("a replaced listener removed the socket made after it: %v", err)
	}
}

// A listener the server was given (systemd's socket) is closed when Open
// fails: the process may live on (a test, router plugin dev), and the
// socket must not keep taking connections nobody serves.
func TestOpenThatFailsClosesTheGivenListener(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, "given.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tokens := filepath.Join(dir, "tokens.json")
	os.WriteFile(tokens, []byte(`{"tokens":[{"token":"open-fails-token-0123456789","admin":true}]}`), 0o600)
	srv := api.New(nil, listenOn(filepath.Join(dir, "unused.sock"), busy.Addr().String(), tokens), api.Options{Listener: ln})
	if err := srv.Open(); err == nil {
		t.Fatal("Open on a busy TCP address succeeded")
	}
	ln.(*net.UnixListener).SetDeadline(time.Now().Add(time.Second)) // open: Accept would wait
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("the given listener after the failed Open: Accept says %v, want it closed", err)
	}
}

// Switchyard-Clock is the router's clock to the second at the answer, not
// up to a second older: a clock ahead of the system's by a fraction of a
// second made the value at the system's second, so that it lagged the
// router's by up to two seconds.
func TestTheRoutersClockIsNotBehind(t *testing.T) {
	now := func() time.Time { return time.Now().Add(700 * time.Millisecond) }
	r := newRouterOpts(t, nil, api.Options{Now: now})
	for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(37 * time.Millisecond) {
		before := now().UTC().Truncate(time.Second)
		got, err := time.Parse(time.RFC3339, r.do("GET", "/healthz", nil, "").header.Get(api.ClockHeader))
		after := now().UTC().Truncate(time.Second)
		if err != nil || got.Before(before) || got.After(after) {
			t.Fatalf("%s %v (%v), want between %v and %v", api.ClockHeader, got, err, before, after)
		}
	}
}

// Every answer carries the router's time (Options.Now, the engine's clock)
// in Switchyard-Clock, the error answers and a HEAD's too, for a client to
// count ages from, and a second later the time then; Date stays the
// system clock's, as net/http gives it.
func TestAnswersCarryTheRoutersClock(t *testing.T) {
	var ahead atomic.Pointer[time.Time]
	at := time.Now().Add(2 * time.Hour)
	ahead.Store(&at)
	r := newRouterOpts(t, nil, api.Options{Now: func() time.Time { return *ahead.Load() }})
	want := at.UTC().Truncate(time.Second).Format(time.RFC3339)
	for _, c := range []struct{ method, path, ctype string }{
		{"GET", "/healthz", ""},
		{"HEAD", "/healthz", ""},
		{"GET", "/v1/nothing-here", ""},
		{"POST", "/v1/events", "text/plain"},
		{"GET", "/v1/stats", ""},
	} {
		rep := r.do(c.method, c.path, map[string]string{"Content-Type": c.ctype}, "x")
		if got := rep.header.Get(api.ClockHeader); got != want {
			t.Errorf("%s %s (%d): %s %q, want %q", c.method, c.path, rep.status, api.ClockHeader, got, want)
		}
		if d, err := http.ParseTime(rep.header.Get("Date")); err != nil || d.Sub(time.Now()).Abs() > time.Minute {
			t.Errorf("%s %s: Date %q (%v), want the system's time", c.method, c.path, rep.header.Get("Date"), err)
		}
	}
	later := at.Add(time.Hour)
	ahead.Store(&later)
	time.Sleep(1100 * time.Millisecond) // the value is made once a second
	if got, want := r.do("GET", "/healthz", nil, "").header.Get(api.ClockHeader), later.UTC().Truncate(time.Second).Format(time.RFC3339); got != want {
		t.Errorf("a second later: %s %q, want %q", api.ClockHeader, got, want)
	}
}
