package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/switchyard-router/switchyard/api"
	"github.com/switchyard-router/switchyard/config"
)

// servePprof serves Go's profiles on addr (listen { pprof = "..." }), for
// finding where a running router spends its time. It is a listener of its
// own, never the API's, so it cannot be exposed by accident with the API.
// It holds pprofConnections open at most, as the API's TCP listener holds
// max_connections (api.LimitConnections: a new client takes the place of
// the one idle the longest), and a client gets pprofReadTimeout for its
// request and pprofWriteTimeout for the answer: with neither, any local
// user, without a credential, kept ~20,000 idle connections open to it,
// every file descriptor the router had, and the router stopped taking
// events (a security trial); with the limit alone, eight requests whose
// bodies never came held every place for good (a review). pprof has no
// credential: a local user can still keep it busy for minutes (a
// profile's seconds are capped by the write timeout), never the router.
func (c *RunCommand) servePprof(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen pprof %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: loopbackHost(mux), ReadHeaderTimeout: pprofReadTimeout, ReadTimeout: pprofReadTimeout,
		WriteTimeout: pprofWriteTimeout, IdleTimeout: time.Minute}
	c.pprof = srv
	go srv.Serve(api.LimitConnections(srv, ln, pprofConnections))
	c.log.Info("pprof", "addr", ln.Addr().String())
	return nil
}

// pprofConnections, pprofReadTimeout and pprofWriteTimeout bound the
// pprof listener (servePprof): a few operators' tools at once, each
// request whole in seconds, its answer within minutes.
const (
	pprofConnections  = 8
	pprofReadTimeout  = 10 * time.Second
	pprofWriteTimeout = 5 * time.Minute // a CPU profile or trace of up to this long
)

// loopbackHost answers only requests whose Host names this machine's
// loopback (localhost, 127.0.0.1, ::1), 421 otherwise. pprof listens on
// loopback without a token, which keeps other machines out but not a web
// page in the operator's browser: through DNS rebinding, a name of the
// page's resolves to 127.0.0.1, and the browser sends that name as Host (a
// security trial read every goroutine's stack so). Go's own profiles
// answer any Host.
func loopbackHost(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = strings.TrimSuffix(strings.TrimPrefix(r.Host, "["), "]") // no port: "[::1]"
		}
		if !config.LoopbackHost(host) {
			http.Error(w, "pprof answers only a Host of localhost or a loopback address", http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}
