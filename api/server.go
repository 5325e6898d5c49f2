// Package api is the router's HTTP API (contract §4): ingest, event status,
// the DLQ, stats, health and metrics, served on a unix socket and, when
// listen.http is set, on TCP behind bearer tokens (auth.go).
package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/cloudevents"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/internal/fsperm"
	"github.com/switchyard-router/switchyard/internal/history"
	"github.com/switchyard-router/switchyard/internal/logthrottle"
	"github.com/switchyard-router/switchyard/storage"
)

// endpointEvents scopes Idempotency-Keys sent to POST /v1/events.
const endpointEvents = "POST /v1/events"

// Options wire the server to the rest of the router.
type Options struct {
	Logger   hclog.Logger
	Gatherer prometheus.Gatherer // serves /metrics; nil = no metrics route
	// Ready reports, per component, whether the router can take events
	// (the data file): /readyz answers 503 when one fails. nil = ready.
	Ready func(ctx context.Context) map[string]error
	// Sinks reports each sink's (and embedded broker's) connection: detail
	// in /readyz that does not make the router unready — it stores events
	// while a broker is away and delivers them when it is back.
	Sinks func(ctx context.Context) map[string]error
	// Inboxes reports whether each inbox consumes from its broker: detail
	// in /readyz too.
	Inboxes func(ctx context.Context) map[string]error
	// Now is the clock the API counts relative times from (a DLQ filter's
	// since, an event's time when it has none) and gives in ClockHeader:
	// the engine's, whose times it compares them with (engine.Engine.Now).
	// nil = time.Now.
	Now func() time.Time
	// Registerer receives the API's metrics (problems by code, replays,
	// ingest latency); nil = kept but not exported.
	Registerer prometheus.Registerer
	// Backup, if set, serves GET /v1/backup (admin): it writes a consistent
	// copy of the data file to w, telling size first.
	Backup func(w io.Writer, size func(int64)) (int64, error)
	// Listener, if set, is served instead of creating listen.socket: a
	// socket passed by systemd (socket activation). Close closes it but
	// leaves its file to systemd.
	Listener net.Listener
	// History, if set, keeps the last minutes of rates and latencies for
	// the console (GET /v1/stats/history, plugin latency in
	// GET /v1/plugins).
	History *history.Recorder
}

// Server serves the API.
type Server struct {
	engine *engine.Engine
	listen config.Listen
	opts   Options
	log    hclog.Logger
	http   *http.Server // the unix socket
	tcpSrv *http.Server // the TCP listener: its own limits
	ln     net.Listener
	tcp    net.Listener           // listen.http; nil = off
	tokens atomic.Pointer[Tokens] // for tcp; swapped by ReloadTokens
	places *tenantPlaces          // for tcp: each tenant's requests in progress
	// tokensSwapped is closed, and replaced, each time ReloadTokens swaps
	// the tokens: a stream checks then that its token still holds.
	tokensSwapped atomic.Pointer[chan struct{}]
	done          chan error
	served        int // listeners being served (answers expected on done)

	metrics *metrics
	failLog logthrottle.Throttle      // writeError's log lines, at most one per code and second
	clock   atomic.Pointer[clockLine] // ClockHeader's value this second

	// closing ends when Close begins: a stream or a long poll ends then
	// (untilClosing), where http.Server.Shutdown would wait it out.
	closing    context.Context
	beginClose context.CancelFunc
}

// New returns a server for eng with the limits of the listen block.
func New(eng *engine.Engine, listen config.Listen, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Server{engine: eng, listen: listen, opts: opts, log: opts.Logger.Named("api"), metrics: newMetrics(opts.Registerer),
		places: newTenantPlaces(listen.MaxConnections)}
	s.closing, s.beginClose = context.WithCancel(context.Background())
	swapped := make(chan struct{})
	s.tokensSwapped.Store(&swapped)
	h := s.Handler()
	s.http, s.tcpSrv = s.httpServer(h), s.httpServer(h)
	s.tcpSrv.MaxHeaderBytes = maxTCPHeaderBytes
	return s
}

// maxTCPHeaderBytes bounds a request's headers on the TCP listener, where
// they are read before the bearer token is checked: at net/http's 1 MiB,
// each of max_connections (512) clients that sent no token could hold
// about 1.6 MiB while it trickled headers in, and 400 of them had the
// router OOM-killed under a 400 MiB limit (a security trial); at 64 KiB
// they hold about 50 MiB in all. A binary-mode event's attributes are
// headers: one with more than 64 KiB of them goes over TCP in structured
// mode, or over the socket (its clients are the local services the
// socket's mode lets in; net/http's 1 MiB there). More gets 431.
const maxTCPHeaderBytes = 64 << 10

