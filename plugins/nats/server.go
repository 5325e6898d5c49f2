// Package nats is Switchyard's NATS plugin: an embedded in-process
// nats-server with JetStream (Server) and a sink that publishes events to
// JetStream or core NATS (Sink).
package nats

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/switchyard-router/switchyard/config"
)

// DefaultHost is where the embedded server listens when the config names no
// host: loopback, so local tools (nats CLI, services) can subscribe while the
// server stays off the network.
const DefaultHost = "127.0.0.1"

// readyTimeout bounds how long StartServer waits for the server to accept
// clients (JetStream recovers its store before that).
const readyTimeout = 30 * time.Second

// Server is an embedded nats-server with JetStream enabled, running inside
// the router's process.
type Server struct {
	ns       *server.Server
	storeDir string
	log      hclog.Logger

	closeOnce sync.Once
	closed    chan struct{}
}

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
		host = DefaultHost
	}
	storeDir := cfg.StoreDir
	if storeDir == "" {
		storeDir = filepath.Join(dataDir, "nats")
	}
	name := cfg.Name
	if name == "" {
		name = "embedded"
	}
	users, err := serverUsers(cfg)
	if err != nil {
		return nil, fmt.Errorf("nats %s: embedded server: %w", name, err)
	}
	opts := &server.Options{
		Users:      users,
		ServerName: "switchyard-" + name,
		Host:       host,
		Port:       cfg.Port,
		JetStream:  true,
		StoreDir:   storeDir,
		SyncAlways: cfg.SyncAlways,
		// The router owns the process's signals.
		NoSigs: true,
		Debug:  logger.IsTrace(),
		Trace:  logger.IsTrace(),
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats %s: embedded server: %w", name, err)
	}
	slog := logger.Named("nats-server")
	ns.SetLoggerV2(&serverLogger{l: slog}, logger.IsTrace(), logger.IsTrace(), false)
	ns.Start()
	if !ns.ReadyForConnections(readyTimeout) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("nats %s: embedded server not ready after %s (listen %s, store %s)",
			name, readyTimeout, net.JoinHostPort(host, strconv.Itoa(cfg.Port)), storeDir)
	}
	s := &Server{ns: ns, storeDir: storeDir, log: slog, closed: make(chan struct{})}
	logger.Info("embedded NATS server started", "name", name, "url", s.ClientURL(),
		"store_dir", storeDir, "version", server.VERSION)
	return s, nil
}

// ClientURL is the URL clients use to reach the server (nats://host:port),
// with the actual port when the config asked for a random one. An
// unspecified listen host (0.0.0.0, ::) is replaced by loopback.
func (s *Server) ClientURL() string {
	u, err := url.Parse(s.ns.ClientURL())
	if err != nil {
		return s.ns.ClientURL()
	}
	host, port := u.Hostname(), u.Port()
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = DefaultHost
	}
	u.Host = net.JoinHostPort(host, port)
	return u.String()
}

// StoreDir is the JetStream store directory in use.
func (s *Server) StoreDir() string { return s.storeDir }

// Close shuts the server down and waits until it has stopped, or until ctx
// is done (the shutdown then continues in the background).
func (s *Server) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		go func() {
			s.ns.Shutdown()
			s.ns.WaitForShutdown()
			close(s.closed)
		}()
	})
	select {
	case <-s.closed:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("nats: embedded server shutdown: %w", ctx.Err())
	}
}

// serverLogger routes nats-server's logs into hclog.
type serverLogger struct{ l hclog.Logger }

var _ server.Logger = (*serverLogger)(nil)

func (a *serverLogger) Noticef(format string, v ...any) {
	if a.l.IsDebug() {
		a.l.Debug(fmt.Sprintf(format, v...))
	}
}

func (a *serverLogger) Warnf(format string, v ...any) { a.l.Warn(fmt.Sprintf(format, v...)) }

// Fatalf logs at error level; unlike the server's own logger it does not
// exit the process (the server shuts itself down after a fatal error).
func (a *serverLogger) Fatalf(format string, v ...any) {
	a.l.Error(fmt.Sprintf(format, v...), "fatal", true)
}

func (a *serverLogger) Errorf(format string, v ...any) { a.l.Error(fmt.Sprintf(format, v...)) }

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
