package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// `router validate` refuses, with the file:line:col of the mistake, what
// used to pass it and fail only at run time (or never): plugin files that
// are missing or not WebAssembly, absurd sizes and numbers, a bad address,
// a missing tokens_file, a file of secrets others may read, a route no
// stream captures, two streams that capture one subject, a data file or a
// store router run could not write, a data file or socket folder router
// run refuses (anyone may write it, or it is no regular file; a socket
// folder even when sticky: another user could answer in its place), a plugin
// cache others may write in, an inbox no
// stream (or several) stores; and `router run`
// names a plugin that does not load at its block's file:line:col too.
func TestValidateFindsWhatParsingCannot(t *testing.T) {
	dir := t.TempDir()
	notWasm := filepath.Join(dir, "not.wasm")
	os.WriteFile(notWasm, []byte("#!/bin/sh\necho hello\n"), 0o644)
	good := filepath.Join("..", "..", "examples", "plugins", "passthrough-wat", "passthrough.wasm")
	readable := filepath.Join(dir, "client.key")
	os.WriteFile(readable, []byte("key"), 0o644)
	aFile := filepath.Join(dir, "a-file")
	os.WriteFile(aFile, nil, 0o600)
	open := filepath.Join(dir, "open")
	os.Mkdir(open, 0o755)
	os.Chmod(open, 0o777)
	sticky := filepath.Join(dir, "sticky")
	os.Mkdir(sticky, 0o755)
	os.Chmod(sticky, 0o777|os.ModeSticky)
	openCache := filepath.Join(dir, "cached", "wasm-cache")
	os.MkdirAll(openCache, 0o700)
	os.Chmod(openCache, 0o777)
	cases := []struct{ name, src, want string }{
		{"a plugin cache others may write", fmt.Sprintf("storage { path = %q }\nplugin \"p\" { wasm = %q }", filepath.Join(dir, "cached", "router.db"), good),
			fmt.Sprintf(`:1:18: the plugin cache %q: router run would refuse it: %s may be written by other users than its owner (mode 0777)`, openCache, openCache)},
		{"a data file under a file", fmt.Sprintf("storage { path = %q }", filepath.Join(aFile, "router.db")),
			fmt.Sprintf(`:1:18: storage.path %q: router run as this user could not write it: %s is not a folder`, filepath.Join(aFile, "router.db"), aFile)},
		{"a data file that is a folder", fmt.Sprintf("storage { path = %q }", dir),
			fmt.Sprintf(`:1:18: storage.path %q: router run as this user could not write it: is a directory`, dir)},
		{"a store under a file", fmt.Sprintf("nats \"local\" {\n  embedded  = true\n  store_dir = %q\n}", filepath.Join(aFile, "nats")),
			fmt.Sprintf(`:3:15: the store_dir of nats "local" %q: router run as this user could not write it: %s is not a folder`, filepath.Join(aFile, "nats"), aFile)},
		{"a key others may read", fmt.Sprintf("kafka \"k\" {\n  brokers = [\"127.0.0.1:9092\"]\n  tls {\n    cert_file = \"c.pem\"\n    key_file  = %q\n  }\n}", readable),
			`:5:17: key_file: ` + readable + ` may be read by others than its owner (mode 0644): chmod 600`},
		{"missing plugin", `plugin "p" { wasm = "/nonexistent/p.wasm" }`, `:1:21: plugin "p": open /nonexistent/p.wasm: no such file or directory`},
		{"not wasm", fmt.Sprintf(`plugin "p" { wasm = %q }`, notWasm), `:1:21: plugin "p" (` + notWasm + `): not a valid WebAssembly module`},
		{"plugin memory", fmt.Sprintf("plugin \"p\" {\n  wasm = %q\n  limits { memory = \"100GiB\" }\n}", good), `:3:21: Invalid size: memory: 100GiB is over the limit of 4GiB`},
		{"missing tokens_file", "listen {\n  http = \"127.0.0.1:8080\"\n  tokens_file = \"/nonexistent/tokens.json\"\n}", `:3:17: tokens_file: stat /nonexistent/tokens.json: no such file or directory`},
		{"http address", "listen {\n  http = \"not-an-address\"\n  tokens_file = \"t\"\n}", `:2:10: Invalid address`},
		{"max_body", "listen {\n  max_body = \"100GB\"\n}", `:2:14: Invalid size: max_body: 100GB is over the limit of 256MiB`},
		{"batch_size", "defaults {\n  batch_size = 99999999999\n}", `:2:16: Invalid value: batch_size must be at most 100000`},
		{"plugins and no sink", fmt.Sprintf("plugin \"p\" { wasm = %q }\nevent \"x\" {\n  plugins = [\"p\"]\n}", good),
			`:2:1: event "x" runs plugins, but the configuration has no sink`},
		{"overlapping streams", "nats \"local\" {\n  embedded = true\n  stream \"a\" { subjects = [\"x.>\"] }\n  stream \"b\" { subjects = [\"y.*\", \"x.a\"] }\n}",
			`:4:3: nats "local": stream "b" captures "x.a", which overlaps "x.>" of stream "a": JetStream refuses two streams that capture one subject`},
		{"a data file that is a device", `storage { path = "/dev/null" }`,
			`:1:18: storage.path "/dev/null": router run would refuse it: /dev/null is not a regular file (a device): name a data file, as storage.path does (./data/router.db by default)`},
		{"a data folder anyone may write", fmt.Sprintf("storage { path = %q }", filepath.Join(open, "router.db")),
			fmt.Sprintf(`:1:18: storage.path %q: router run would refuse it: %s may be written by anyone (mode 0777)`, filepath.Join(open, "router.db"), open)},
		{"a socket folder anyone may write", fmt.Sprintf("listen { socket = %q }", filepath.Join(open, "r.sock")),
			fmt.Sprintf(`:1:1: listen.socket %q: router run would refuse it (unless systemd passes the socket): listen %s: %s may be written by anyone (mode 0777)`, filepath.Join(open, "r.sock"), filepath.Join(open, "r.sock"), open)},
		{"a socket folder anyone may write, sticky", fmt.Sprintf("listen { socket = %q }", filepath.Join(sticky, "r.sock")),
			fmt.Sprintf(`:1:1: listen.socket %q: router run would refuse it (unless systemd passes the socket): listen %s: %s may be written by anyone (mode 0777, sticky): another user could put a socket of theirs at the path`, filepath.Join(sticky, "r.sock"), filepath.Join(sticky, "r.sock"), sticky)},
		{"a file where the socket goes", fmt.Sprintf("listen { socket = %q }", aFile),
			fmt.Sprintf(`:1:1: listen.socket %q: router run would refuse it (unless systemd passes the socket): listen %s: a regular file (0 bytes) is there, not a socket`, aFile, aFile)},
		{"an inbox no stream stores", "nats \"local\" {\n  embedded = true\n  stream \"s\" { subjects = [\"a.>\"] }\n}\ninbox \"in\" {\n  from    = \"nats.local\"\n  subject = \"b.>\"\n}",
			`:5:1: inbox "in" reads subject "b.>", which no stream of nats "local" stores: router run would refuse to start`},
		{"an inbox two streams store", "nats \"local\" {\n  embedded = true\n  stream \"s\" { subjects = [\"a.x\"] }\n  stream \"t\" { subjects = [\"a.y\"] }\n}\ninbox \"in\" {\n  from    = \"nats.local\"\n  subject = \"a.>\"\n}",
			`:6:1: inbox "in" reads subject "a.>", which several streams of nats "local" store (s, t)`},
		{"route no stream captures", "nats \"local\" {\n  embedded = true\n  stream \"s\" { subjects = [\"a.>\"] }\n}\nevent \"x\" {\n  route {\n    to      = \"nats.local\"\n    subject = \"b.x\"\n  }\n}",
			`:5:1: event "x" routes to subject "b.x", which no stream of nats "local" captures`},
	}
	if os.Geteuid() != 0 { // root writes a folder of mode 0500 all the same
		locked := filepath.Join(dir, "locked")
		os.Mkdir(locked, 0o500)
		cases = append(cases, struct{ name, src, want string }{"a data directory this user cannot write",
			fmt.Sprintf("storage { path = %q }", filepath.Join(locked, "data", "router.db")),
			fmt.Sprintf(`:1:18: storage.path %q: router run as this user could not write it: cannot create a file in %s: permission denied`, filepath.Join(locked, "data", "router.db"), locked)})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "policies.hcl")
			os.WriteFile(path, []byte(tc.src+"\n"), 0o600)
			var out bytes.Buffer
			err := NewMain(nil, &out, &out).Run(context.Background(), []string{"validate", "-config", path})
			if err == nil || exitCode(err) != 1 {
				t.Fatalf("validate passed: %v\n%s", err, out.String())
			}
			if !strings.Contains(err.Error(), path+tc.want) {
				t.Errorf("the error does not say %q:\n%v", path+tc.want, err)
			}
		})
	}
	// The good plugin with a stream that captures its route passes.
	path := filepath.Join(t.TempDir(), "policies.hcl")
	os.WriteFile(path, []byte(fmt.Sprintf(`
nats "local" {
  embedded = true
  stream "s" { subjects = ["a.>"] }
}
plugin "p" { wasm = %q }
event "x" {
  plugins = ["p"]
  route {
    to      = "nats.local"
    subject = "a.x"
  }
}
`, good)), 0o600)
	var out bytes.Buffer
	if err := NewMain(nil, &out, &out).Run(context.Background(), []string{"validate", "-config", path}); err != nil {
		t.Fatalf("a good config: %v\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "warning") {
		t.Fatalf("a good config has warnings:\n%s", out.String())
	}
	// `router run` names the plugin block's place as validate does.
	runDir := t.TempDir()
	path = filepath.Join(runDir, "policies.hcl")
	os.WriteFile(path, []byte(fmt.Sprintf("listen { socket = %q }\nstorage { path = %q }\nplugin \"p\" { wasm = %q }\n",
		filepath.Join(runDir, "r.sock"), filepath.Join(runDir, "r.db"), notWasm)), 0o600)
	if err, out := runBinary(t, 30*time.Second, "run", "-config", path); err == nil || !strings.Contains(out, path+`:3:21: plugin "p" (`+notWasm+`): not a valid WebAssembly module`) {
		t.Errorf("router run on a plugin that is not WebAssembly: %v\n%s", err, out)
	}
}

