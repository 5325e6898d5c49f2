package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/cloudevents"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/engine"
)

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// request is what the test server saw.
type request struct {
	method, path, query string
	header              http.Header
	body                string
}

type server struct {
	mu       sync.Mutex
	reqs     []request
	inFlight atomic.Int32
	maxIn    atomic.Int32
	handler  func(w http.ResponseWriter, r *http.Request)
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.maxIn.Load()
		if n <= m || s.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.reqs = append(s.reqs, request{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), string(body)})
	h := s.handler
	s.mu.Unlock()
	if h != nil {
		h(w, r)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) setHandler(h func(w http.ResponseWriter, r *http.Request)) {
	s.mu.Lock()
	s.handler = h
	s.mu.Unlock()
}

func (s *server) requests() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]request(nil), s.reqs...)
}

// unixServer serves on a socket in a short temp dir (socket paths are
// limited to ~100 bytes) and returns the deliver URL.
func unixServer(t *testing.T, srv *server) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sy")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "svc.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return "unix://" + sock + "/events?v=1"
}

func tcpServer(t *testing.T, srv *server) string {
	t.Helper()
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts.URL + "/events?v=1"
}

func newSink(t *testing.T, url string, timeout time.Duration) *Sink {
	t.Helper()
	return newSinkMode(t, url, timeout, config.ContentModeBinary)
}

