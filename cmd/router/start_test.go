package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/plugins/wasm"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// routerStartWait is how long a test waits for a router it started to
// answer /healthz. Compiling plugins is kept out of it: a test that loads
// large plugins compiles them first, into the cache every test router
// shares (compilePlugins).
const routerStartWait = 30 * time.Second

// runRouter runs the router in process on path until the test ends (or
// the returned stop is called); the test fails if it does not start.
func runRouter(t *testing.T, path, sock string, args ...string) (stop func()) {
	t.Helper()
	stop, err := startRouter(t, path, sock, routerStartWait, args...)
	if err != nil {
		t.Fatal(err)
	}
	return stop
}

// startRouter runs the router in process and waits up to wait for it to
// answer /healthz. A router that stops, or is not healthy in time, is an
// error that says why, with the router's log: a start that outlasts the
// wait is cancelled, and the router's own error names the step it was
// still in.
func startRouter(t *testing.T, path, sock string, wait time.Duration, args ...string) (stop func(), err error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logs := new(testkit.Buffer)
	args = append([]string{"run", "-config", path, "-plugin-cache-dir", testPluginCache(t)}, args...)
	go func() { done <- NewMain(nil, io.Discard, logs).Run(ctx, args) }()
	select {
	case err := <-done:
		cancel()
		return nil, fmt.Errorf("router stopped at start: %v\n%s", err, logs.String())
	case ok := <-healthy(testkit.UnixClient(sock, 10*time.Second), wait):
		if !ok {
			cancel()
			return nil, fmt.Errorf("router not healthy after %s: %v\n%s", wait, <-done, logs.String())
		}
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("router: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop, nil
}

var pluginCache struct {
	once sync.Once
	dir  string
}

// testPluginCache is the compilation cache of every router the tests start:
// in the user's cache directory, so that it outlives one `go test` (the
// race run after the plain one, the next run) and no other user can plant
// machine code in it; a temporary directory where there is none.
func testPluginCache(t *testing.T) string {
	pluginCache.once.Do(func() {
		if dir, err := os.UserCacheDir(); err == nil {
			pluginCache.dir = filepath.Join(dir, "switchyard", "test-wasm-cache")
			if os.MkdirAll(pluginCache.dir, 0o700) == nil {
				return
			}
		}
		pluginCache.dir, _ = os.MkdirTemp("", "switchyard-test-wasm-cache")
	})
	if pluginCache.dir == "" {
		t.Fatal("no directory for the plugin compilation cache")
	}
	return pluginCache.dir
}

// compilePlugins compiles WebAssembly modules into testPluginCache, so that
// the routers a test starts load them in milliseconds. Compiling the Go
// example takes ~2 s, and 20–40 s under the race detector (wazero's
// compiler is Go code, instrumented like the rest): time a test may take
// once, but not inside a router's start.
func compilePlugins(t *testing.T, files ...string) {
	t.Helper()
	ctx := context.Background()
	rt, err := wasm.NewRuntime(ctx, wasm.RuntimeOptions{CacheDir: testPluginCache(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	for _, f := range files {
		bin, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := rt.Compile(ctx, bin); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		t.Logf("compiled %s in %s", filepath.Base(f), time.Since(start).Round(time.Millisecond))
	}
}

// A router whose start outlasts the test's wait fails the test with what
// it was still doing (here: compiling the Go example plugin on a cold
// cache, which takes seconds), not with the error the cancellation caused
// inside that step. The configuration has no broker: the steps before the
// plugin's take milliseconds, even under the race detector on a busy box
// (an embedded server's start took more than the wait there).
func TestSlowStartSaysWhy(t *testing.T) {
	wasmFile, err := filepath.Abs(filepath.Join("..", "..", "examples", "plugins", "route-go", "route.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "sy") // short: a unix socket path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path, sock := filepath.Join(dir, "policies.hcl"), filepath.Join(dir, "r.sock")
	os.WriteFile(path, []byte(fmt.Sprintf(`
listen  { socket = %q }
storage { path = %q }
plugin "route" {
  wasm   = %q
  config = {
    threshold         = "1000"
    large_destination = "nats.local:t.large"
    small_destination = "nats.local:t.small"
  }
}
`, sock, filepath.Join(dir, "r.db"), wasmFile)), 0o600)
	const wait = 500 * time.Millisecond
	_, err = startRouter(t, path, sock, wait, "-plugin-cache-dir", t.TempDir())
	if err == nil {
		t.Fatalf("the router started within %v on a cold compilation cache", wait)
	}
	msg, _, _ := strings.Cut(err.Error(), "\n")
	t.Log(msg)
	for _, want := range []string{"router not healthy after " + wait.String(), "start cancelled after", `while loading plugin "route" (`} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q: %s", want, msg)
		}
	}
}