// A type that runs plugins but has no route passes validate with a
// warning at its block: an output that names no destination would go to
// the DLQ. So does one with neither, each of whose events would (it
// passed unsaid: a reload trial), and one whose max_processing_time is
// under its sink's publish_timeout (a trial's 1 ms: duplicates).
func TestValidateWarnsPluginsWithoutRoute(t *testing.T) {
	good := filepath.Join("..", "..", "examples", "plugins", "passthrough-wat", "passthrough.wasm")
	path := filepath.Join(t.TempDir(), "policies.hcl")
	os.WriteFile(path, []byte(fmt.Sprintf(`nats "local" {
  embedded = true
  stream "s" { subjects = ["a.>"] }
}
plugin "p" { wasm = %q }
event "x" {
  plugins = ["p"]
}
event "y" {}
event "z" {
  max_processing_time = "1ms"
  route {
    to      = "nats.local"
    subject = "a.z"
  }
}
inbox "slow" {
  from                = "nats.local"
  subject             = "a.in"
  max_processing_time = "1s"
  deliver {
    url     = "http://127.0.0.1:9/in"
    timeout = "10s"
  }
}
`, good)), 0o600)
	var out bytes.Buffer
	if err := NewMain(nil, &out, &out).Run(context.Background(), []string{"validate", "-config", path}); err != nil {
		t.Fatalf("validate: %v\n%s", err, out.String())
	}
	if want := path + `:6:1: warning: event "x" runs plugins [p] but has no route block`; !strings.Contains(out.String(), want) {
		t.Fatalf("validate said:\n%s\nwant a line with %s", out.String(), want)
	}
	if want := path + `:9:1: warning: event "y" has no route block and runs no plugins`; !strings.Contains(out.String(), want) {
		t.Fatalf("validate said:\n%s\nwant a line with %s", out.String(), want)
	}
	if want := path + `:10:1: warning: event "z" has max_processing_time 1ms, under nats.local's publish_timeout 10s`; !strings.Contains(out.String(), want) {
		t.Fatalf("validate said:\n%s\nwant a line with %s", out.String(), want)
	}
	if want := path + `:17:1: warning: inbox "slow" has max_processing_time 1s, under its deliver timeout 10s`; !strings.Contains(out.String(), want) {
		t.Fatalf("validate said:\n%s\nwant a line with %s", out.String(), want)
	}
}

