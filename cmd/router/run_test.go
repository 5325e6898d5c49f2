package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// writeConfig writes a config with an embedded NATS server on a free port
// into a short temp dir (unix socket paths must stay under ~100 bytes).
func writeConfig(t *testing.T, extra string) (path, sock string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sy")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock = filepath.Join(dir, "r.sock")
	src := `
listen  { socket = "` + sock + `" }
storage { path = "` + filepath.Join(dir, "r.db") + `" }
nats "local" {
  embedded = true
  port     = -1
  stream "events" { subjects = ["t.>"] }
}
event "t.order" {
  route {
    to      = "nats.local"
    subject = "t.orders"
  }
}
` + extra
	path = filepath.Join(dir, "policies.hcl")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, sock
}

// setStorage adds setting to the storage block of writeConfig's file at
// path (HCL has one storage block).
func setStorage(t *testing.T, path, setting string) {
	t.Helper()
	src := regexp.MustCompile(`storage \{ (path = "[^"]*") \}`).ReplaceAllString(mustRead(t, path), "storage {\n  "+setting+"\n  $1\n}")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
}

// validate passes a good file, names each problem of a bad one at
// file:line:col, and without a file in the folder says why router run
// starts anyway.
func TestValidate(t *testing.T) {
	good, _ := writeConfig(t, "")
	var out, errOut bytes.Buffer
	m := NewMain(nil, &out, &errOut)
	if err := m.Run(context.Background(), []string{"validate", "-config", good}); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	if !strings.Contains(out.String(), "ok") {
		t.Fatalf("output %q", out.String())
	}

	bad := filepath.Join(t.TempDir(), "bad.hcl")
	os.WriteFile(bad, []byte("event \"x\" {\n  batch_size = \"many\"\n}\nbogus {}\n"), 0o600)
	err := m.Run(context.Background(), []string{"validate", bad})
	if err == nil || exitCode(err) != 1 {
		t.Fatalf("bad config: %v", err)
	}
	for _, want := range []string{bad + ":2:", bad + ":4:1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}

	t.Chdir(t.TempDir())
	err = m.Run(context.Background(), []string{"validate"})
	if err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), "router run starts on the defaults built into the binary") {
		t.Errorf("validate without ./policies.hcl: %v", err)
	}
}

