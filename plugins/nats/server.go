// Package nats is Switchyard's NATS plugin: an embedded in-process
// nats-server with JetStream (Server) and a sink that publishes events to
// JetStream or core NATS (Sink).
package nats

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/internal/fsperm"
	"github.com/switchyard-router/switchyard/internal/logthrottle"
)

// readyTimeout bounds how long StartServer waits for the server to accept
// clients (JetStream recovers its store before that).
const readyTimeout = 30 * time.Second

// Server is an embedded nats-server with JetStream enabled, running inside
// the router's process.
type Server struct {
	opts     *server.Options
	name     string
	storeDir string
	log      hclog.Logger

	mu       sync.Mutex
	ns       *server.Server // replaced when the server is restarted to recover
	writeErr error          // a JetStream store write error not yet recovered from
	restarts int
	// started is the options the running server was made with, which
	// nats-server completed with its defaults; supervise's alone.
	started *server.Options

	critical  chan struct{} // a store write error was logged (buffered 1)
	closeOnce sync.Once
	closing   chan struct{}
	closed    chan struct{}
}

// storeCheckEvery is how often the server compares its JetStream storage
// limit with its store's filesystem (followDisk).
var storeCheckEvery = 10 * time.Second

// recoverAfter is how long the server waits after a JetStream store write
// error before it restarts to recover (doubling, up to a minute, while the
// cause persists).
var recoverAfter = 5 * time.Second

// StartServer starts an in-process nats-server with JetStream listening on
// cfg.Host:cfg.Port (host default 127.0.0.1; port 0 = 4222, -1 = a random
// free port, see ClientURL). The JetStream store is cfg.StoreDir, or
// <dataDir>/nats when that is empty. The server's logs go to logger: its
// warnings and errors at the same levels, its notices (start-up banner and
// the like) at debug, its debug and trace output at trace.
//
// The server installs no signal handlers; the router owns the process's
// signals and calls Close.
//
// A JetStream file store that fails to write (a full disk, no file
// descriptors left) refuses every later message of its stream until it is
// opened again; the server then reports the error (Healthy) and restarts
// itself in place, on the same port and store, until the store takes writes
// again: the router's clients reconnect, and no restart of the router is
// needed once the cause is gone.
//
// Durability note: JetStream's file store acknowledges a message once it is
// written to the OS, and fsyncs on an interval (2 minutes by default), so an
// acknowledged message survives a crash of the router process but not
// necessarily a power loss of the machine.
func StartServer(cfg config.NATS, dataDir string, logger hclog.Logger) (*Server, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	host := cfg.Host
	if host == "" {
		host = config.DefaultNATSHost
	}
	storeDir := cfg.StoreDir
	if storeDir == "" {
		storeDir = config.DefaultStoreDir(dataDir)
	}
	name := cfg.Name
	if name == "" {
		name = "embedded"
	}
	// Made by another user before the router's first start, or a link
	// another user put there, it would be theirs to read and change.
	if err := fsperm.CheckMade(storeDir); err != nil {
		return nil, fmt.Errorf("nats %s: embedded server: store: %w", name, err)
	}
	if _, err := os.Stat(storeDir); err == nil {
		if err := fsperm.CheckDir(storeDir); err != nil {
			return nil, fmt.Errorf("nats %s: embedded server: %w", name, err)
		}
	}
	users, err := serverUsers(cfg, dataDir)
	if err != nil {
		return nil, fmt.Errorf("nats %s: embedded server: %w", name, err)
	}
	s := &Server{
		opts: serverOptions(cfg, name, host, storeDir, users, logger.IsTrace()),
		name: name, storeDir: storeDir, log: logger.Named("nats-server"),
		critical: make(chan struct{}, 1), closing: make(chan struct{}), closed: make(chan struct{}),
	}
	ns, err := s.start()
	if err != nil {
		return nil, err
	}
	s.ns = ns
	// A random port is fixed at the first start: a restart keeps it.
	s.opts.Port = ns.Addr().(*net.TCPAddr).Port
	go s.supervise()
	logger.Info("embedded NATS server started", "name", name, "url", s.ClientURL(),
		"store_dir", storeDir, "version", server.VERSION)
	return s, nil
}

// serverOptions are the embedded server's options: JetStream on, in
// storeDir, for users, on host and the block's port.
func serverOptions(cfg config.NATS, name, host, storeDir string, users []*server.User, trace bool) *server.Options {
	return &server.Options{
		Users:      users,
		ServerName: "switchyard-" + name,
		Host:       host,
		Port:       serverPort(cfg.Port),
		JetStream:  true,
		// The size of the store's filesystem, not what nats-server takes
		// without one (75% of the bytes free when it starts): restarted on
		// a full disk, it would limit itself to nothing and refuse every
		// message ("insufficient resources") after the disk had room
		// again, until the router restarted. The disk stays the limit; a
		// full one is a write error, which the supervisor recovers from;
		// a grown one raises the limit (followDisk).
		JetStreamMaxStore: storeLimit(storeDir),
		StoreDir:          storeDir,
		SyncAlways:        cfg.SyncAlways,
		SyncInterval:      cfg.SyncInterval,
		// The router owns the process's signals.
		NoSigs: true,
		Debug:  trace,
		Trace:  trace,
	}
}