// validate loads the plugins without a compilation cache when this user
// cannot make one (a service user without a home: it failed, "mkdir
// /home/sytr: permission denied", in a security trial).
func TestValidateWithoutAHome(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "/proc/no-home")
	good := filepath.Join("..", "..", "examples", "plugins", "passthrough-wat", "passthrough.wasm")
	path := filepath.Join(t.TempDir(), "policies.hcl")
	os.WriteFile(path, []byte(fmt.Sprintf(`plugin "p" { wasm = %q }
event "x" {
  plugins = ["p"]
  route {
    to      = "nats.local"
    subject = "x"
  }
}
nats "local" {
  embedded = true
  stream "s" { subjects = ["x"] }
}
`, good)), 0o600)
	var out bytes.Buffer
	if err := NewMain(nil, &out, &out).Run(context.Background(), []string{"validate", "-config", path}); err != nil {
		t.Fatalf("validate without a home: %v\n%s", err, out.String())
	}
}

// A tenant block that bounds no one passes validate with a warning at
// it: one naming no tenant of the tokens file (a typo leaves the tenant
// meant to "*"'s bucket, or none), and every one without a TCP listener.
func TestValidateWarnsTenantBlocksThatBoundNoOne(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.json")
	os.WriteFile(tokens, []byte(`{"tokens": [{"token": "acme-token-0123456789", "tenant": "acme"}, {"token": "ops-token-0123456789", "tenant": "ops", "admin": true}]}`), 0o600)
	validate := func(listen string) string {
		path := filepath.Join(dir, "policies.hcl")
		os.WriteFile(path, []byte(listen+`
tenant "acme" { rate = 5 }
tenant "acmee" { rate = 5 }
tenant "ops" { rate = 5 }
tenant "*" { rate = 5 }
event "x" {}
`), 0o600)
		var out bytes.Buffer
		if err := NewMain(nil, &out, &out).Run(context.Background(), []string{"validate", "-config", path}); err != nil {
			t.Fatalf("validate: %v\n%s", err, out.String())
		}
		return strings.ReplaceAll(out.String(), path, "p.hcl")
	}
	out := validate(`listen {
  http        = "127.0.0.1:0"
  tokens_file = "` + tokens + `"
}`)
	for _, want := range []string{
		`p.hcl:6:1: warning: tenant "acmee" is no tenant of tokens_file's tokens (acme): the block bounds no one`,
		`p.hcl:7:1: warning: tenant "ops" is no tenant of tokens_file's tokens (acme)`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("validate said:\n%s\nwant a line with %s", out, want)
		}
	}
	if strings.Contains(out, `tenant "acme" is`) || strings.Contains(out, `tenant "*" is`) {
		t.Errorf("a warning for a block that bounds someone:\n%s", out)
	}
	if out := validate(""); !strings.Contains(out, `p.hcl:2:1: warning: tenant "acme" bounds no one: tenant blocks bound tenants' tokens on the TCP listener (listen.http), which is off`) {
		t.Errorf("without a TCP listener, validate said:\n%s", out)
	}
}

