package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/switchyard-router/switchyard/api"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/internal/fsperm"
)

// apiFlags are the flags of the commands that talk to a running router:
// over its unix socket (the default), or over TCP with a bearer token.
type apiFlags struct {
	socket    string
	addr      string
	token     string
	tokenFile string
	timeout   time.Duration
	output    format
}

func (f *apiFlags) register(fs *flag.FlagSet) {
	f.registerUntimed(fs)
	durationVar(fs, &f.timeout, "timeout", 30*time.Second, "how long a request may take")
}

// registerUntimed registers every flag but -timeout, for a command whose
// request takes as long as it takes (router backup: its -h offered a
// -timeout it ignored).
func (f *apiFlags) registerUntimed(fs *flag.FlagSet) {
	fs.StringVar(&f.socket, "socket", config.DefaultSocket, "the router's unix socket")
	fs.StringVar(&f.addr, "addr", "", "the router's TCP listener (host:port or http(s)://host:port) instead of the socket")
	fs.StringVar(&f.token, "token", "", "bearer token for -addr; every local user sees it in ps: prefer -token-file or $SWITCHYARD_TOKEN")
	fs.StringVar(&f.tokenFile, "token-file", "", "read the bearer token from this file (with -addr)")
	formatVar(fs, &f.output, "o", "output", formatTable, formatJSON)
}

// apiClient is a small client of the router's HTTP API.
type apiClient struct {
	base  string // http://host:port, or http://router for the socket
	hc    *http.Client
	token string
	clock atomic.Pointer[routerClock] // the last answer's api.ClockHeader
}

// routerClock is the router's time as an answer gave it (api.ClockHeader),
// and when the answer came by this machine's clock, with its monotonic
// reading: now goes on from them.
type routerClock struct{ said, heard time.Time }

// now is the router's time, as far as its answers tell: the times the
// router stamps (a dead letter's, a sink's last error) are by its clock,
// which may run ahead of this machine's (docs/architecture.md, "A clock
// stepped back"), and an age counted by this one would read 0s. Before
// any answer, or after answers without the header (a router before it),
// it is this machine's time. The header names the second and is made
// once a second (api.Server.clockNow): an age may read up to two seconds
// short.
func (c *apiClient) now() time.Time {
	rc := c.clock.Load()
	if rc == nil {
		return time.Now()
	}
	return rc.said.Add(time.Since(rc.heard))
}

// hear takes the router's time from resp.
func (c *apiClient) hear(resp *http.Response) {
	if t, err := time.Parse(time.RFC3339, resp.Header.Get(api.ClockHeader)); err == nil {
		c.clock.Store(&routerClock{said: t, heard: time.Now()})
	}
}

func (f *apiFlags) client() (*apiClient, error) {
	c := &apiClient{hc: &http.Client{Timeout: f.timeout}}
	if f.addr == "" && (f.token != "" || f.tokenFile != "") {
		// The socket's callers are known by the file's permissions and
		// their uid; a token given for it was dropped without a word.
		return nil, &exitError{code: 2, err: errors.New("-token and -token-file are for -addr (the TCP listener): over the socket the router knows its caller by the socket's permissions")}
	}
	if f.addr == "" {
		sock := f.socket
		c.base = "http://router"
		c.hc.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}
		return c, nil
	}
	c.base = strings.TrimRight(f.addr, "/")
	if !strings.Contains(c.base, "://") {
		c.base = "http://" + c.base
	}
	u, err := url.Parse(c.base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("-addr %q: give host:port or http(s)://host:port", f.addr)
	}
	c.token = f.token
	if f.tokenFile != "" {
		b, err := fsperm.ReadFile(f.tokenFile, fsperm.MaxSecretFile, "a token file")
		if err != nil {
			return nil, err
		}
		c.token = strings.TrimSpace(string(b))
	}
	if c.token == "" {
		c.token = os.Getenv("SWITCHYARD_TOKEN")
	}
	return c, nil
}

// problemError is a problem+json answer of the router.
type problemError struct {
	Status int
	Code   string
	Detail string
}

func (e *problemError) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("%s (HTTP %d)", e.Code, e.Status)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Detail)
}

// do sends a request and returns the body of a 2xx answer; any other answer
// is a *problemError.
func (c *apiClient) do(ctx context.Context, method, path string, query url.Values, body any) ([]byte, error) {
	resp, err := c.send(ctx, method, path, query, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, 64<<20))
}

// send sends a request and returns a 2xx answer with its body unread (the
// caller closes it); any other answer is a *problemError.
func (c *apiClient) send(ctx context.Context, method, path string, query url.Values, body any) (*http.Response, error) {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Net == "unix" {
			return nil, fmt.Errorf("cannot reach the router on its socket (is it running? -socket): %w", err)
		}
		return nil, err
	}
	c.hear(resp)
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	pe := &problemError{Status: resp.StatusCode, Code: http.StatusText(resp.StatusCode)}
	var p struct {
		Code   string `json:"code"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(b, &p) == nil && p.Code != "" {
		pe.Code, pe.Detail = p.Code, p.Detail
	} else {
		pe.Detail = strings.TrimSpace(string(b))
	}
	return nil, pe
}

// getJSON decodes a 2xx answer into out.
func (c *apiClient) getJSON(ctx context.Context, path string, query url.Values, out any) ([]byte, error) {
	b, err := c.do(ctx, http.MethodGet, path, query, nil)
	if err != nil {
		return nil, err
	}
	return b, json.Unmarshal(b, out)
}

// writeIndented writes JSON indented, whatever its input spacing.
func writeIndented(w io.Writer, b []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, bytes.TrimSpace(b), "", "  "); err != nil {
		_, err = w.Write(b)
		return err
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// parseInterspersed parses flags that may come after positional arguments
// ("router dlq retry ID -socket x"), and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// parseFlagsOnly is parseInterspersed for a command that takes no
// arguments: a stray word is an error, not ignored (`router stats extra`).
func parseFlagsOnly(fs *flag.FlagSet, args []string) error {
	pos, err := parseInterspersed(fs, args)
	if err == nil && len(pos) > 0 {
		err = &exitError{code: 2, err: fmt.Errorf("%s takes no arguments, only flags: %q", fs.Name(), pos)}
	}
	return err
}

// shortAge renders how long ago t was, kubectl style: 45s, 12m, 3h, 5d.
func shortAge(t time.Time, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// shown is s with what a terminal would not print as itself written
// ⟨U+XXXX⟩, as the console writes it: control characters (a terminal's
// escape sequences) and the format characters that reorder or hide text
// (bidirectional overrides and isolates, directional marks, zero-width
// ones). `router dlq list` printed an id with U+202E reversed (a console
// trial).
func shown(s string) string {
	if !strings.ContainsFunc(s, hidden) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if hidden(r) {
			fmt.Fprintf(&b, "⟨U+%04X⟩", r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// hidden says whether r is one that shown writes as its code point.
func hidden(r rune) bool {
	return unicode.IsControl(r) || r == 0x061C || r >= 0x200B && r <= 0x200F || r >= 0x202A && r <= 0x202E ||
		r >= 0x2060 && r <= 0x2069 || r == 0xFEFF
}

// tableCell shortens s to n runes on one line, for a table cell, what
// would not show as itself made visible (shown).
func tableCell(s string, n int) string {
	s = shown(strings.Join(strings.Fields(s), " "))
	r := []rune(s)
	if len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
