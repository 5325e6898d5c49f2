package testkit

import (
	"context"
	"net"
	"net/http"
	"time"
)

// UnixClient is an HTTP client of the router's API on the unix socket
// sock, each request held to timeout (0: none), keeping idle connections
// as http.Transport does by default (two) unless keep says more (tests
// that send from many goroutines).
func UnixClient(sock string, timeout time.Duration, keep ...int) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
		MaxIdleConnsPerHost: append(keep, 0)[0],
	}}
}
