// Command httpfloor is the floor under the router's single-event ingest:
// Go's net/http on a unix socket with a handler that reads the body and
// answers 202 with a small JSON body, nothing else. `router bench` loads
// it like the router (BENCHMARKS.md, "Issue 14, session 6"), and its CPU
// per request is what net/http alone costs on the machine.
//
//	go build -o /tmp/httpfloor ./.ci/bench/httpfloor
//	/tmp/httpfloor /tmp/floor.sock &
//	router bench -socket /tmp/floor.sock -batch 1 -c 64 -d 10s
//	# CPU: utime+stime of the httpfloor process (/proc/PID/stat) ÷ requests
package main

import (
	"io"
	"log"
	"net"
	"net/http"
	"os"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: httpfloor SOCKET")
	}
	os.Remove(os.Args[1])
	l, err := net.Listen("unix", os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	ok := func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) }
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", ok)
	mux.HandleFunc("GET /readyz", ok)
	mux.HandleFunc("POST /v1/events", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		w.Write([]byte(`{"id":"0193b2b4-6a1e-7c3a-9d2f-4c1e2a3b4c5d","status":"accepted"}` + "\n"))
	})
	log.Fatal(http.Serve(l, mux))
}