func newSinkMode(t *testing.T, url string, timeout time.Duration, mode config.ContentMode) *Sink {
	t.Helper()
	s, err := New(config.Inbox{Name: "payments", Deliver: config.Deliver{URL: url, Timeout: timeout, Concurrency: 8, Mode: mode}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func msg(id string) *switchyard.Message {
	return &switchyard.Message{
		Event: &switchyard.Event{
			ID: id, Source: "/pay", Type: "payment.done", SpecVersion: "1.0", Subject: "invoice 7",
			Time:            time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC),
			DataContentType: "application/json",
			Extensions: []switchyard.Header{
				{Name: "note", Value: `100% "café"`},
				{Name: "traceparent", Value: traceparent},
			},
			Data: []byte(`{"id":"` + id + `"}`),
		},
		Topic: "deliver",
		MsgID: "/pay#" + cloudevents.PercentEncode(id), // as storage.Record.MsgID makes an inbox record's

	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func forBoth(t *testing.T, f func(t *testing.T, url func(*server) string)) {
	t.Run("unix", func(t *testing.T) { f(t, func(s *server) string { return unixServer(t, s) }) })
	t.Run("tcp", func(t *testing.T) { f(t, func(s *server) string { return tcpServer(t, s) }) })
}

// In binary mode, over a unix socket or TCP, an event is POSTed to the URL's
// path and query with its data as the body, each attribute and extension a
// percent-encoded ce- header, its message id as Idempotency-Key and its
// traceparent; the receiver decodes the request back to the event.
func TestDeliverHeaders(t *testing.T) {
	forBoth(t, func(t *testing.T, url func(*server) string) {
		srv := &server{}
		s := newSink(t, url(srv), time.Second)
		if s.Name() != "inbox.payments" {
			t.Fatalf("Name = %q", s.Name())
		}
		res := s.Publish(ctxT(t, 5*time.Second), []*switchyard.Message{msg("a 1")})
		if len(res) != 1 || res[0].Err != nil || res[0].Position != (switchyard.Position{}) {
			t.Fatalf("results %+v", res)
		}
		reqs := srv.requests()
		if len(reqs) != 1 {
			t.Fatalf("%d requests", len(reqs))
		}
		r := reqs[0]
		if r.method != "POST" || r.path != "/events" || r.query != "v=1" || r.body != `{"id":"a 1"}` {
			t.Fatalf("request %+v", r)
		}
		want := map[string]string{
			"Ce-Id":           "a%201",
			"Ce-Specversion":  "1.0",
			"Ce-Source":       "/pay",
			"Ce-Type":         "payment.done",
			"Ce-Subject":      "invoice%207",
			"Ce-Time":         "2026-03-04T05:06:07Z",
			"Ce-Note":         "100%25%20%22caf%C3%A9%22",
			"Content-Type":    "application/json",
			"Traceparent":     traceparent,
			"Idempotency-Key": "/pay#a%201",
		}
		for k, v := range want {
			if got := r.header.Get(k); got != v {
				t.Errorf("header %s = %q, want %q", k, got, v)
			}
		}
		// What a receiver decodes is the event again.
		back, warnings := engine.DecodeInbound(cloudevents.HTTP, flatten(r.header), []byte(r.body), "", "http")
		if len(warnings) > 0 || back.Event.ID != "a 1" || back.Event.Extension("note") != `100% "café"` ||
			back.Event.Subject != "invoice 7" || back.Event.Extension("traceparent") != traceparent {
			t.Fatalf("decoded back %+v %v", back.Event, warnings)
		}
	})
}

// In structured mode the body is the whole event in the JSON format, with
// Content-Type application/cloudevents+json, no ce- headers, and the
// Idempotency-Key and trace headers still set; it decodes to the event.
func TestDeliverStructured(t *testing.T) {
	srv := &server{}
	s := newSinkMode(t, tcpServer(t, srv), time.Second, config.ContentModeStructured)
	m := msg("a 1")
	if res := s.Publish(ctxT(t, 5*time.Second), []*switchyard.Message{m}); res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	r := srv.requests()[0]
	if ct := r.header.Get("Content-Type"); ct != cloudevents.MediaStructured {
		t.Fatalf("Content-Type %q", ct)
	}
	for k := range r.header {
		if strings.HasPrefix(strings.ToLower(k), "ce-") {
			t.Errorf("structured request has header %s", k)
		}
	}
	if r.header.Get("Idempotency-Key") != "/pay#a%201" || r.header.Get("Traceparent") != traceparent {
		t.Errorf("headers %v", r.header)
	}
	got, err := cloudevents.DecodeJSON([]byte(r.body))
	if err != nil || !reflect.DeepEqual(got, *m.Event) {
		t.Fatalf("body decodes to %+v, %v; want %+v", got, err, *m.Event)
	}
}

func flatten(h http.Header) []switchyard.Header {
	var out []switchyard.Header
	for k, vs := range h {
		for _, v := range vs {
			out = append(out, switchyard.Header{Name: k, Value: v})
		}
	}
	return out
}

// Each status a local service answers is a success, a retry (with its
// Retry-After, in seconds or as an HTTP date), a pause that counts no
// attempt (503: at least a second) or a permanent failure.
func TestStatuses(t *testing.T) {
	// An HTTP date has whole seconds: 3 s from now, cut to the second and
	// read a moment later, is 2–3 s away, a little under 2 s at worst
	// (1.99 s once in CI): 1.9–3 s passes.
	date := time.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat)
	cases := []struct {
		name       string
		status     int
		retryAfter string
		body       string
		permanent  bool
		pause      bool          // unavailable: no attempt
		wantAfter  time.Duration // 0 = none; else at least this, at most 1.1 s more
	}{
		{name: "200", status: 200},
		{name: "202", status: 202},
		{name: "429 seconds", status: 429, retryAfter: "7", wantAfter: 7 * time.Second},
		{name: "503 date", status: 503, retryAfter: date, pause: true, wantAfter: 2*time.Second - 100*time.Millisecond},
		{name: "429 without Retry-After", status: 429},
		{name: "503 without Retry-After", status: 503, pause: true, wantAfter: time.Second},
		{name: "400", status: 400, body: `{"error":"bad amount"}`, permanent: true},
		{name: "404", status: 404, permanent: true},
		{name: "409 without Retry-After", status: 409, permanent: true},
		{name: "409 with Retry-After", status: 409, retryAfter: "1", wantAfter: time.Second},
		{name: "408", status: 408},
		{name: "500", status: 500, body: "boom"},
		{name: "502 with Retry-After", status: 502, retryAfter: "2", wantAfter: 2 * time.Second},
		{name: "302", status: 302, permanent: true},
	}
	forBoth(t, func(t *testing.T, url func(*server) string) {
		srv := &server{}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				s := newSink(t, url(srv), time.Second) // a pause holds the sink
				srv.setHandler(func(w http.ResponseWriter, r *http.Request) {
					if tc.retryAfter != "" {
						w.Header().Set("Retry-After", tc.retryAfter)
					}
					if tc.status == 302 {
						w.Header().Set("Location", "/elsewhere")
					}
					w.WriteHeader(tc.status)
					io.WriteString(w, tc.body)
				})
				r := s.Publish(ctxT(t, 5*time.Second), []*switchyard.Message{msg("x")})[0]
				ok := tc.status >= 200 && tc.status < 300
				switch {
				case ok && r.Err != nil:
					t.Fatalf("err %v", r.Err)
				case ok:
					return
				case r.Err == nil:
					t.Fatal("no error")
				}
				if switchyard.IsPermanent(r.Err) != tc.permanent {
					t.Fatalf("permanent = %v, want %v: %v", switchyard.IsPermanent(r.Err), tc.permanent, r.Err)
				}
				if errors.Is(r.Err, switchyard.ErrSinkUnavailable) != tc.pause || errors.Is(r.Err, switchyard.ErrUnknownOutcome) {
					t.Fatalf("unavailable = %v, want %v; an answer is never unknown: %v", errors.Is(r.Err, switchyard.ErrSinkUnavailable), tc.pause, r.Err)
				}
				if !strings.Contains(r.Err.Error(), fmt.Sprint(tc.status)) || !strings.Contains(r.Err.Error(), tc.body) {
					t.Fatalf("error lacks status or body: %v", r.Err)
				}
				if tc.wantAfter == 0 && r.RetryAfter != 0 || tc.wantAfter != 0 &&
					(r.RetryAfter < tc.wantAfter || r.RetryAfter > tc.wantAfter+1100*time.Millisecond) {
					t.Fatalf("RetryAfter = %s, want %s", r.RetryAfter, tc.wantAfter)
				}
			})
		}
	})
}

