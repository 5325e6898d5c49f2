package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// For every language, the folder `router plugin init` writes works as it
// is, with the commands its README gives: the doctor finds the toolchain,
// build.sh builds the module, the golden tests pass, and a router started on
// its policies.hcl takes the sample event and publishes it transformed to
// the stream (the greeting header added; in WAT, unchanged), while the noise
// event ends filtered. A language whose toolchain this machine lacks is
// skipped, saying so (.ci/install-toolchains installs them all).
func TestPluginInitEveryLanguage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a plugin in every language and runs the router binary")
	}
	bin := routerBinary(t)
	path := filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH")
	for _, lang := range pluginLangs {
		t.Run(lang, func(t *testing.T) {
			run := func(dir string, args ...string) string {
				t.Helper()
				cmd := exec.Command(args[0], args[1:]...)
				cmd.Dir, cmd.Env = dir, append(os.Environ(), "PATH="+path)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return string(out)
			}
			doctor := exec.Command(bin, "plugin", "doctor", "-lang", lang)
			if out, err := doctor.CombinedOutput(); err != nil {
				t.Skipf("SKIPPED: the %s toolchain is not here (.ci/install-toolchains installs it):\n%s", lang, out)
			}
			parent := t.TempDir()
			name := "hello-" + lang
			port := testkit.FreePort(t)
			run(parent, bin, "plugin", "init", "-lang", lang, "-port", fmt.Sprint(port), name)
			dir := filepath.Join(parent, name)
			if lang == "go" {
				// The SDK's copy compiles for tests on this machine
				// (sdk/go/README: `go test ./...`); it lacked check.go (a
				// new user's trial).
				run(dir, "go", "vet", "./...")
			}
			run(dir, "./build.sh")
			if out := run(dir, bin, "plugin", "test", name+".wasm", "-dir", "testdata", "-config", "greeting=hello"); !strings.Contains(out, "ok: 3 cases") {
				t.Fatalf("golden tests:\n%s", out)
			}
			run(dir, bin, "validate", "-config", "policies.hcl")

			router := exec.Command(bin, "run", "-config", "policies.hcl")
			router.Dir = dir
			logs, _ := os.Create(filepath.Join(parent, "router.log"))
			router.Stdout, router.Stderr = logs, logs
			if err := router.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { router.Process.Kill(); router.Wait() })
			c := testkit.UnixClient(filepath.Join(dir, "data", "router.sock"), 10*time.Second)
			waitHealthy(t, c)
			for _, ev := range []string{"hello", "noise"} {
				f, _ := os.Open(filepath.Join(dir, "testdata", ev+".event.json"))
				resp, err := c.Post("http://router/v1/events", "application/cloudevents+json", f)
				f.Close()
				if err != nil || resp.StatusCode != http.StatusAccepted {
					t.Fatalf("post %s: %v %v", ev, resp, err)
				}
				resp.Body.Close()
			}
			waitState(t, c, "hello-1", "delivered", 30*time.Second)
			waitState(t, c, "noise-1", "filtered", 30*time.Second)

			t.Chdir(dir) // the config's paths (the NATS password in ./data) are relative to the folder
			js := routerJetStream(t, "policies.hcl", "local", fmt.Sprintf("nats://127.0.0.1:%d", port))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stream, err := js.Stream(ctx, "demo")
			if err != nil {
				t.Fatal(err)
			}
			msg, err := stream.GetLastMsgForSubject(ctx, "demo.greeted")
			if err != nil {
				t.Fatal(err)
			}
			wantGreeting := "hello"
			if lang == "wat" {
				wantGreeting = "" // the WAT template passes the event on unchanged
			}
			if msg.Header.Get("ce-id") != "hello-1" || msg.Header.Get("ce-greeting") != wantGreeting || string(msg.Data) != `{"name": "Ada"}` {
				t.Fatalf("on the stream: %v %s", msg.Header, msg.Data)
			}
			if _, err := stream.GetLastMsgForSubject(ctx, "demo.noise"); err == nil {
				t.Fatal("the noise event was published")
			}
		})
	}
}