// validate names each folder router run would make, the outermost one
// missing, once with everything under it: a typo in an absolute path is
// seen before run makes a tree of folders for it.
func TestValidateNamesTheFoldersRunMakes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policies.hcl")
	os.WriteFile(path, []byte(fmt.Sprintf(`listen {
  socket = "%[1]s/run/switchyrd/api/r.sock"
}
storage {
  path = "%[1]s/data/router.db"
}
`, dir)), 0o600)
	var out bytes.Buffer
	if err := NewMain(nil, &out, &out).Run(context.Background(), []string{"validate", "-config", path}); err != nil {
		t.Fatalf("validate: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		path + `:1:1: note: the folder ` + dir + `/run does not exist; router run makes it, for listen.socket "` + dir + `/run/switchyrd/api/r.sock"` + "\n",
		path + `:5:10: note: the folder ` + dir + `/data does not exist; router run makes it, for storage.path "` + dir + `/data/router.db"` + "\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("validate said:\n%s\nwant a line %q", out.String(), want)
		}
	}
	os.MkdirAll(filepath.Join(dir, "run", "switchyrd", "api"), 0o750)
	os.Mkdir(filepath.Join(dir, "data"), 0o750)
	out.Reset()
	if err := NewMain(nil, &out, &out).Run(context.Background(), []string{"validate", "-config", path}); err != nil || strings.Contains(out.String(), "note:") {
		t.Fatalf("validate with every folder there: %v\n%s", err, out.String())
	}
}