// storeLimit is the size of the filesystem that holds dir (or will: the
// nearest directory above it that exists), so that JetStream's own limit
// never binds before the disk does; nats-server's default ceiling (1 TB)
// when the filesystem cannot be asked.
func storeLimit(dir string) int64 {
	for d := dir; ; d = filepath.Dir(d) {
		var fs syscall.Statfs_t
		if err := syscall.Statfs(d, &fs); err == nil {
			return max(int64(fs.Blocks)*int64(fs.Bsize), 1)
		}
		if filepath.Dir(d) == d {
			return server.JetStreamMaxStoreDefault
		}
	}
}

// start starts one nats-server on s.opts and waits until it takes clients.
func (s *Server) start() (*server.Server, error) {
	// The limit as the disk is now: a restart after a write error starts
	// with a grown disk's (followDisk).
	s.opts.JetStreamMaxStore = max(s.opts.JetStreamMaxStore, storeLimit(s.storeDir))
	opts := s.opts.Clone()
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats %s: embedded server: %w", s.name, err)
	}
	log := &serverLogger{l: s.log, critical: s.signalCritical}
	ns.SetLoggerV2(log, s.log.IsTrace(), s.log.IsTrace(), false)
	ns.Start() // synchronous up to the listeners: a fatal error is logged by now
	listen := net.JoinHostPort(s.opts.Host, strconv.Itoa(s.opts.Port))
	if s.opts.Port == server.RANDOM_PORT {
		listen = s.opts.Host + " (a free port)"
	}
	stop := func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	}
	for deadline := time.Now().Add(readyTimeout); ; {
		if fatal := log.fatal.Load(); fatal != nil {
			// The server gave up (a port in use, a store it cannot
			// open): say why now, not after readyTimeout.
			stop()
			return nil, fmt.Errorf("nats %s: embedded server did not start (listen %s, store %s): %s%s",
				s.name, listen, s.storeDir, *fatal, fatalHint(*fatal, s.opts.Port))
		}
		if ns.ReadyForConnections(readyPoll) {
			s.started = opts // as nats-server completed them: what a reload compares with
			return ns, nil
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("nats %s: embedded server not ready after %s (listen %s, store %s)",
				s.name, readyTimeout, listen, s.storeDir)
		}
	}
}

// serverPort is the port nats-server listens on for a nats block's port:
// 0 is nats-server's default, named here so that messages say it.
func serverPort(port int) int {
	if port == 0 {
		return server.DEFAULT_PORT
	}
	return port
}

// readyPoll is how often start looks for a fatal error while it waits for
// the server to take clients.
const readyPoll = 50 * time.Millisecond

// fatalHint says what to do about a fatal error the operator can mend in
// the configuration.
func fatalHint(msg string, port int) string {
	if strings.Contains(msg, "address already in use") {
		return fmt.Sprintf(" (another process listens on port %d, perhaps another NATS server or router: stop it, or set another port in this nats block)", port)
	}
	return ""
}

// supervise restarts the server after a store write error: the failed
// store refuses writes until it is opened again.
func (s *Server) supervise() {
	defer close(s.closed)
	wait := recoverAfter
	grow := time.NewTicker(storeCheckEvery)
	defer grow.Stop()
	var growErr string // the last reload error followDisk logged
	for {
		select {
		case <-s.closing:
			s.shutdown()
			return
		case <-grow.C:
			s.followDisk(&growErr)
			continue
		case <-s.critical:
		}
		select {
		case <-s.closing:
			s.shutdown()
			return
		case <-time.After(wait):
		}
		s.shutdown()
		ns, err := s.start()
		s.mu.Lock()
		if err == nil {
			s.ns, s.writeErr = ns, nil
			s.restarts++
		}
		s.mu.Unlock()
		if err != nil {
			wait = min(2*wait, time.Minute)
			s.log.Error("embedded NATS server did not restart; trying again", "error", err, "in", wait)
			s.signalCritical(err)
			continue
		}
		s.log.Warn("embedded NATS server restarted to recover from a JetStream store write error", "after", wait)
		wait = min(2*wait, time.Minute) // if the cause persists, the next error comes soon
	}
}

// followDisk raises JetStream's storage limit to the size of the store's
// filesystem once that has grown (a volume resized under the router): the
// limit is the filesystem's size at the start (serverOptions), and past it
// every message would be refused until a restart. nats-server takes a
// larger limit on a reload of the options the server was made with, which
// then differ in that alone. It runs on supervise's goroutine, the only one
// that replaces the server, so it reads s.ns without the lock and holds
// none across the reload (Healthy and the store's error reports take it).
func (s *Server) followDisk(said *string) {
	limit := storeLimit(s.storeDir)
	if limit <= s.opts.JetStreamMaxStore || s.ns == nil || s.started == nil {
		return
	}
	opts := s.started.Clone()
	opts.JetStreamMaxStore = limit
	if err := s.ns.ReloadOptions(opts); err != nil {
		if err.Error() != *said {
			*said = err.Error()
			s.log.Warn("the store's disk has grown, but the embedded server's storage limit could not follow it", "limit_bytes", s.opts.JetStreamMaxStore, "disk_bytes", limit, "error", err)
		}
		return
	}
	*said = ""
	s.log.Info("the store's disk has grown: the embedded server's storage limit follows it", "from_bytes", s.opts.JetStreamMaxStore, "to_bytes", limit)
	s.opts.JetStreamMaxStore, s.started = limit, opts
}