// httpServer is one listener's server: each has its own, so that shutting
// down or limiting one leaves the other alone. It is net/http's, for every
// route: docs/decisions/http-server.md says why, and what a faster server
// would save. A request must arrive whole
// within listen.read_timeout (config.DefaultReadTimeout when the file sets
// none): a client that sends headers announcing a body and then nothing
// holds its connection no longer than that. Each write of its answer must
// be taken within read_timeout too (answerWriter), the handler's own work
// not counted: a client that sends requests and never reads the answers
// holds its connection, busy, no longer either.
func (s *Server) httpServer(h http.Handler) *http.Server {
	readTimeout := s.listen.ReadTimeout
	return &http.Server{
		Handler:           h,
		ConnContext:       connContext,
		ReadHeaderTimeout: min(10*time.Second, readTimeout),
		ReadTimeout:       readTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          s.log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
}

// Handler is the API's routes, behind authentication: requests over the
// unix socket are trusted, others need a bearer token (auth.go).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/events", s.postEvents)
	mux.HandleFunc("GET /v1/events/{id}", s.getEvent)
	mux.HandleFunc("GET /v1/events", s.getEventsByKey)
	mux.Handle("GET /v1/stats", s.adminFunc(s.getStats))
	mux.Handle("GET /v1/stats/history", s.adminFunc(s.getHistory))
	mux.Handle("GET /v1/plugins", s.adminFunc(s.getPlugins))
	mux.Handle("GET /v1/tail", s.adminFunc(s.getTail))
	if s.opts.Backup != nil {
		mux.Handle("GET /v1/backup", s.adminFunc(s.getBackup))
	}
	s.dlqRoutes(mux)
	s.inboxRoutes(mux)
	s.stateRoutes(mux)
	s.consoleRoutes(mux)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", s.getReady)
	if s.opts.Gatherer != nil {
		mux.Handle("GET /metrics", s.adminOnly(promhttp.HandlerFor(s.opts.Gatherer, promhttp.HandlerOpts{})))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if allowed := methodsOf(mux, r); len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			s.writeError(w, r, switchyard.Errorf(switchyard.EMETHOD, "%s %s: the route takes %s", r.Method, r.URL.Path, strings.Join(allowed, ", ")))
			return
		}
		s.writeError(w, r, switchyard.Errorf(switchyard.ENOTFOUND, "no route %s %s", r.Method, r.URL.Path))
	})
	return s.dated(s.answerDeadline(s.authenticate(s.singleParams(mux))))
}

// ClockHeader gives each answer the router's time (RFC 3339, to the
// second), by the clock it stamps times with (Options.Now): the ages a
// client counts from an answer's times ("moved 5m ago" in router dlq
// list, what is left of a claim's lease) count from it, which runs ahead
// of the system's after a start behind the data file's clock
// (docs/architecture.md, "A clock stepped back"), where every age read 0s.
// Not Date, which net/http keeps (the system clock) and proxies replace.
const ClockHeader = "Switchyard-Clock"

// dated gives every answer ClockHeader.
func (s *Server) dated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()[ClockHeader] = s.clockNow()
		next.ServeHTTP(w, r)
	})
}

// clockLine is a ClockHeader value, the second of the router's clock it
// names, and how far that clock ran from the system's when it was made.
type clockLine struct {
	second int64
	ahead  time.Duration // Options.Now less the system's clock
	value  []string      // shared by the answers of that second: read only
}

// clockNow is the ClockHeader value for now, made once a second of the
// router's clock (Options.Now, the engine's clock, takes a lock: not once
// an answer). That second is counted from the system's clock and the
// offset between the two the last value saw: counted from the system's
// second alone, a router's clock a fraction of a second ahead gave a value
// up to two seconds old.
func (s *Server) clockNow() []string {
	c := s.clock.Load()
	if c != nil && time.Now().Add(c.ahead).Unix() == c.second {
		return c.value
	}
	sys, now := time.Now(), s.opts.Now()
	c = &clockLine{second: now.Unix(), ahead: now.Sub(sys), value: []string{now.UTC().Truncate(time.Second).Format(time.RFC3339)}}
	s.clock.Store(c)
	return c.value
}