// run, one event through to JetStream, /metrics counts it, and a cancel
// (what SIGTERM does) shuts down cleanly: the socket is gone and the data
// file can be opened again at once.
func TestRunPublishesAndShutsDown(t *testing.T) {
	path, sock := writeConfig(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var logs testkit.Buffer
	m := NewMain(nil, io.Discard, &logs)
	go func() { done <- m.Run(ctx, []string{"run", "-config", path, "-log-level", "debug"}) }()

	c := testkit.UnixClient(sock, 10*time.Second)
	waitHealthy(t, c)
	resp, err := c.Post("http://r/v1/events", "application/cloudevents+json",
		strings.NewReader(`{"specversion":"1.0","type":"t.order","source":"/t","id":"o-1","data":{}}`))
	if err != nil || resp.StatusCode != 202 {
		t.Fatalf("post: %v %v", resp, err)
	}
	resp.Body.Close()
	var body string
	testkit.EventuallyWith(t, 10*time.Second, func() bool {
		body = get(t, c, "/v1/events/o-1")
		return strings.Contains(body, `"delivered"`) && strings.Contains(body, `"sequence": 1`)
	}, func() string { return "not delivered: " + body })
	// The loop counts a batch's metrics right after its commit, which a
	// GET can see first: poll for them.
	wantMetrics := []string{
		`switchyard_published_total{sink="nats.local",type="t.order"} 1`,
		`switchyard_events_ingested_total{type="t.order"} 1`,
		`switchyard_pending_events{type="t.order"} 0`,
		`switchyard_storage_fsyncs_total`,
		`switchyard_sink_up{sink="nats.local"} 1`,
	}
	var missing []string
	testkit.EventuallyWith(t, 10*time.Second, func() bool {
		metrics := get(t, c, "/metrics")
		missing = nil
		for _, want := range wantMetrics {
			if !strings.Contains(metrics, want) {
				missing = append(missing, want)
			}
		}
		return len(missing) == 0
	}, func() string { return "metrics lack " + strings.Join(missing, ", ") })
	if ready := get(t, c, "/readyz"); !strings.Contains(ready, `"ready": true`) {
		t.Errorf("readyz: %s", ready)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no shutdown within 30s")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
	// The data file is released: a second run starts at once.
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() { done <- NewMain(nil, io.Discard, io.Discard).Run(ctx2, []string{"run", "-config", path}) }()
	waitHealthy(t, testkit.UnixClient(sock, 10*time.Second))
	cancel2()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func waitHealthy(t *testing.T, c *http.Client) {
	t.Helper()
	if ok := <-healthy(c, 30*time.Second); !ok {
		t.Fatal("router did not become healthy")
	}
}

// healthy answers true once /healthz answers 200, false after timeout.
func healthy(c *http.Client, timeout time.Duration) <-chan bool {
	ch := make(chan bool, 1)
	go func() {
		deadline := time.Now().Add(timeout)
		for time.Now().Before(deadline) {
			if resp, err := c.Get("http://r/healthz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					ch <- true
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		ch <- false
	}()
	return ch
}

func get(t *testing.T, c *http.Client, path string) string {
	t.Helper()
	resp, err := c.Get("http://r" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// metricValue is the value of one series of the router's /metrics (its
// name with labels, as printed); the test fails when it is absent.
func metricValue(t *testing.T, c *http.Client, series string) float64 {
	t.Helper()
	for _, l := range strings.Split(get(t, c, "/metrics"), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %q", series, v)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no series %s", series)
	return 0
}

// pprof answers on its own listener, to a Host of loopback only.
func TestPprofListener(t *testing.T) {
	port := pprofRouter(t)
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/", port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("pprof index: %d", resp.StatusCode)
	}
	// A page's own name resolved to loopback (DNS rebinding) is not
	// answered; localhost is.
	url := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/goroutine?debug=2", port)
	if status, body := send(t, "GET", url, "", "", map[string]string{"Host": fmt.Sprintf("attacker.example:%d", port)}); status != 421 {
		t.Errorf("pprof with another Host: %d %.100s", status, body)
	}
	for _, host := range []string{fmt.Sprintf("localhost:%d", port), "[::1]", "127.0.0.1"} {
		if status, _ := send(t, "GET", url, "", "", map[string]string{"Host": host}); status != 200 {
			t.Errorf("pprof with Host %s: %d", host, status)
		}
	}
}

// The pprof listener holds a few connections at most: a local user who
// opens many and leaves them idle costs the router a handful of file
// descriptors, and a new request is still answered, in the place of the
// one idle the longest (a security trial: unbounded, ~20,000 idle
// connections took every descriptor, and the router stopped taking events).
func TestPprofHoldsFewConnections(t *testing.T) {
	port := pprofRouter(t)
	fds := func() int { d, _ := os.ReadDir("/proc/self/fd"); return len(d) }
	before := fds()
	const idle = 60 // each waits in the backlog for a place: the request after them, ~idle/8 seconds
	for range idle {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	time.Sleep(1500 * time.Millisecond) // past the first request's grace: each is idle
	url := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/", port)
	if status, _ := send(t, "GET", url, "", "", nil); status != 200 {
		t.Fatalf("pprof beside %d idle connections: %d", idle, status)
	}
	// This process holds the clients' ends too (idle of them); the
	// router's ends are what is past that.
	if held := fds() - before - idle; held > 20 {
		t.Fatalf("%d idle connections to pprof hold %d of the router's file descriptors", idle, held)
	}
}

// Requests to pprof whose bodies never come hold their places for the
// read timeout only: eight of them locked every other client out for good
// (a review: the limit frees only idle connections).
func TestPprofStalledRequestsLetGo(t *testing.T) {
	port := pprofRouter(t)
	for range pprofConnections {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /debug/pprof/symbol HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n")
	}
	time.Sleep(100 * time.Millisecond)
	c := &http.Client{Timeout: pprofReadTimeout + 15*time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/", port))
	if err != nil {
		t.Fatalf("pprof beside %d stalled requests: %v", pprofConnections, err)
	}
	resp.Body.Close()
}

// pprofRouter runs a router with pprof on, and returns pprof's port.
func pprofRouter(t *testing.T) int {
	t.Helper()
	path, sock := writeConfig(t, "")
	port := testkit.FreePort(t)
	src := strings.Replace(mustRead(t, path), fmt.Sprintf("listen  { socket = %q }", sock),
		fmt.Sprintf("listen {\n  socket = %q\n  pprof  = \"127.0.0.1:%d\"\n}", sock, port), 1)
	os.WriteFile(path, []byte(src), 0o600)
	runRouter(t, path, sock)
	return port
}

// send makes one request to url with the bearer token (if any) and the
// headers given — a "Host" one sets the request's Host — and returns the
// status and the body.
func send(t *testing.T, method, url, bearer, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if h, ok := header["Host"]; ok {
		req.Host = h
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// `router -h` lists the commands (a new user's first try), while a flag
// before -h keeps it run's: `router -config F -h` prints run's flags.
func TestHelpListsTheCommands(t *testing.T) {
	var out, errb bytes.Buffer
	if err := NewMain(nil, &out, &errb).Run(context.Background(), []string{"-h"}); err != nil {
		t.Fatal(err)
	}
	if s := errb.String(); !strings.Contains(s, "Commands:") || !strings.Contains(s, "router db compact FILE") {
		t.Fatalf("router -h:\n%s", s)
	}
	errb.Reset()
	err := NewMain(nil, &out, &errb).Run(context.Background(), []string{"-config", "x.hcl", "-h"})
	if exitCode(err) != 0 || !strings.Contains(errb.String(), "-shutdown-timeout") || strings.Contains(errb.String(), "Commands:") {
		t.Fatalf("router -config x.hcl -h: %v\n%s", err, errb.String())
	}
}

// A command's -h is its usage and exit 0 (help asked for and given; it was
// 2), and a bad flag value is told once, with the usage, and exit 2: main
// repeated the flag package's line after the usage.
func TestFlagErrorsAreToldOnce(t *testing.T) {
	for _, args := range [][]string{{"stats", "-h"}, {"dlq", "list", "-h"}, {"db", "check", "-h"}, {"run", "-h"}, {"plugin", "test", "-h"}, {"version", "-h"}} {
		var errb bytes.Buffer
		m := NewMain(nil, &bytes.Buffer{}, &errb)
		err := m.Run(context.Background(), args)
		if code := m.Exit(err); code != 0 || !strings.Contains(errb.String(), "Usage") || strings.Contains(errb.String(), "router: ") {
			t.Errorf("router %v: %v (exit %d)\n%s", args, err, code, errb.String())
		}
	}
	for _, args := range [][]string{{"stats", "-o", "yaml"}, {"run", "-shutdown-timeout", "30"}, {"db", "clock", "-frob", "x.db"}, {"version", "-json"}} {
		var errb bytes.Buffer
		m := NewMain(nil, &bytes.Buffer{}, &errb)
		err := m.Run(context.Background(), args)
		if code := m.Exit(err); code != 2 || strings.Count(errb.String(), err.Error()) != 1 || !strings.Contains(errb.String(), "Usage of router") {
			t.Errorf("router %v: %v (exit %d)\n%s", args, err, code, errb.String())
		}
	}
	// A duration without its unit says what a duration is (the flag
	// package said "parse error").
	for _, args := range [][]string{{"run", "-shutdown-timeout", "30"}, {"stats", "-timeout", "5"}, {"ui", "-link-ttl", "10"}, {"validate", "-timeout", "x"}, {"bench", "-d", "3"}} {
		err := NewMain(nil, &bytes.Buffer{}, &bytes.Buffer{}).Run(context.Background(), args)
		if err == nil || !strings.Contains(err.Error(), "a duration is a number with its unit: 30s") {
			t.Errorf("router %v: %v", args, err)
		}
	}
	// Any other error is said once, by Exit.
	var errb bytes.Buffer
	m := NewMain(nil, &bytes.Buffer{}, &errb)
	if code := m.Exit(m.Run(context.Background(), []string{"frob"})); code != 2 || strings.Count(errb.String(), `router: unknown command "frob"`) != 1 {
		t.Errorf("router frob: exit %d\n%s", code, errb.String())
	}
	errb.Reset()
	err := NewMain(nil, &bytes.Buffer{}, &errb).Run(context.Background(), []string{"plugin", "test", "-frob"})
	if exitCode(err) != pluginExitError || !told(err) {
		t.Errorf("router plugin test -frob: %v (exit %d, told %v): want exit %d, told", err, exitCode(err), told(err), pluginExitError)
	}
}

// router run refuses what it can find wrong without starting anything
// before it starts anything: a tokens file others may read (named at
// file:line:col), a unix socket another process serves on. No data file
// and no embedded NATS server was made.
func TestRunChecksFirst(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, tokens, sock string)
		want  []string
	}{
		{"a tokens file of mode 0644", func(t *testing.T, tokens, _ string) {
			if err := os.Chmod(tokens, 0o644); err != nil {
				t.Fatal(err)
			}
		}, []string{":4:17: tokens_file", "may be read by others"}},
		{"a socket served", func(t *testing.T, _, sock string) {
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
		}, []string{"another process is serving on this socket"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			tokens, sock := filepath.Join(dir, "tokens.json"), filepath.Join(dir, "r.sock")
			if err := os.WriteFile(tokens, []byte(`{"tokens":[{"token":"a-long-random-secret-for-acme","tenant":"acme"}]}`), 0o600); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "policies.hcl")
			src := fmt.Sprintf(`listen {
  socket      = %q
  http        = "127.0.0.1:0"
  tokens_file = %q
}
storage { path = %q }
nats "local" {
  embedded = true
  port     = -1
  stream "events" { subjects = ["t.>"] }
}
`, sock, tokens, filepath.Join(dir, "data", "r.db"))
			if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
				t.Fatal(err)
			}
			c.setup(t, tokens, sock)
			var logs testkit.Buffer
			err := NewMain(nil, io.Discard, &logs).Run(context.Background(), []string{"run", "-config", path})
			for _, want := range c.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("run: %v, want %q", err, want)
				}
			}
			if _, serr := os.Stat(filepath.Join(dir, "data")); !os.IsNotExist(serr) {
				t.Errorf("the data directory was made first: %v", serr)
			}
			if strings.Contains(logs.String(), "NATS server started") {
				t.Errorf("the embedded NATS server started first:\n%s", logs.String())
			}
		})
	}
}

// router run refuses flags it cannot honour instead of starting on a
// fallback: an unknown log level or format (it logged at info, as text), a
// shutdown timeout of zero or less (every stop then ran out of time, and
// the next start checked the whole data file).
func TestRunRefusesBadFlags(t *testing.T) {
	for flags, want := range map[string]string{
		"-log-level bogus":      `-log-level "bogus": use trace, debug, info, warn, error or off`,
		"-log-format xml":       `invalid value "xml" for flag -log-format: use text or json`,
		"-shutdown-timeout -1s": `-shutdown-timeout -1s: a graceful stop needs some time`,
		"-shutdown-timeout 0s":  `-shutdown-timeout 0s`,
	} {
		c := &RunCommand{Main: NewMain(nil, io.Discard, io.Discard)}
		if err := c.ParseFlags(strings.Fields(flags)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", flags, err, want)
		}
	}
	c := &RunCommand{Main: NewMain(nil, io.Discard, io.Discard)}
	if err := c.ParseFlags(strings.Fields("-log-level WARN -log-format json -shutdown-timeout 5s")); err != nil {
		t.Errorf("good flags: %v", err)
	}
	// Set by code (router plugin dev builds its RunCommand), not by the flag.
	c.LogFormat = "xml"
	if err := c.checkFlags(); err == nil || err.Error() != `-log-format "xml": use text or json` {
		t.Errorf("a log format set by code: %v", err)
	}
}