// A service that answers 503 gets no request until the pause it
// asked for ends: the sink's messages fail as not sent (no attempt), and
// it is not healthy, saying the answer; then it sends again.
func TestAPauseSendsNothingUntilItEnds(t *testing.T) {
	var calls atomic.Int32
	srv := &server{handler: func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(204)
	}}
	s := newSink(t, tcpServer(t, srv), time.Second)
	publish := func() switchyard.Result {
		return s.Publish(ctxT(t, 5*time.Second), []*switchyard.Message{msg("x")})[0]
	}
	if r := publish(); !errors.Is(r.Err, switchyard.ErrSinkUnavailable) || r.RetryAfter != time.Second {
		t.Fatalf("the 503: %v, RetryAfter %s; want unavailable, 1s", r.Err, r.RetryAfter)
	}
	if err := s.Healthy(ctxT(t, time.Second)); err == nil || !strings.Contains(err.Error(), "503 Service Unavailable") {
		t.Fatalf("Healthy during the pause: %v", err)
	}
	r := publish()
	if !errors.Is(r.Err, switchyard.ErrSinkUnavailable) || r.RetryAfter <= 0 || r.RetryAfter > time.Second || calls.Load() != 1 {
		t.Fatalf("during the pause: %v, RetryAfter %s, %d requests; want unavailable, none sent", r.Err, r.RetryAfter, calls.Load())
	}
	time.Sleep(r.RetryAfter + 50*time.Millisecond)
	if r := publish(); r.Err != nil || calls.Load() != 2 {
		t.Fatalf("after the pause: %v, %d requests", r.Err, calls.Load())
	}
	if err := s.Healthy(ctxT(t, time.Second)); err != nil {
		t.Fatalf("Healthy after the pause: %v", err)
	}
}

// A refusal's long body is cut short in the error, between characters and
// marked with an ellipsis, keeping the error under 600 bytes; a 422 is
// permanent.
func TestLongErrorBodyIsCut(t *testing.T) {
	srv := &server{handler: func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(422)
		io.WriteString(w, strings.Repeat("é", 10000))
	}}
	s := newSink(t, tcpServer(t, srv), time.Second)
	r := s.Publish(ctxT(t, 5*time.Second), []*switchyard.Message{msg("x")})[0]
	if !switchyard.IsPermanent(r.Err) || len(r.Err.Error()) > 600 || !strings.HasSuffix(r.Err.Error(), "é…") {
		t.Fatalf("%v", r.Err)
	}
}

