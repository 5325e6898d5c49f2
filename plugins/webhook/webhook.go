// Package webhook delivers an inbox's events to a local service over HTTP:
// one CloudEvents binary-mode POST per event (ce-* headers, Content-Type
// from datacontenttype, the data as body) with an Idempotency-Key, to a
// http://, https:// or unix:// URL.
//
// It implements switchyard.Sink, so the inbox's delivery loop gets the engine's
// retries, backoff and DLQ: a 2xx is delivered; 429, 408, 425, 409 with
// Retry-After and 5xx but 503 are retried no earlier than their
// Retry-After; any other 4xx is permanent (to the DLQ at once, with the
// status and the start of the body); timeouts and broken connections are
// retried. A receiver that cannot be reached at all (connection refused,
// no socket file), or asks for a pause (503: nothing is sent for its
// Retry-After), counts no attempt (switchyard.ErrSinkUnavailable): a
// service that is down must not push its events to the DLQ. See RATIONALE.md.
package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/cloudevents"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/internal/fsperm"
)

// Limits.
const (
	// snippetLen is how much of an error response's body an error quotes.
	snippetLen = 256
	// drainLen is how much of a response body is read so the connection
	// can be reused; a longer body closes the connection instead.
	drainLen = 64 << 10
)

// IdempotencyKeyHeader carries the output's message id on every POST (not
// the CloudEvents id a plugin may have given the output): the event's
// source and id ("/billing#1"; storage.Record.MsgID), with "/<N>/" after
// it for the later ones when one event yields several deliveries
// (storage.Record.OutputMsgID).
const IdempotencyKeyHeader = "Idempotency-Key"

var (
	_ switchyard.Sink          = (*Sink)(nil)
	_ switchyard.HealthChecker = (*Sink)(nil)
)

// Sink POSTs one inbox's events to its deliver URL.
type Sink struct {
	name    string
	log     hclog.Logger
	display string // the configured URL, for errors and logs
	target  string // the request URL (for unix sockets: http://localhost/<path>)
	network string // "unix" or "tcp": what Healthy dials
	address string // socket path or host:port
	timeout time.Duration
	mode    config.ContentMode

	transport *http.Transport
	client    *http.Client
	sem       chan struct{}
	pause     pause
}

// minPause is the pause a 503 without a Retry-After asks for: the
// engine's probe of an outage (a second).
const minPause = time.Second

// pause is the wait a service asked for with a 503 (it cannot handle
// requests now), for its Retry-After. Meanwhile the sink sends nothing and
// is not healthy; each message fails as not sent
// (switchyard.ErrSinkUnavailable), so no attempt is counted.
type pause struct {
	mu     sync.Mutex
	until  time.Time
	answer string // the status that asked for it
}

// ask pauses the sink for d from now, on the answer status.
func (p *pause) ask(d time.Duration, status string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if until := time.Now().Add(d); until.After(p.until) {
		p.until, p.answer = until, status
	}
}

// left is what is left of the pause, and the answer that asked for it.
func (p *pause) left() (time.Duration, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Until(p.until), p.answer
}