func (s *Server) shutdown() {
	s.mu.Lock()
	ns := s.ns
	s.mu.Unlock()
	if ns != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
	}
}

// signalCritical records a store write error and wakes supervise.
func (s *Server) signalCritical(err error) {
	s.mu.Lock()
	s.writeErr = err
	s.mu.Unlock()
	select {
	case s.critical <- struct{}{}:
	default:
	}
}

// Healthy reports a JetStream store write error the server has not yet
// recovered from, or JetStream being off.
func (s *Server) Healthy(context.Context) error {
	s.mu.Lock()
	ns, werr := s.ns, s.writeErr
	s.mu.Unlock()
	switch {
	case werr != nil:
		return fmt.Errorf("nats %s: embedded server: JetStream store write error (restarting the server to recover): %w", s.name, werr)
	case !ns.JetStreamEnabled():
		return fmt.Errorf("nats %s: embedded server: JetStream is not enabled", s.name)
	}
	return nil
}

// Restarts is how many times the server restarted to recover.
func (s *Server) Restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts
}

// Name is the nats block's name.
func (s *Server) Name() string { return s.name }

// ClientURL is the URL clients use to reach the server (nats://host:port),
// with the actual port when the config asked for a random one. An
// unspecified listen host (0.0.0.0, ::) is replaced by loopback.
func (s *Server) ClientURL() string {
	s.mu.Lock()
	raw := s.ns.ClientURL()
	s.mu.Unlock()
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	host, port := u.Hostname(), u.Port()
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = config.DefaultNATSHost
	}
	u.Host = net.JoinHostPort(host, port)
	return u.String()
}

// StoreDir is the JetStream store directory in use.
func (s *Server) StoreDir() string { return s.storeDir }

// Close shuts the server down and waits until it has stopped, or until ctx
// is done (the shutdown then continues in the background).
func (s *Server) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { close(s.closing) })
	select {
	case <-s.closed:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("nats: embedded server shutdown: %w", ctx.Err())
	}
}

// serverLogger routes nats-server's logs into hclog, and tells the Server
// of a JetStream store write error (critical), which it logs only.
type serverLogger struct {
	l        hclog.Logger
	critical func(error)
	fatal    atomic.Pointer[string] // the first fatal error: Start gives up, start shuts the server down
	// auth holds back the server's authentication errors to one line a
	// second: each failed CONNECT of a local user logged one (300 for
	// 300 tries: a security trial).
	auth logthrottle.Throttle
}

var _ server.Logger = (*serverLogger)(nil)

func (a *serverLogger) Noticef(format string, v ...any) {
	if a.l.IsDebug() {
		a.l.Debug(fmt.Sprintf(format, v...))
	}
}

func (a *serverLogger) Warnf(format string, v ...any) { a.l.Warn(fmt.Sprintf(format, v...)) }

// Fatalf logs at error level and keeps the first message for start;
// unlike the server's own logger it does not exit the process. Start gives
// up after it, and start shuts the server down and says why.
func (a *serverLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	a.l.Error(msg, "fatal", true)
	a.fatal.CompareAndSwap(nil, &msg)
}

func (a *serverLogger) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if strings.Contains(msg, "authentication error") || strings.Contains(msg, "Authorization Violation") {
		if held, ok := a.auth.Take("auth", time.Now()); ok {
			a.l.Error(msg, "like_it_since_last", held)
		}
		return
	}
	a.l.Error(msg)
	if a.critical != nil && strings.Contains(msg, "Critical write error") {
		a.critical(errors.New(msg))
	}
}

func (a *serverLogger) Debugf(format string, v ...any) {
	if a.l.IsTrace() {
		a.l.Trace(fmt.Sprintf(format, v...))
	}
}

func (a *serverLogger) Tracef(format string, v ...any) {
	if a.l.IsTrace() {
		a.l.Trace(fmt.Sprintf(format, v...))
	}
}

// SyncStore fsyncs every file and directory of the JetStream store. The
// server fsyncs only what it writes; after a crash of the process (not of
// the machine) what it recovered may still sit unsynced in the page cache,
// and a power cut soon after would take it — after the router had counted
// it as kept (docs/decisions/power-loss.md).
func (s *Server) SyncStore() error {
	return filepath.WalkDir(s.storeDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed meanwhile (a block the server compacted)
			}
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		return errors.Join(f.Sync(), f.Close())
	})
}
