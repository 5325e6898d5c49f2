package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
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
	srv := &http.Server{Handler: mux}
	c.pprof = srv
	go srv.Serve(ln)
	c.log.Info("pprof", "addr", ln.Addr().String())
	return nil
}