// singleParams refuses a request that gives a query parameter more than
// once (?limit=5&limit=6): every parameter of the API takes one value, and
// which of two counted would be the server's guess. A request without a
// query (an ingest) costs nothing here. /metrics is the Prometheus
// client's, whose name[] filter repeats.
func (s *Server) singleParams(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery != "" && r.URL.Path != "/metrics" {
			for name, vs := range r.URL.Query() {
				if len(vs) > 1 {
					s.writeError(w, r, switchyard.Errorf(switchyard.EINVALIDREQUEST, "query parameter %q is given %d times: give it once", switchyard.Truncate(name, 64), len(vs)))
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// answerDeadline gives the client listen.read_timeout to take each write
// of its answer, counted from the write: not from the request's headers as
// http.Server's WriteTimeout counts, which takes in the handler's work (a
// slow commit, a bulk DLQ action, a long poll) and cut off the 202 of an
// event already stored, for a client to send it again. A stream (/v1/tail,
// /v1/backup) lives as long as its client reads.
func (s *Server) answerDeadline(next http.Handler) http.Handler {
	timeout := s.listen.ReadTimeout
	if timeout <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		aw := &answerWriter{ResponseWriter: w, rc: *http.NewResponseController(w), timeout: timeout}
		aw.deadline(time.Time{}) // none while the handler works; a keep-alive connection's last one goes
		next.ServeHTTP(aw, r)
		aw.extend() // what net/http writes once the handler is done
	})
}

// answerWriter moves the connection's write deadline to timeout from now
// before each write of an answer that may reach the socket: once the answer
// outgrows net/http's buffers, and at each Flush. A small answer waits in
// them until the handler is done (answerDeadline moves it then): two
// deadline calls per request on the hot path.
type answerWriter struct {
	http.ResponseWriter
	rc      http.ResponseController // of ResponseWriter, held by value: no allocation of its own
	timeout time.Duration
	written int
}

// buffered is how much of an answer net/http holds before it writes to the
// socket (its 2 KiB before chunking, well inside its 4 KiB writer).
const buffered = 2 << 10

func (a *answerWriter) deadline(t time.Time) { a.rc.SetWriteDeadline(t) }

func (a *answerWriter) extend() { a.deadline(time.Now().Add(a.timeout)) }

func (a *answerWriter) Write(p []byte) (int, error) {
	if a.written += len(p); a.written > buffered {
		a.extend()
	}
	return a.ResponseWriter.Write(p)
}

// Flush keeps http.Flusher, which the tail needs.
func (a *answerWriter) Flush() {
	a.extend()
	a.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (a *answerWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// methodsOf lists the methods mux serves r's path with, other than by its
// fallback "/": a route asked with a method it does not take is a 405
// that says which it takes, not a 404 that says it is not there.
func methodsOf(mux *http.ServeMux, r *http.Request) []string {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "/" && pattern != "" {
			allowed = append(allowed, m)
		}
	}
	return allowed
}

// Open listens on the unix socket (or serves Options.Listener) and, when
// listen.http is set, on TCP with the bearer tokens of listen.tokens_file;
// both serve the same handler. A socket file left by a crashed router is
// replaced; one that a live router answers on is not. When Open fails, it
// has closed Options.Listener too: the server was given it.
func (s *Server) Open() (err error) {
	if s.opts.Listener != nil {
		defer func() {
			if err != nil {
				s.opts.Listener.Close()
			}
		}()
	}
	var tcp net.Listener
	if s.listen.HTTP != "" {
		tokens, err := LoadTokens(s.listen.TokensFile)
		if err != nil {
			return err
		}
		s.tokens.Store(tokens)
		if tcp, err = net.Listen("tcp", s.listen.HTTP); err != nil {
			return fmt.Errorf("listen %s: %w", s.listen.HTTP, err)
		}
		if n := s.listen.MaxConnections; n > 0 {
			// Past n open connections a new client takes the place of the
			// one idle the longest, or waits in the kernel's backlog.
			tcp = LimitConnections(s.tcpSrv, tcp, n)
		}
	}
	ln := s.opts.Listener
	if ln == nil {
		var err error
		if ln, err = listenUnix(s.listen.Socket); err != nil {
			if tcp != nil {
				tcp.Close()
			}
			return err
		}
		if made, err := os.Lstat(s.listen.Socket); err == nil {
			go s.watchSocket(s.listen.Socket, made, ln)
		}
	}
	s.ln, s.tcp = ln, tcp
	s.done = make(chan error, 2)
	s.served = 1
	go func() { s.done <- s.http.Serve(ln) }()
	if tcp != nil {
		s.served++
		go func() { s.done <- s.tcpSrv.Serve(tcp) }()
		if host, _, _ := net.SplitHostPort(s.listen.HTTP); !config.LoopbackHost(host) {
			s.log.Warn("the TCP listener is not on loopback: bearer tokens travel in clear text unless TLS is put in front", "addr", tcp.Addr().String())
		}
		s.log.Info("API on TCP", "addr", tcp.Addr().String(), "tokens", s.tokens.Load().Len())
	}
	return nil
}

// TCPAddr is the address of the TCP listener ("" when off): with port 0 in
// listen.http, the port the system picked.
// ReloadTokens reads listen.tokens_file again (SIGHUP). A file that does
// not load is refused and the tokens in force stay.
func (s *Server) ReloadTokens() error {
	if s.tokens.Load() == nil {
		return nil // no TCP listener
	}
	tokens, err := LoadTokens(s.listen.TokensFile)
	if err != nil {
		return err
	}
	s.tokens.Store(tokens)
	next := make(chan struct{})
	close(*s.tokensSwapped.Swap(&next))
	return nil
}

func (s *Server) TCPAddr() string {
	if s.tcp == nil {
		return ""
	}
	return s.tcp.Addr().String()
}

// Addr is the socket path the server listens on.
func (s *Server) Addr() string { return s.listen.Socket }

// Close stops accepting on both listeners at once and waits for requests
// in flight until ctx ends; the connections still open then are cut (a
// client that sends its body slowly would hold the stop as long as
// listen.read_timeout lets it), and Close returns ErrRequestsCut. Streams
// (the tail) and long polls (a pull's wait) end at once: they would hold
// the stop for its whole timeout, and leave the engine and the data file
// no time to close cleanly.
func (s *Server) Close(ctx context.Context) error {
	s.beginClose()
	if s.ln == nil {
		return nil
	}
	// One after the other, the TCP listener took new requests while the
	// socket's drained (a review: three 202s after the SIGTERM).
	var socket, tcp error
	var wg sync.WaitGroup
	wg.Go(func() { socket = shutdown(ctx, s.http) })
	wg.Go(func() { tcp = shutdown(ctx, s.tcpSrv) })
	wg.Wait()
	err := errors.Join(socket, tcp)
	if socket == ErrRequestsCut && tcp == ErrRequestsCut {
		err = ErrRequestsCut // one message for both
	}
	for range s.served {
		if serr := <-s.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = serr
		}
	}
	s.served = 0
	return err
}

// ErrRequestsCut is Close's error when requests were still in flight
// once its time ran out: their connections were cut. Nothing they sent
// and were not answered for is acknowledged; what a cut request stored is
// stored (its client may send it again: Idempotency-Key).
var ErrRequestsCut = errors.New("requests were still in flight when the stop's time for them ran out: their connections were cut")

// shutdown is srv.Shutdown, then srv.Close once ctx ends: the connections
// left are cut.
func shutdown(ctx context.Context, srv *http.Server) error {
	err := srv.Shutdown(ctx)
	if err != nil && ctx.Err() != nil {
		srv.Close()
		return ErrRequestsCut
	}
	return err
}

// socketCheckEvery is how often watchSocket looks at the socket's path.
var socketCheckEvery = time.Second

// watchSocket makes the API socket again when its file is gone while the
// router runs (an rm, a cleaner of /tmp): the listener went on accepting,
// on a file nobody could reach, and the API was gone until a restart (an
// adversarial trial). Something else put at the path is left alone, and
// said once.
func (s *Server) watchSocket(path string, made os.FileInfo, current net.Listener) {
	original := current // Close's to close
	t := time.NewTicker(socketCheckEvery)
	defer t.Stop()
	said := false
	for {
		select {
		case <-s.closing.Done():
			return
		case <-t.C:
		}
		fi, err := os.Lstat(path)
		switch {
		case err == nil && os.SameFile(fi, made):
			continue
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			continue // proves nothing (a folder made unreadable a moment): look again
		case err == nil:
			if !said {
				said = true
				s.log.Error("the API socket's path holds something else now: the socket is reachable no more until a restart", "socket", path)
			}
			continue
		}
		// The listener of the removed file would remove the path when it
		// closes: the new socket's, by then.
		if ul, ok := current.(*net.UnixListener); ok {
			ul.SetUnlinkOnClose(false)
		}
		if current != original {
			current.Close() // one made here before
		}
		ln, err := listenUnix(path)
		if err != nil {
			if !said {
				said = true
				s.log.Error("the API socket was removed, and making it again failed", "socket", path, "error", err)
			}
			continue
		}
		if made, err = os.Lstat(path); err != nil {
			ln.Close()
			continue
		}
		s.log.Warn("the API socket was removed while the router ran: made again", "socket", path)
		current = ln
		go func() {
			s.http.Serve(ln) // until Close shuts the server down, or it is replaced
			ln.Close()
		}()
	}
}

// untilClosing is r's context, which also ends when the server begins to
// close, and when a reload of the tokens revokes the token r came with (or
// gives it another tenant or role): for a handler that streams or waits on
// the client's behalf. (An adversarial trial's revoked admin token kept
// its open tail, and read every tenant's events after the reload.)
func (s *Server) untilClosing(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(s.closing, cancel)
	if p := principalOf(r.Context()); p != nil && !p.local {
		go s.cancelWhenRevoked(ctx, cancel, p)
	}
	return ctx, func() { stop(); cancel() }
}

// cancelWhenRevoked calls cancel once the tokens in force no longer give
// p's token p's tenant and role, or when ctx ends.
func (s *Server) cancelWhenRevoked(ctx context.Context, cancel context.CancelFunc, p *principal) {
	for {
		swapped := *s.tokensSwapped.Load() // before the check: a swap after it closes this one
		if e, ok := s.tokens.Load().lookup(p.digest); !ok || e.tenant != p.tenant || e.admin != p.admin {
			cancel()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-swapped:
		}
	}
}

// listenUnix creates the API socket at path. What is already there is
// removed only when it is a unix socket that nothing answers on (a router
// that crashed left it); anything else — a live socket, a file, a folder,
// a link — is refused and left untouched: the path may be a mistake for
// the data file or a folder of the user's.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(dirOf(path), 0o750); err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if err := fsperm.CheckSocketDir(dirOf(path)); err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	// Create the socket with no access for others, then open it to the
	// group: there is no window in which it is world-writable.
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	return ln, nil
}

// CheckSocket says, without changing anything, why the router could not
// listen on the unix socket path: its directory is open to others, or
// something other than a stale socket is at path (another router serving
// on it). router run asks it before it starts anything; Open does the same
// checks again as it listens.
func CheckSocket(path string) error {
	if err := CheckSocketPlace(path); err != nil {
		return err
	}
	if _, err := staleSocket(path); err != nil {
		return fmt.Errorf("listen %s: %w", path, err)
	}
	return nil
}

// CheckSocketPlace is CheckSocket without asking whether a router serves
// on a socket at path (router validate runs beside the router it checks a
// change for): the directory is open to others, or something other than
// a socket is at path.
func CheckSocketPlace(path string) error {
	if _, err := os.Stat(dirOf(path)); err == nil {
		if err := fsperm.CheckSocketDir(dirOf(path)); err != nil {
			return fmt.Errorf("listen %s: %w", path, err)
		}
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("listen %s: %w", path, notASocket(fi))
	}
	return nil
}

// notASocket is the error for a path that holds something else than the
// router's socket.
func notASocket(fi fs.FileInfo) error {
	return fmt.Errorf("%s is there, not a socket; the router only ever replaces a stale socket of its own, so it leaves it untouched: move it away or set listen.socket to another path", fsperm.Kind(fi))
}

// removeStaleSocket removes path if it is a unix socket nobody serves on.
func removeStaleSocket(path string) error {
	stale, err := staleSocket(path)
	if err != nil || !stale {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	return nil
}

// staleSocket says whether path is a unix socket nobody serves on (false:
// nothing is there), or why it is not one the router may replace.
func staleSocket(path string) (bool, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return false, notASocket(fi)
	}
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		conn.Close()
		return false, errors.New("another process is serving on this socket")
	}
	if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ENOENT) {
		return false, fmt.Errorf("socket exists and cannot be probed: %w", err)
	}
	return true, nil
}

func dirOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i > 0 {
		return path[:i]
	}
	return "."
}

// tenant is who a request acts for: on TCP the tenant of its bearer token
// (X-Tenant is ignored there); on the unix socket the X-Tenant header.
func tenant(r *http.Request) (string, error) {
	if p := principalOf(r.Context()); p != nil && !p.local {
		return p.tenant, nil
	}
	t := r.Header.Get("X-Tenant")
	if t == "" {
		return storage.DefaultTenant, nil
	}
	if err := tenantParam("X-Tenant", t); err != nil {
		return "", err
	}
	return t, nil
}

// isOperator reports whether r comes from the operator's own clients: the
// unix socket (trusted by its file mode) or an admin token.
func isOperator(r *http.Request) bool {
	p := principalOf(r.Context())
	return p != nil && p.admin
}

// readTenant is whose events a read of events by id or key looks at: the
// request's own tenant (tenant), or the one ?tenant= names. Only an admin
// (the unix socket, an admin token) may name another tenant: the console
// follows a dead letter or a plugin failure of any tenant to its event.
func readTenant(r *http.Request) (string, error) {
	own, err := tenant(r)
	if err != nil {
		return "", err
	}
	named := r.URL.Query().Get("tenant")
	if named == "" || named == own {
		return own, nil
	}
	if err := tenantParam("tenant", named); err != nil {
		return "", err
	}
	if !isOperator(r) {
		return "", switchyard.Errorf(switchyard.EFORBIDDEN, "reading another tenant's events needs an admin token")
	}
	return named, nil
}

