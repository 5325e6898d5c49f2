package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"

	"github.com/switchyard-router/switchyard/config"
)

// servePprof serves Go's profiles on addr (listen { pprof = "..." }), for
// finding where a running router spends its time. It is a listener of its
// own, never the API's, so it cannot be exposed by accident with the API.
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
	srv := &http.Server{Handler: loopbackHost(mux)}
	c.pprof = srv
	go srv.Serve(ln)
	c.log.Info("pprof", "addr", ln.Addr().String())
	return nil
}

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