// A receiver that does not answer within deliver.timeout is a plain retry
// ("no response within"), neither permanent, an unknown outcome nor the
// sink unavailable, and the publish returns promptly.
func TestTimeoutIsARetry(t *testing.T) {
	forBoth(t, func(t *testing.T, url func(*server) string) {
		release := make(chan struct{})
		srv := &server{handler: func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}}
		defer close(release)
		s := newSink(t, url(srv), 100*time.Millisecond)
		start := time.Now()
		r := s.Publish(ctxT(t, 5*time.Second), []*switchyard.Message{msg("slow")})[0]
		if r.Err == nil || switchyard.IsPermanent(r.Err) || errors.Is(r.Err, switchyard.ErrUnknownOutcome) ||
			errors.Is(r.Err, switchyard.ErrSinkUnavailable) || !strings.Contains(r.Err.Error(), "no response within") {
			t.Fatalf("err %v", r.Err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("took %s", d)
		}
	})
}

// A delivery cut short by the caller's deadline before the receiver
// answered is an unknown outcome.
func TestCallerDeadlineIsUnknownOutcome(t *testing.T) {
	release := make(chan struct{})
	srv := &server{handler: func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}}
	defer close(release)
	s := newSink(t, tcpServer(t, srv), 10*time.Second)
	r := s.Publish(ctxT(t, 100*time.Millisecond), []*switchyard.Message{msg("x")})[0]
	if !errors.Is(r.Err, switchyard.ErrUnknownOutcome) {
		t.Fatalf("err %v", r.Err)
	}
}

// A socket that does not exist or a port nobody listens on makes the sink
// unavailable (retryable, not permanent) and unhealthy; a listening socket
// is healthy.
func TestUnreachableIsUnavailable(t *testing.T) {
	dir, err := os.MkdirTemp("", "sy")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := ln.Addr().String()
	ln.Close()
	for _, u := range []string{"unix://" + dir + "/missing.sock/events", "http://" + closedPort + "/events"} {
		s := newSink(t, u, time.Second)
		r := s.Publish(ctxT(t, 5*time.Second), []*switchyard.Message{msg("x")})[0]
		if !errors.Is(r.Err, switchyard.ErrSinkUnavailable) || switchyard.IsPermanent(r.Err) {
			t.Fatalf("%s: err %v", u, r.Err)
		}
		if err := s.Healthy(ctxT(t, time.Second)); err == nil {
			t.Fatalf("%s: healthy", u)
		}
	}
	srv := &server{}
	s := newSink(t, unixServer(t, srv), time.Second)
	if err := s.Healthy(ctxT(t, time.Second)); err != nil {
		t.Fatal(err)
	}
}

// Deliveries run concurrently, never more at once than deliver.concurrency
// (8), and messages with one key are sent in their order.
func TestConcurrencyBoundAndKeyOrder(t *testing.T) {
	srv := &server{handler: func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		w.WriteHeader(200)
	}}
	s := newSink(t, unixServer(t, srv), 5*time.Second)
	var msgs []*switchyard.Message
	for i := range 40 {
		m := msg(fmt.Sprintf("e%02d", i))
		if i%2 == 0 {
			m.Key = "k" // 20 messages with one key: strictly in order
		}
		msgs = append(msgs, m)
	}
	for _, r := range s.Publish(ctxT(t, 20*time.Second), msgs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if m := srv.maxIn.Load(); m > 8 || m < 2 {
		t.Fatalf("max in flight %d", m)
	}
	var keyed []string
	for _, r := range srv.requests() {
		var n int
		fmt.Sscanf(r.header.Get("Ce-Id"), "e%d", &n)
		if n%2 == 0 {
			keyed = append(keyed, r.header.Get("Ce-Id"))
		}
	}
	for i := 1; i < len(keyed); i++ {
		if keyed[i] < keyed[i-1] {
			t.Fatalf("same-key messages out of order: %v", keyed)
		}
	}
}

// When a message fails, the later messages with its key are not sent (the
// sink unavailable for them), while messages of another key still are.
func TestKeyChainStopsAfterFailure(t *testing.T) {
	srv := &server{handler: func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Ce-Id") == "b" {
			w.WriteHeader(500)
			return
		}
		w.WriteHeader(200)
	}}
	s := newSink(t, tcpServer(t, srv), time.Second)
	msgs := []*switchyard.Message{msg("a"), msg("b"), msg("c"), msg("d")}
	for _, m := range msgs[:3] {
		m.Key = "k"
	}
	res := s.Publish(ctxT(t, 5*time.Second), msgs)
	if res[0].Err != nil || res[1].Err == nil || !errors.Is(res[2].Err, switchyard.ErrSinkUnavailable) || res[3].Err != nil {
		t.Fatalf("results %v %v %v %v", res[0].Err, res[1].Err, res[2].Err, res[3].Err)
	}
	for _, r := range srv.requests() {
		if r.header.Get("Ce-Id") == "c" {
			t.Fatal("c was sent after b failed")
		}
	}
}

