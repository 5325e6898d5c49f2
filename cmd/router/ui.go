package main

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/api"
	"github.com/switchyard-router/switchyard/config"
)

// UICommand is `router ui`: the operator console of a router without a TCP
// listener. It serves a loopback port that proxies to the router's unix
// socket and prints a link with a one-time token, as Jupyter does: open it
// on the node, or through an SSH tunnel (ssh -L PORT:127.0.0.1:PORT node).
type UICommand struct {
	*Main
}

// Run serves until ctx ends.
func (c *UICommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("router ui", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	socket := fs.String("socket", config.DefaultSocket, "the router's unix socket")
	listen := fs.String("listen", "127.0.0.1:0", "the loopback address to serve on (port 0: any free port)")
	var ttl time.Duration
	durationVar(fs, &ttl, "link-ttl", 10*time.Minute, "how long the printed link can be used (once)")
	if err := parseFlagsOnly(fs, args); err != nil {
		return err
	}
	if ttl <= 0 {
		// A link that "works once, within 0s" works never.
		return &exitError{code: 2, err: fmt.Errorf("-link-ttl %s: give how long the link may be used, more than 0 (10m by default)", ttl)}
	}
	host, _, err := net.SplitHostPort(*listen)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-listen %q: router ui serves on a loopback address only (127.0.0.1:PORT); reach it from elsewhere over an SSH tunnel", *listen)
	}
	p, err := newUIProxy(*socket, ttl)
	if err != nil {
		return err
	}
	if err := p.checkRouter(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	p.origin = "http://" + ln.Addr().String()
	// Bounded as the router's own listeners are (a security review: this
	// one held any number of idle connections): a new client takes the
	// place of the one idle the longest, and a request must have come
	// whole within ReadTimeout (one that stalls holds its place no longer;
	// no write timeout: the console's live views stream).
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: time.Minute}
	served := api.LimitConnections(srv, ln, uiConnections)
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	fmt.Fprintf(c.Stdout, "Switchyard console: %s/ui/#token=%s\n", p.origin, p.link)
	fmt.Fprintf(c.Stdout, "(the link works once, within %s; Ctrl-C stops the console)\n", ttl)
	if err := srv.Serve(served); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// uiConnections bounds the connections router ui holds open: a browser
// opens six or so to one origin, and the console's live views keep some.
const uiConnections = 64

// uiProxy forwards the console's requests to the unix socket (where every
// caller is admin) once they show a session that the one-time link started.
// The session travels as a bearer header, never a cookie, so a page of
// another site cannot make requests with it.
type uiProxy struct {
	socket  string
	origin  string // http://127.0.0.1:PORT, set once listening
	proxy   *httputil.ReverseProxy
	link    string // the one-time token of the printed link
	expires time.Time

	mu       sync.Mutex
	used     bool
	sessions map[string]bool
}

func newUIProxy(socket string, ttl time.Duration) (*uiProxy, error) {
	link, err := randomToken()
	if err != nil {
		return nil, err
	}
	target := &url.URL{Scheme: "http", Host: "router"}
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}
	p := &uiProxy{socket: socket, link: link, expires: time.Now().Add(ttl), sessions: map[string]bool{}}
	p.proxy = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Header.Del("Authorization") // the socket needs none; the session stays here
			r.Out.Header.Del("Cookie")
		},
		Transport:     &http.Transport{DialContext: dial},
		FlushInterval: -1, // the live tail streams
	}
	return p, nil
}

// checkRouter fails early, with the reason, when no router answers.
func (p *uiProxy) checkRouter(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://router/healthz", nil)
	resp, err := p.proxy.Transport.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("cannot reach the router on its socket %s (is it running? -socket): %w", p.socket, err)
	}
	resp.Body.Close()
	return nil
}

func (p *uiProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A page of another site that resolves its own name to 127.0.0.1 (DNS
	// rebinding) sends its own Host; and a request with another Origin is
	// another site's.
	if r.Host != strings.TrimPrefix(p.origin, "http://") {
		uiProblem(w, http.StatusForbidden, switchyard.EFORBIDDEN, "this console answers only at "+p.origin)
		return
	}
	if o := r.Header.Get("Origin"); o != "" && o != p.origin {
		uiProblem(w, http.StatusForbidden, switchyard.EFORBIDDEN, "requests from another origin are refused")
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/ui/session":
		p.startSession(w, r)
	case (r.Method == http.MethodGet || r.Method == http.MethodHead) && (r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/")):
		p.proxy.ServeHTTP(w, r) // the console's files: public
	case p.hasSession(r):
		p.proxy.ServeHTTP(w, r)
	default:
		uiProblem(w, http.StatusUnauthorized, switchyard.EUNAUTHORIZED, "open the link router ui printed (each link works once)")
	}
}

// startSession trades the link's one-time token for a session.
func (p *uiProxy) startSession(w http.ResponseWriter, r *http.Request) {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	p.mu.Lock()
	ok := !p.used && time.Now().Before(p.expires) && subtle.ConstantTimeCompare([]byte(tok), []byte(p.link)) == 1
	var session string
	if ok {
		var err error
		if session, err = randomToken(); err != nil {
			p.mu.Unlock()
			uiProblem(w, http.StatusInternalServerError, switchyard.EINTERNAL, err.Error())
			return
		}
		p.used = true
		p.sessions[session] = true
	}
	p.mu.Unlock()
	if !ok {
		uiProblem(w, http.StatusUnauthorized, switchyard.EUNAUTHORIZED, "this link was used already or has expired: run router ui again")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(map[string]string{"session": session})
}

func (p *uiProxy) hasSession(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sessions[tok]
}

func uiProblem(w http.ResponseWriter, status int, code switchyard.Code, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"type": api.ProblemType(code), "title": http.StatusText(status), "status": status, "code": code, "detail": detail})
}

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