// New builds the sink of inbox in's deliver block. Its name is
// "inbox.<name>" (config.InboxSinkName). It does not contact the receiver:
// the router starts while the service is down and delivers once it is up
// (Healthy tells).
//
// URL forms: http://host:port/path, https://host/path, and
// unix:///path/to/svc.sock/request/path. For unix URLs the socket file is
// the path up to and including the first element that ends in ".sock";
// the rest (default "/") and the query are the request's. A path without a
// ".sock" element is all socket, and the request path is "/". A host part
// makes the socket path relative: unix://./data/svc.sock/events is the
// socket ./data/svc.sock, path /events.
func New(in config.Inbox, logger hclog.Logger) (*Sink, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	name := config.InboxSinkName(in.Name)
	if in.Deliver.URL == "" {
		return nil, fmt.Errorf("%s: no deliver url", name)
	}
	t, err := ParseURL(in.Deliver.URL)
	if err == nil {
		err = t.CheckSocketDir()
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	timeout, concurrency := in.Deliver.Timeout, in.Deliver.Concurrency
	if timeout <= 0 || concurrency < 1 {
		return nil, fmt.Errorf("%s: timeout %s and concurrency %d: the deliver block is not resolved (config.Load sets both)", name, timeout, concurrency)
	}
	tr := newTransport(t, timeout, concurrency)
	s := &Sink{
		name:      name,
		log:       logger.Named(name),
		display:   in.Deliver.URL,
		target:    t.Request,
		timeout:   timeout,
		mode:      in.Deliver.Mode,
		transport: tr,
		client: &http.Client{
			Transport: tr,
			// A redirect is answered as the error it is: the deliver URL
			// must name the receiver (following a 301/302 would also turn
			// the POST into a GET).
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		sem: make(chan struct{}, concurrency),
	}
	if t.Socket != "" {
		s.network, s.address = "unix", t.Socket
	} else {
		s.network, s.address = "tcp", t.HostPort
	}
	return s, nil
}

// newTransport is the HTTP transport to target t: at most concurrency
// connections, dialled within timeout, HTTP/2 where TLS offers it (not on
// a unix socket).
func newTransport(t Target, timeout time.Duration, concurrency int) *http.Transport {
	tr := &http.Transport{
		Proxy:               nil, // a deliver URL is local; never via HTTP_PROXY
		MaxIdleConnsPerHost: concurrency,
		MaxConnsPerHost:     concurrency,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: timeout,
		ForceAttemptHTTP2:   true,
	}
	dialer := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	if t.Socket != "" {
		socket := t.Socket
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", socket)
		}
		tr.ForceAttemptHTTP2 = false
	} else {
		tr.DialContext = dialer.DialContext
	}
	return tr
}

// Target is a parsed deliver URL.
type Target struct {
	// Request is the URL requests are made to. For a unix socket its host
	// is "localhost" (what the Host header says).
	Request string
	// Socket is the unix socket's path; "" for http and https.
	Socket string
	// HostPort is the TCP address (with the scheme's default port) for
	// http and https.
	HostPort string
}

// CheckSocketDir refuses the folder of a unix socket target that anyone
// may write (fsperm.CheckPeerSocketDir); a folder not there yet, and a
// TCP target, pass.
func (t Target) CheckSocketDir() error {
	if t.Socket == "" {
		return nil
	}
	if err := fsperm.CheckPeerSocketDir(filepath.Dir(t.Socket)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("deliver socket %s: %w", t.Socket, err)
	}
	return nil
}

// ParseURL splits a deliver URL into where to connect and what to request;
// see New for the forms.
func ParseURL(raw string) (Target, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Target{}, fmt.Errorf("deliver url %q: %w", raw, err)
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return Target{}, fmt.Errorf("deliver url %q: no host", raw)
		}
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		u.Fragment, u.RawFragment = "", ""
		return Target{Request: u.String(), HostPort: net.JoinHostPort(u.Hostname(), port)}, nil
	case "unix":
		path := u.Path
		if path == "" {
			return Target{}, fmt.Errorf("deliver url %q: no socket path", raw)
		}
		socket, rest := path, "/"
		if i := sockElement(path); i >= 0 {
			socket, rest = path[:i], path[i:]
			if rest == "" {
				rest = "/"
			}
		}
		if u.Host != "" {
			socket = u.Host + socket
		}
		req := &url.URL{Scheme: "http", Host: "localhost", Path: rest, RawQuery: u.RawQuery}
		return Target{Request: req.String(), Socket: socket}, nil
	default:
		return Target{}, fmt.Errorf("deliver url %q: scheme must be http, https or unix", raw)
	}
}

// sockElement returns the index just past the first path element that ends
// in ".sock", or -1.
func sockElement(path string) int {
	start := 0
	for start < len(path) {
		end := strings.IndexByte(path[start:], '/')
		if end < 0 {
			end = len(path)
		} else {
			end += start
		}
		if strings.HasSuffix(path[start:end], ".sock") {
			return end
		}
		start = end + 1
	}
	return -1
}

// Name is the inbox's sink name (config.InboxSinkName).
func (s *Sink) Name() string { return s.name }

