// Command fasthttpfloor is .ci/bench/httpfloor on github.com/valyala/fasthttp
// instead of net/http: a unix socket, a handler that reads the body and
// answers 202 with a small JSON body, nothing else. Loaded by `router
// bench` in turn with httpfloor, the two give what each HTTP server alone
// costs per request on the machine (BENCHMARKS.md, "Issue 14, session 13";
// docs/decisions/http-server.md). Its own module, so that the router's
// go.mod does not name fasthttp.
//
//	cd .ci/bench/fasthttpfloor && go build -o /tmp/fasthttpfloor .
//	/tmp/fasthttpfloor /tmp/floor.sock &
//	router bench -socket /tmp/floor.sock -batch 1 -c 64 -d 10s
//	# CPU: utime+stime of the fasthttpfloor process (/proc/PID/stat) ÷ requests
//
// router-prototype.patch, beside this file, is the prototype that served the
// router's POST /v1/events on fasthttp for the same section (not kept):
// `git apply` it at 7f29259, `go get github.com/valyala/fasthttp@v1.78.0`,
// and run the router with SY_FAST=1.
package main

import (
	"log"
	"net"
	"os"

	"github.com/valyala/fasthttp"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: fasthttpfloor SOCKET")
	}
	os.Remove(os.Args[1])
	l, err := net.Listen("unix", os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	accepted := []byte(`{"id":"0193b2b4-6a1e-7c3a-9d2f-4c1e2a3b4c5d","status":"accepted"}` + "\n")
	log.Fatal(fasthttp.Serve(l, func(ctx *fasthttp.RequestCtx) {
		switch string(ctx.Method()) + " " + string(ctx.Path()) {
		case "GET /healthz", "GET /readyz":
			ctx.WriteString("ok\n")
		case "POST /v1/events":
			_ = ctx.PostBody() // read whole before the handler runs
			ctx.SetContentType("application/json")
			ctx.SetStatusCode(fasthttp.StatusAccepted)
			ctx.Write(accepted)
		default:
			ctx.SetStatusCode(fasthttp.StatusNotFound)
		}
	}))
}