// The doctor names each missing tool and the command that installs it,
// apt-get update first, and fails; init refuses a bad name, an unknown
// language (named: doctor said only its usage) and a folder that is not
// empty.
func TestPluginDoctorAndInitRefusals(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // nothing on it
	t.Setenv("RUSTC", filepath.Join(t.TempDir(), "rustc"))
	var out bytes.Buffer
	err := NewMain(nil, &out, &out).Run(context.Background(), []string{"plugin", "doctor", "-lang", "rust"})
	if exitCode(err) != 1 || !strings.Contains(out.String(), "MISSING  rustc") ||
		!strings.Contains(out.String(), "sudo apt-get update && sudo apt-get install -y rustc libstd-rust-dev-wasm32 lld") {
		t.Fatalf("doctor without rustc: %v\n%s", err, out.String())
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "keep"), nil, 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"init", "-lang", "cobol", "x"}, `unknown language "cobol": router plugin init -lang go|c|rust|assemblyscript|wat NAME`},
		{[]string{"init", "x"}, `name the language: router plugin init -lang`},
		{[]string{"init", "-lang", "go"}, `name one plugin (given 0: [])`},
		{[]string{"init", "-lang", "go", "Bad Name"}, `plugin name "Bad Name"`},
		{[]string{"init", "-lang", "go", "-dir", dir, "x"}, "exists and is not empty"},
		{[]string{"doctor", "-lang", "golang"}, `unknown language "golang": router plugin doctor -lang go|c|rust|assemblyscript|wat`},
	} {
		out.Reset()
		err := NewMain(nil, &out, &out).Run(context.Background(), append([]string{"plugin"}, c.args...))
		if exitCode(err) != pluginExitError || !strings.Contains(err.Error(), c.want) {
			t.Errorf("plugin %v: %v (exit %d), want exit %d and %q", c.args, err, exitCode(err), pluginExitError, c.want)
		}
	}
}

// router plugin dev rebuilds and reloads on a change: the WAT plugin first
// sends demo.greeting on; after its source is edited to filter that type,
// the next event ends filtered, with no restart. A source that does not
// build changes nothing.
func TestPluginDevRebuildsAndReloads(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the router binary")
	}
	if _, err := exec.LookPath("wat2wasm"); err != nil {
		t.Skip("SKIPPED: no wat2wasm (wabt) on this machine; .ci/install-toolchains installs it")
	}
	bin := routerBinary(t)
	parent := t.TempDir()
	port := testkit.FreePort(t)
	out, err := exec.Command(bin, "plugin", "init", "-lang", "wat", "-dir", filepath.Join(parent, "dev"), "-port", fmt.Sprint(port), "dev").CombinedOutput()
	if err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	dir := filepath.Join(parent, "dev")
	dev := exec.Command(bin, "plugin", "dev")
	dev.Dir = dir
	logs := new(testkit.Buffer)
	dev.Stdout, dev.Stderr = logs, logs
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Process.Kill(); dev.Wait() })
	c := testkit.UnixClient(filepath.Join(dir, "data", "router.sock"), 10*time.Second)
	waitHealthy(t, c)
	post := func(id string) {
		t.Helper()
		body := strings.Replace(mustRead(t, filepath.Join(dir, "testdata", "hello.event.json")), `"hello-1"`, `"`+id+`"`, 1)
		resp, err := c.Post("http://router/v1/events", "application/cloudevents+json", strings.NewReader(body))
		if err != nil || resp.StatusCode != http.StatusAccepted {
			t.Fatalf("post %s: %v %v", id, resp, err)
		}
		resp.Body.Close()
	}
	post("before")
	waitState(t, c, "before", "delivered", 30*time.Second)

	src := filepath.Join(dir, "plugin.wat")
	good := mustRead(t, src)
	os.WriteFile(src, []byte(good+"\n(this does not parse"), 0o644)
	testkit.EventuallyWith(t, 20*time.Second, func() bool { return strings.Contains(logs.String(), "the build failed, the running module stays") },
		func() string { return "no failed build reported:\n" + logs.String() })
	os.WriteFile(src, []byte(strings.Replace(good, `(data (i32.const 16) ".noise")`, `(data (i32.const 16) "eeting")`, 1)), 0o644)
	testkit.EventuallyWith(t, 20*time.Second, func() bool { return strings.Contains(logs.String(), "configuration reloaded") },
		func() string { return "no reload:\n" + logs.String() })
	post("after")
	waitState(t, c, "after", "filtered", 30*time.Second)
}