// Publish POSTs every message (at most the sink's concurrency at once) and
// returns one Result per message, in order. Messages with the same
// partition key are sent one after another in batch order; when one fails,
// the later ones of that key are not sent (their error wraps
// switchyard.ErrSinkUnavailable, so no attempt is counted). Position is always
// empty. Once ctx is done Publish returns; a POST cut short by it wraps
// switchyard.ErrUnknownOutcome.
func (s *Sink) Publish(ctx context.Context, msgs []*switchyard.Message) []switchyard.Result {
	res := make([]switchyard.Result, len(msgs))
	if len(msgs) == 0 {
		return res
	}
	// Chains of message indexes: one per partition key, one per keyless
	// message.
	var chains [][]int
	byKey := map[string]int{}
	for i, m := range msgs {
		key := ""
		if m != nil {
			key = m.Key
			if key == "" && m.Event != nil {
				key = m.Event.PartitionKey()
			}
		}
		if key == "" {
			chains = append(chains, []int{i})
			continue
		}
		if c, ok := byKey[key]; ok {
			chains[c] = append(chains[c], i)
			continue
		}
		byKey[key] = len(chains)
		chains = append(chains, []int{i})
	}
	var wg sync.WaitGroup
	for _, chain := range chains {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n, i := range chain {
				res[i] = s.deliver(ctx, msgs[i])
				if res[i].Err != nil {
					for _, j := range chain[n+1:] {
						res[j].Err = fmt.Errorf("%s: not sent: the earlier event %s with the same partition key failed: %w",
							s.name, msgs[i].Event.ID, switchyard.ErrSinkUnavailable)
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	return res
}

// deliver sends one message. (Double-send mode is the engine's: it wraps
// every sink, this one included.)
func (s *Sink) deliver(ctx context.Context, m *switchyard.Message) switchyard.Result {
	if m == nil || m.Event == nil {
		return switchyard.Result{Err: switchyard.Permanentf("%s: message without an event", s.name)}
	}
	return s.post(ctx, m)
}

// post makes one POST and classifies its outcome.
func (s *Sink) post(ctx context.Context, m *switchyard.Message) switchyard.Result {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return switchyard.Result{Err: fmt.Errorf("%s: event %s not sent before the deadline (%v): %w",
			s.name, m.Event.ID, ctx.Err(), switchyard.ErrUnknownOutcome)}
	}
	defer func() { <-s.sem }()
	if left, answer := s.pause.left(); left > 0 {
		return switchyard.Result{RetryAfter: left, Err: fmt.Errorf("%s: event %s not sent: %s answered %s and asked for a pause; %s left: %w",
			s.name, m.Event.ID, s.display, answer, left.Round(time.Millisecond), switchyard.ErrSinkUnavailable)}
	}

	rctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := s.request(rctx, m)
	if err != nil {
		return switchyard.Result{Err: switchyard.Permanentf("%s: %w", s.name, err)}
	}
	start := time.Now()
	resp, err := s.client.Do(req)
	if err != nil {
		return switchyard.Result{Err: s.transportError(ctx, rctx, m, err, time.Since(start))}
	}
	defer resp.Body.Close()
	snippet, rerr := readSnippet(resp.Body)
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		// Delivered, whatever happens to the rest of the body.
		return switchyard.Result{}
	case rerr != nil && errors.Is(rctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		snippet = "(body cut short by the timeout)"
	}
	return s.statusResult(m, resp, snippet)
}

// statusResult classifies a non-2xx answer.
func (s *Sink) statusResult(m *switchyard.Message, resp *http.Response, snippet string) switchyard.Result {
	code := resp.StatusCode
	retryAfter, hasRetryAfter := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	err := fmt.Errorf("%s: POST %s: event %s: %s", s.name, s.display, m.Event.ID, resp.Status)
	if snippet != "" {
		err = fmt.Errorf("%w: %s", err, snippet)
	}
	switch {
	case code == http.StatusServiceUnavailable:
		// The service, not the event: it cannot take requests now (RFC
		// 9110 §15.6.4). A pause, as for a refused connection: counted as
		// attempts, a service's restart behind a proxy dead-lettered its
		// whole backlog (an inbox trial). A 429 stays a counted retry: a
		// limiter's answer to one event (a day's Retry-After for one
		// customer) paused every event of the inbox (a review).
		wait := min(max(retryAfter, minPause), switchyard.MaxRetryAfter)
		s.pause.ask(wait, resp.Status)
		return switchyard.Result{RetryAfter: wait, Err: fmt.Errorf("%w (a pause of %s asked for, no attempt counted): %w", err, wait, switchyard.ErrSinkUnavailable)}
	case code == http.StatusTooManyRequests, code == http.StatusRequestTimeout, code == http.StatusTooEarly,
		code == http.StatusConflict && hasRetryAfter,
		code >= 500:
		return switchyard.Result{Err: err, RetryAfter: retryAfter}
	default:
		// Any other 4xx, and 1xx/3xx (redirects are not followed): the
		// same request cannot fare better.
		return switchyard.Result{Err: switchyard.Permanent(err)}
	}
}

// transportError classifies a POST that got no response.
func (s *Sink) transportError(ctx, rctx context.Context, m *switchyard.Message, err error, took time.Duration) error {
	var op *net.OpError
	switch {
	case ctx.Err() != nil:
		// The caller gave up (shutdown, the engine's own deadline): the
		// receiver may or may not have acted on the request.
		return fmt.Errorf("%s: POST %s: event %s: %v: %w", s.name, s.display, m.Event.ID, ctx.Err(), switchyard.ErrUnknownOutcome)
	case errors.Is(rctx.Err(), context.DeadlineExceeded):
		// The receiver was too slow: a plain retry (it has the
		// Idempotency-Key if it did act).
		return fmt.Errorf("%s: POST %s: event %s: no response within %s", s.name, s.display, m.Event.ID, s.timeout)
	case errors.As(err, &op) && op.Op == "dial":
		return fmt.Errorf("%s: POST %s: receiver unreachable: %v: %w", s.name, s.display, op.Err, switchyard.ErrSinkUnavailable)
	default:
		return fmt.Errorf("%s: POST %s: event %s: %v (after %s)", s.name, s.display, m.Event.ID,
			unwrapURLError(err), took.Round(time.Millisecond))
	}
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// request is the POST of m in the deliver block's content mode: binary
// (the HTTP binding's headers, the data as the body) or structured (the
// event in the JSON format as the body, every value exactly). Both carry
// the Idempotency-Key and the W3C trace headers.
func (s *Sink) request(ctx context.Context, m *switchyard.Message) (*http.Request, error) {
	body := m.Event.Data
	if s.mode == config.ContentModeStructured {
		body = cloudevents.EncodeJSON(m.Event)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	h := req.Header
	if s.mode == config.ContentModeStructured {
		h.Set("Content-Type", cloudevents.MediaStructured)
		for _, x := range m.Event.Extensions {
			if cloudevents.IsPassThrough(x.Name) {
				h[x.Name] = []string{x.Value} // for tracing middleware
			}
		}
	} else {
		for _, x := range cloudevents.HTTP.Headers(m.Event) {
			if x.Name == cloudevents.ContentTypeHeader {
				h.Set("Content-Type", x.Value)
				continue
			}
			// Lower-case names, as the binding writes them; set directly
			// so Go does not canonicalise them.
			h[x.Name] = []string{x.Value}
		}
	}
	h.Set(IdempotencyKeyHeader, idempotencyKey(m))
	return req, nil
}

// idempotencyKey is m's Idempotency-Key: its message id, which for an
// inbox's record is already a header's value (storage.Record.MsgID:
// "<source>#<id>" as their ce- headers carry them; encoding it again
// turned each '%' into "%25"), or else the event's id percent-encoded.
func idempotencyKey(m *switchyard.Message) string {
	if m.MsgID == "" {
		return cloudevents.PercentEncode(m.Event.ID)
	}
	return m.MsgID
}

// parseRetryAfter reads a Retry-After value: delay-seconds or an HTTP date.
// ok is false when there is none or it cannot be read.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		const maxSecs = int64(1<<63-1) / int64(time.Second)
		if secs > maxSecs {
			secs = maxSecs
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	if d < 0 {
		d = 0
	}
	return d, true
}

// readSnippet reads the body (up to drainLen, so the connection can be
// reused) and returns its start as printable text.
func readSnippet(body io.Reader) (string, error) {
	var buf bytes.Buffer
	_, err := io.Copy(&buf, io.LimitReader(body, drainLen))
	b := buf.Bytes()
	if len(b) > snippetLen {
		b = b[:snippetLen]
		// Do not cut a UTF-8 sequence in half.
		for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.Valid(b); i++ {
			b = b[:len(b)-1]
		}
	}
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
	s = strings.Map(func(r rune) rune {
		if r < ' ' && r != '\t' {
			return ' '
		}
		return r
	}, s)
	if buf.Len() > snippetLen {
		s += "…"
	}
	return s, err
}

// Healthy reports whether the receiver accepts connections (a dial, no
// request), and has not asked for a pause.
func (s *Sink) Healthy(ctx context.Context) error {
	if left, answer := s.pause.left(); left > 0 {
		return fmt.Errorf("%s: %s answered %s and asked for a pause; %s left", s.name, s.display, answer, left.Round(time.Millisecond))
	}
	d := net.Dialer{Timeout: s.timeout}
	c, err := d.DialContext(ctx, s.network, s.address)
	if err != nil {
		return fmt.Errorf("%s: %s unreachable: %w", s.name, s.display, err)
	}
	return c.Close()
}

// Close drops idle connections. POSTs in flight finish on their own
// deadlines.
func (s *Sink) Close(context.Context) error {
	s.transport.CloseIdleConnections()
	return nil
}