// tenantParam is switchyard.CheckTenant's answer for a tenant a request
// names in name (a header, a query parameter): 400 invalid_request when it
// is no tenant name.
func tenantParam(name, t string) error {
	if err := switchyard.CheckTenant(t); err != nil {
		return switchyard.Errorf(switchyard.EINVALIDREQUEST, "%s must be %v", name, err)
	}
	return nil
}

func (s *Server) postEvents(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	defer func() { s.metrics.ingest.Observe(time.Since(start).Seconds()) }()
	ten, err := tenant(r)
	if err == nil {
		err = s.engine.CheckTenantRate(ten, isOperator(r)) // before the body is read
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	body, err := s.readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	events, batch, err := decodeRequest(r.Header, body, s.listen.MaxBatch, s.opts.Now)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	req := &engine.IngestRequest{
		Tenant:   ten,
		Operator: isOperator(r),
		Endpoint: endpointEvents,
		Key:      r.Header.Get("Idempotency-Key"),
		Events:   events,
		Render:   renderAccepted(batch),
	}
	if len(r.Header.Values("Idempotency-Key")) > 1 {
		s.writeError(w, r, switchyard.Errorf(switchyard.EINVALIDREQUEST, "Idempotency-Key is repeated: a request has one key"))
		return
	}
	if len(req.Key) > 255 || !utf8.ValidString(req.Key) {
		s.writeError(w, r, switchyard.Errorf(switchyard.EINVALIDREQUEST, "Idempotency-Key must be up to 255 bytes of UTF-8"))
		return
	}
	if req.Key != "" {
		req.Digest = requestDigest(r.Header, body)
	} else if len(events) == 0 {
		// An empty batch (the HTTP binding allows one), with no key to
		// record: nothing to store.
		writeResponse(w, renderAccepted(true)(nil))
		return
	}
	resp, err := s.engine.Ingest(r.Context(), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if resp.Replayed {
		s.metrics.replays.Inc()
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeResponse(w, *resp)
}

// writeResponse writes an ingest response as the engine rendered it.
func writeResponse(w http.ResponseWriter, resp engine.Response) {
	w.Header().Set("Content-Type", resp.ContentType)
	w.WriteHeader(resp.Status)
	w.Write(resp.Body)
}

// renderAccepted builds the 202 response: one {"id","status"} object per
// event, alone or in a list for a batch. It depends only on the outcomes,
// so a replay is byte-identical.
func renderAccepted(batch bool) func([]engine.Outcome) engine.Response {
	return func(outcomes []engine.Outcome) engine.Response {
		// What json.Marshal made of the list (or of its one element),
		// written without reflection: TestRenderAcceptedIsMarshal.
		body := make([]byte, 0, len(outcomes)*(len(`{"id":"","status":"duplicate"},`)+40)+2)
		if batch {
			body = append(body, '[')
		}
		for i, o := range outcomes {
			if i > 0 {
				body = append(body, ',')
			}
			status := `","status":"accepted"}`
			if o.Duplicate {
				status = `","status":"duplicate"}`
			}
			body = cloudevents.AppendJSONString(append(body, `{"id":`...), o.ID)
			body = append(body[:len(body)-1], status...) // the closing quote is status's
		}
		if batch {
			body = append(body, ']')
		}
		return engine.Response{Status: http.StatusAccepted, ContentType: "application/json", Body: append(body, '\n')}
	}
}

// eventView is GET /v1/events/{id}.
type eventView struct {
	ID            string             `json:"id"`
	Tenant        string             `json:"tenant"` // whose: tenants choose ids apart
	Type          string             `json:"type"`
	Source        string             `json:"source"`
	State         storage.State      `json:"state"`
	Attempts      int                `json:"attempts"`
	CreatedAt     time.Time          `json:"created_at"`
	NextAttemptAt *time.Time         `json:"next_attempt_at,omitempty"`
	LastError     string             `json:"last_error,omitempty"`
	Outputs       []storage.Output   `json:"outputs"`
	History       *[]storage.Attempt `json:"history,omitempty"` // with ?include=history: [] before any attempt
}

func viewOf(rec *storage.Record) eventView {
	v := eventView{
		ID: rec.Event.ID, Tenant: cmp.Or(rec.Tenant, storage.DefaultTenant), Type: rec.Event.Type, Source: rec.Event.Source,
		State: rec.State, Attempts: rec.Attempts, CreatedAt: rec.CreatedAt,
		LastError: rec.LastError, Outputs: rec.Outputs,
	}
	if v.Outputs == nil {
		v.Outputs = []storage.Output{}
	}
	if !rec.NextAttemptAt.IsZero() {
		t := rec.NextAttemptAt
		v.NextAttemptAt = &t
	}
	return v
}

func (s *Server) getEvent(w http.ResponseWriter, r *http.Request) {
	ten, err := readTenant(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	id := r.PathValue("id")
	if err := checkRef(id); err != nil {
		s.writeError(w, r, err)
		return
	}
	rec, err := s.engine.EventStatus(ten, id)
	if err == nil && rec.Tenant != ten {
		err = engine.NoEvent(ten, id)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeEventView(w, r, rec)
}

// writeEventView answers with rec's view; ?include=history adds every
// attempt with its time and error, ?include=event the event itself (its
// data byte for byte); both: ?include=history,event.
func writeEventView(w http.ResponseWriter, r *http.Request, rec *storage.Record) {
	v := viewOf(rec)
	include := strings.Split(r.URL.Query().Get("include"), ",")
	if slices.Contains(include, "history") {
		h := rec.History
		if h == nil {
			h = []storage.Attempt{}
		}
		v.History = &h
	}
	if slices.Contains(include, "event") {
		writeWithEvents(w, http.StatusOK, withEvent(v, &rec.Event))
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) getEventsByKey(w http.ResponseWriter, r *http.Request) {
	ten, err := readTenant(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	key := r.URL.Query().Get("idempotency_key")
	if key == "" {
		s.writeError(w, r, switchyard.Errorf(switchyard.EINVALIDREQUEST, "the idempotency_key query parameter is required"))
		return
	}
	recs, err := s.engine.EventsByKey(ten, endpointEvents, key)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	views := make([]eventView, len(recs))
	for i, rec := range recs {
		views[i] = viewOf(rec)
	}
	writeJSON(w, http.StatusOK, map[string]any{"idempotency_key": key, "events": views})
}

// TypeStats is one queue's line in GET /v1/stats.
type TypeStats struct {
	Type          string  `json:"type"`
	Pending       int     `json:"pending"`
	InProcess     int     `json:"in_process"`
	OldestAgeSecs float64 `json:"oldest_pending_age_seconds"`
	PollDelaySecs float64 `json:"poll_delay_seconds"`
	DLQ           int     `json:"dlq"`
}

func (s *Server) getStats(w http.ResponseWriter, r *http.Request) {
	stats, err := s.engine.Stats()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	views := make([]TypeStats, len(stats))
	for i, st := range stats {
		views[i] = TypeStats{Type: st.Type, Pending: st.Pending, InProcess: st.InProcess,
			OldestAgeSecs: st.OldestPending.Seconds(), PollDelaySecs: st.PollDelay.Seconds(), DLQ: st.DLQ}
	}
	out := map[string]any{"types": views}
	if nss, err := s.engine.StateNamespaces(""); err == nil && len(nss) > 0 {
		state := []map[string]any{}
		for _, ns := range nss {
			state = append(state, map[string]any{"namespace": ns.Name, "plugin": ns.Plugin, "type": ns.Queue, "keys": ns.Keys, "bytes": ns.Bytes})
		}
		out["plugin_state"] = state
	}
	if errs := s.engine.SinkErrors(); len(errs) > 0 {
		sinks := map[string]any{}
		for name, e := range errs {
			sinks[name] = map[string]any{"last_error": e.Error, "last_error_at": e.At, "type": e.Queue}
		}
		out["sinks"] = sinks
	}
	if ca, ok := s.engine.CatchAll(); ok {
		out["catch_all"] = map[string]any{
			"types": ca.Types, "max_types": ca.MaxTypes, "max_types_per_tenant": ca.MaxTypesPerTenant, "added_by_tenant": ca.ByTenant, "in_flight": ca.InFlight,
		}
	}
	if rates := s.engine.TenantRates(); len(rates) > 0 {
		tenants := map[string]any{}
		for t, r := range rates {
			tenants[t] = map[string]any{"rate": r.Rate, "burst": r.Burst, "available": r.Available, "refused": r.Refused, "refused_requests": r.RefusedRequests}
		}
		out["tenant_rates"] = tenants
	}
	if sp, maxSize, ok := s.engine.Space(); ok {
		out["storage"] = map[string]any{
			"used_bytes": sp.Used, "file_bytes": sp.File, "disk_free_bytes": sp.DiskFree, "reusable_bytes": sp.Reusable, "reserve_bytes": sp.Reserve, "max_size_bytes": maxSize,
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// getBackup streams a consistent copy of the data file: one read
// transaction's view, while ingest and delivery go on. Content-Length is
// the copy's size, so a client can tell a cut-off copy from a whole one.
func (s *Server) getBackup(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="router.db"`)
	start := time.Now()
	// However long a large file takes: each write has read_timeout
	// (answerDeadline). A stop ends it: it holds a read transaction, which
	// closing the data file would wait for.
	ctx, cancel := s.untilClosing(r)
	defer cancel()
	// A write that waits on a client that stopped reading ends too.
	defer context.AfterFunc(ctx, func() { http.NewResponseController(w).SetWriteDeadline(time.Now()) })()
	n, err := s.opts.Backup(ctxWriter{ctx, w}, func(size int64) {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	})
	switch {
	case err != nil && r.Context().Err() != nil:
		// The client went away (stopped, or cut off): theirs to say.
		s.log.Info("backup ended: the client went away", "written", n, "by", actor(r))
		return
	case err != nil && s.closing.Err() != nil:
		s.log.Warn("backup cut short: the router is stopping", "written", n, "by", actor(r))
		return
	case err != nil:
		// The status is sent: the client sees a body shorter than
		// Content-Length and fails; the log says why.
		s.log.Error("backup failed", "error", err, "written", n)
		return
	}
	s.log.Info("backup streamed", "bytes", n, "took", time.Since(start).Round(time.Millisecond), "by", actor(r))
}

// ctxWriter is w until ctx ends; then every write fails with ctx's error.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// getReady is /readyz: 200 while ingest works (the data file takes writes),
// whatever the brokers do; "sinks" says which are connected ("ok") and why
// the others are not, "inboxes" which consume. The three are asked at once
// (each of Sinks and Inboxes answers within a second). Why one is not ok
// (paths, broker addresses, a server's error) is the operator's: a
// tenant's token gets "not ok" (a security trial found a tenant reading
// the data file's path and every broker's address), and no inboxes, whose
// names only an admin lists (/v1/inboxes).
func (s *Server) getReady(w http.ResponseWriter, r *http.Request) {
	p := principalOf(r.Context())
	admin := p != nil && p.admin
	why, inboxes := func(err error) string { return err.Error() }, s.opts.Inboxes
	if !admin {
		why, inboxes = func(error) string { return "not ok" }, nil
	}
	var checks, sinks, boxes map[string]string
	var unready bool
	var wg sync.WaitGroup
	wg.Go(func() { checks, unready = reported(r.Context(), s.opts.Ready, why) })
	wg.Go(func() { sinks, _ = reported(r.Context(), s.opts.Sinks, why) })
	wg.Go(func() { boxes, _ = reported(r.Context(), inboxes, why) })
	wg.Wait()
	status := http.StatusOK
	if unready {
		status = http.StatusServiceUnavailable
	}
	if !admin {
		// An inbox's delivery sink names the inbox ("inbox.payments"),
		// which only an admin lists (a console trial read it with a
		// tenant's token).
		maps.DeleteFunc(sinks, func(name, _ string) bool { return config.IsInboxSink(name) })
	}
	body := map[string]any{"ready": status == http.StatusOK, "checks": checks, "sinks": sinks}
	if admin {
		body["inboxes"] = boxes
	}
	writeJSON(w, status, body)
}

// reported is each of check's answers as /readyz says it: "ok", or why
// not (why), and whether one is not ok. A nil check has none.
func reported(ctx context.Context, check func(context.Context) map[string]error, why func(error) string) (out map[string]string, failed bool) {
	out = map[string]string{}
	if check == nil {
		return out, false
	}
	for name, err := range check(ctx) {
		out[name] = "ok"
		if err != nil {
			out[name], failed = why(err), true
		}
	}
	return out, failed
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// readBody reads a request's body, up to listen.max_body: more is a
// payload_too_large error.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if ce := r.Header.Values("Content-Encoding"); len(ce) > 1 || len(ce) == 1 && !strings.EqualFold(ce[0], "identity") {
		// No route decodes a body: gzip bytes would be stored and
		// published as the data itself.
		return nil, switchyard.Errorf(switchyard.EMEDIATYPE, "Content-Encoding %q: the router takes bodies as they are, without a content coding", strings.Join(ce, ", "))
	}
	if r.ContentLength > s.listen.MaxBody {
		// Said before a byte is read: a client that sent Expect:
		// 100-continue gets the 413 instead of a go-ahead.
		return nil, s.bodyTooLarge()
	}
	rd := http.MaxBytesReader(w, r.Body, s.listen.MaxBody)
	var body []byte
	var err error
	if n := r.ContentLength; n > 0 && n <= s.listen.MaxBody {
		// The announced length (net/http holds the body to it): one
		// allocation, where ReadAll would grow and copy its buffer.
		body = make([]byte, n)
		_, err = io.ReadFull(rd, body)
	} else {
		body, err = io.ReadAll(rd)
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, s.bodyTooLarge()
		}
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			// Not the event's fault: a 4xx that says "invalid" would tell
			// the client to drop it.
			return nil, switchyard.Errorf(switchyard.ETIMEOUT, "the request did not arrive within listen.read_timeout (%s): nothing was stored; send it again", s.listen.ReadTimeout)
		}
		return nil, switchyard.Errorf(switchyard.EINVALIDREQUEST, "reading the body: %v", err)
	}
	return body, nil
}

// bodyTooLarge is the 413 of a body past listen.max_body, announced or read.
func (s *Server) bodyTooLarge() error {
	return switchyard.Errorf(switchyard.ETOOLARGE, "the body is over the limit of %d bytes", s.listen.MaxBody)
}

// writeWithEvents writes a response that embeds events in the JSON format:
// body, built by withEvent. Not through encoding/json, which compacts (and
// indents) the JSON a Marshaler or RawMessage holds, changing the bytes of
// an event's JSON data.
func writeWithEvents(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

// withEvent renders v, whose JSON is an object, with one more member,
// "event": ev in the JSON format, its data byte for byte.
func withEvent(v any, ev *switchyard.Event) []byte {
	b, _ := json.Marshal(v)
	b = b[:len(b)-1] // the closing brace
	if len(b) > 1 {
		b = append(b, ',')
	}
	b = append(b, `"event":`...)
	b = cloudevents.AppendJSON(b, ev)
	return append(b, '}')
}