// `router validate -check-sinks` says which sinks it could not connect to
// because they do not exist yet: an embedded server starts with the router.
func TestValidateCheckSinksEmbedded(t *testing.T) {
	var out bytes.Buffer
	if err := NewMain(nil, &out, &out).Run(context.Background(), []string{"validate", "-config", "../../policies.hcl", "-check-sinks"}); err != nil {
		t.Fatalf("-check-sinks: %v\n%s", err, out.String())
	}
	if want := "nats.local: embedded (it starts with the router): not checked\n"; !strings.Contains(out.String(), want) {
		t.Fatalf("validate said:\n%s\nwant a line %q", out.String(), want)
	}
}

// An empty configuration validates with a warning that the router would
// take no event (it said ok, and ran refusing every event: a reload trial).
func TestValidateWarnsOfAnEmptyConfiguration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.hcl")
	os.WriteFile(path, nil, 0o600)
	var out bytes.Buffer
	if err := NewMain(nil, &out, &out).Run(context.Background(), []string{"validate", "-config", path}); err != nil {
		t.Fatalf("validate: %v\n%s", err, out.String())
	}
	if want := path + ":1:1: warning: no event block and no inbox"; !strings.Contains(out.String(), want) {
		t.Fatalf("validate said:\n%s\nwant a line with %s", out.String(), want)
	}
}

// validate says where an environment variable of a secret is named that
// is not set, or is empty, as run would refuse it: it said ok, and run
// failed without a place (a reload trial).
func TestValidateChecksSecretEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.hcl")
	os.WriteFile(path, []byte(`nats "ext" {
  url       = "nats://127.0.0.1:4222"
  token_env = "SY_TEST_NO_TOKEN"
}
`), 0o600)
	t.Setenv("SY_TEST_NO_TOKEN", "")
	os.Unsetenv("SY_TEST_NO_TOKEN")
	for _, c := range []struct {
		set  bool
		want string
	}{
		{false, path + ":3:15: token_env: the environment variable SY_TEST_NO_TOKEN is not set"},
		{true, path + ":3:15: token_env: the environment variable SY_TEST_NO_TOKEN is empty"},
	} {
		if c.set {
			t.Setenv("SY_TEST_NO_TOKEN", "")
		}
		var out bytes.Buffer
		err := NewMain(nil, &out, &out).Run(context.Background(), []string{"validate", "-config", path})
		if err == nil || !strings.Contains(out.String()+err.Error(), c.want) {
			t.Errorf("validate: %v\n%s\nwant a line with %s", err, out.String(), c.want)
		}
	}
}

// `router validate -check-sinks` asks an external JetStream server which
// stream captures each routed subject, and fails on one that none does; a
// subject a stream block of the configuration captures is run's to set up
// (it failed the check: a reload trial).
func TestValidateCheckSinksStreams(t *testing.T) {
	ns := jetStreamServer(t, -1)
	js := testkit.JetStream(t, ns.ClientURL())
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "orders", Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "policies.hcl")
	os.WriteFile(path, []byte(fmt.Sprintf(`
nats "ext" {
  url = %q
  stream "cfgtest" { subjects = ["c.>"] }
}
event "a" {
  route {
    to      = "nats.ext"
    subject = "orders.created"
  }
}
event "c" {
  route {
    to      = "nats.ext"
    subject = "c.a"
  }
}
event "b" {
  route {
    to      = "nats.ext"
    subject = "payments.done"
  }
}
`, ns.ClientURL())), 0o600)
	var out bytes.Buffer
	err := NewMain(nil, &out, &out).Run(context.Background(), []string{"validate", "-config", path, "-check-sinks"})
	if err == nil || !strings.Contains(out.String(), `nats.ext: no stream captures the routed subject "payments.done"`) {
		t.Fatalf("-check-sinks: %v\n%s", err, out.String())
	}
	if strings.Contains(out.String(), `"orders.created"`) || strings.Contains(out.String(), `"c.a"`) {
		t.Errorf("a captured subject was reported:\n%s", out.String())
	}
}

// Counts read in number: "1 event type", "2 event types", "0 problems"
// (router validate said "1 event types", db check "1 problems").
func TestCounted(t *testing.T) {
	for n, want := range map[int]string{0: "0 problems", 1: "1 problem", 2: "2 problems", 11: "11 problems"} {
		if got := counted(n, "problem"); got != want {
			t.Errorf("counted(%d) = %q, want %q", n, got, want)
		}
	}
}