// A deliver URL is unix://<socket>/<request path>, the socket ending at the
// first path element ending ".sock" (else the whole path), or http(s) with
// a default port and no fragment; another scheme, no socket or no host is
// refused.
func TestParseURL(t *testing.T) {
	cases := []struct {
		in                    string
		request, socket, host string
		bad                   bool
	}{
		{in: "unix:///run/payments.sock/events", request: "http://localhost/events", socket: "/run/payments.sock"},
		{in: "unix:///run/svc.sock", request: "http://localhost/", socket: "/run/svc.sock"},
		{in: "unix:///run/svc.sock/", request: "http://localhost/", socket: "/run/svc.sock"},
		{in: "unix:///run/a.sock/b.sock/x?q=1", request: "http://localhost/b.sock/x?q=1", socket: "/run/a.sock"},
		{in: "unix:///run/svc/socket", request: "http://localhost/", socket: "/run/svc/socket"},
		{in: "unix://./data/svc.sock/in", request: "http://localhost/in", socket: "./data/svc.sock"},
		{in: "http://127.0.0.1:9000/alerts", request: "http://127.0.0.1:9000/alerts", host: "127.0.0.1:9000"},
		{in: "https://svc.local/x#frag", request: "https://svc.local/x", host: "svc.local:443"},
		{in: "http://[::1]/x", request: "http://[::1]/x", host: "[::1]:80"},
		{in: "ftp://x/y", bad: true},
		{in: "unix://", bad: true},
		{in: "http:///path", bad: true},
	}
	for _, tc := range cases {
		got, err := ParseURL(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("%s: no error", tc.in)
			}
			continue
		}
		if err != nil || got.Request != tc.request || got.Socket != tc.socket || got.HostPort != tc.host {
			t.Errorf("%s: got %+v %v", tc.in, got, err)
		}
	}
}

// Retry-After is taken as seconds or an HTTP date (a past one is zero);
// empty, negative or other text is not taken.
func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"0":                             0,
		"120":                           2 * time.Minute,
		"Thu, 01 Jan 2026 00:00:30 GMT": 30 * time.Second,
		"Wed, 31 Dec 2025 00:00:00 GMT": 0,
	} {
		got, ok := parseRetryAfter(in, now)
		if !ok || got != want {
			t.Errorf("%q: %s %v", in, got, ok)
		}
	}
	for _, in := range []string{"", "-1", "soon"} {
		if _, ok := parseRetryAfter(in, now); ok {
			t.Errorf("%q parsed", in)
		}
	}
}

// A webhook sink without a deliver URL, or with a scheme it does not speak
// (gopher://), is not made.
func TestNewErrors(t *testing.T) {
	if _, err := New(config.Inbox{Name: "x"}, nil); err == nil {
		t.Fatal("no url accepted")
	}
	if _, err := New(config.Inbox{Name: "x", Deliver: config.Deliver{URL: "gopher://x", Timeout: time.Second, Concurrency: 1}}, nil); err == nil {
		t.Fatal("bad scheme accepted")
	}
}

// A deliver socket in a folder anyone may write (sticky, as /tmp, or not)
// is refused, naming the folder: another user could bind a socket of
// theirs at the path whenever the service's is gone (a security trial did,
// and the router took its 200 for delivered). A folder of the service's
// own passes, whoever owns it.
func TestDeliverSocketInAFolderAnyoneMayWrite(t *testing.T) {
	for _, c := range []struct {
		mode os.FileMode
		want string
	}{
		{0o777 | os.ModeSticky, "may be written by anyone (mode 1777)"},
		{0o777, "may be written by anyone (mode 0777)"},
		{0o755, ""},
	} {
		dir := t.TempDir()
		os.Chmod(dir, c.mode)
		url := "unix://" + dir + "/svc.sock/events"
		_, err := New(config.Inbox{Name: "x", Deliver: config.Deliver{URL: url, Timeout: time.Second, Concurrency: 1}}, nil)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("socket folder %04o: %v, want %q", c.mode.Perm(), err, c.want)
		}
	}
}
