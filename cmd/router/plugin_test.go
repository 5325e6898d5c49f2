package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/internal/testkit"
)

// wasmTestdata is a test plugin of plugins/wasm.
func wasmTestdata(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "plugins", "wasm", "testdata", name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const pluginTestEvent = `{"specversion":"1.0","id":"e-1","type":"order.created","source":"/shop",
  "partitionkey":"k1","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
  "time":"2026-01-02T03:04:05Z","data":{"total":12}}`

func runPluginTest(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	m := NewMain(strings.NewReader(stdin), &out, &errOut)
	// A generous timeout: the default 50ms is wall time, and a busy test
	// machine can stall a process for longer.
	args = append(args, "-timeout", "5s")
	err := m.Run(context.Background(), append([]string{"plugin"}, args...))
	if err != nil {
		code = exitCode(err)
		fmt.Fprintf(&errOut, "router: %v\n", err) // as main prints it
	}
	return out.String(), errOut.String(), code
}

// router plugin test prints its result on stdout and, on stderr, the
// plugin's own log lines at any level but of the router's own lines only
// warnings and errors (a DEBUG "plugin loaded" line reached the terminal).
func TestPluginTestCommand(t *testing.T) {
	stdout, stderr, code := runPluginTest(t, pluginTestEvent, "test", wasmTestdata(t, "transformer"), "-cache-dir", "")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	var res struct {
		Plugin, Event, Verdict string
		Outputs                []struct {
			Destination, Key string
			Event            map[string]any
		}
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if res.Plugin != "transformer" || res.Event != "e-1" || res.Verdict != "ok" || len(res.Outputs) != 1 {
		t.Fatalf("%s", stdout)
	}
	o := res.Outputs[0]
	if o.Destination != "kafka.main:enriched" || o.Key != "k2" || o.Event["region"] != "eu-1" || o.Event["partitionkey"] != "k2" ||
		o.Event["id"] != "e-1" || o.Event["traceparent"] != nil {
		t.Errorf("output %+v", o)
	}
	if d, _ := o.Event["data"].(map[string]any); d["enriched"] != true {
		t.Errorf("data %v: want JSON as JSON", o.Event["data"])
	}
	if !strings.Contains(stderr, "transforming: plugin=transformer event=e-1") {
		t.Errorf("the plugin's log is not on stderr:\n%s", stderr)
	}
	if strings.Contains(stdout, "warnings") {
		t.Errorf("one output drew a warning:\n%s", stdout)
	}
	if strings.Contains(stderr, "plugin loaded") || strings.Contains(stderr, "[DEBUG]") {
		t.Errorf("the router's own debug lines reach the user's terminal:\n%s", stderr)
	}
	// Without -policies the sink the output names is not known: the
	// result is ok, and stderr says what was not checked (an SDK trial
	// read "ok" for a sink the router did not have).
	if !strings.Contains(stderr, "note: the outputs name the sinks kafka.main, which this test does not check without -policies FILE") {
		t.Errorf("no note that kafka.main went unchecked:\n%s", stderr)
	}

	// An output event is a structured CloudEvent again: chain it.
	next, _ := json.Marshal(o.Event)
	stdout, _, code = runPluginTest(t, string(next), "test", wasmTestdata(t, "splitter"), "-cache-dir", "", "-log-level", "off")
	if code != 0 || strings.Count(stdout, `"destination"`) != 3 {
		t.Fatalf("chained: exit %d\n%s", code, stdout)
	}
	// Its three outputs keep the input's id: the result warns, naming
	// them; the transformer's one output drew no warning.
	if !strings.Contains(stdout, `"warnings": [`) || !strings.Contains(stdout, `outputs 0 and 1 to the type's routes have the same id \"e-1\"`) {
		t.Errorf("a split without ids is not warned about:\n%s", stdout)
	}
}

// router plugin test gives each verdict, its reason and its exit code as
// the router would, a state write over a limit among them (it once passed
// one the router rejects).
func TestPluginTestCommandVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name string
		code int
		want []string
	}{
		{"filter", 0, []string{`"verdict": "ok"`, `"note": "no outputs: the event is filtered (nothing sent)"`, `"outputs": []`}},
		{"retry", 1, []string{`"verdict": "retry"`, `"reason": "upstream not ready"`}},
		{"reject", 2, []string{`"verdict": "reject"`, `"reason": "order total is negative"`}},
		{"trap", 1, []string{`"verdict": "retry"`, `"reason": "sy_handle trapped: unreachable`, `"wasm stack trace:"`}},
		{"bigkey", 2, []string{`"verdict": "reject"`, `state_put: state key of 300 bytes: keys have 1 to 256`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := pluginTestEvent
			if tc.name == "trap" {
				ev = strings.Replace(ev, `"e-1"`, `"x-1"`, 1)
			}
			stdout, stderr, code := runPluginTest(t, ev, "test", "-cache-dir", "", wasmTestdata(t, tc.name))
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("output lacks %s:\n%s\n%s", w, stdout, stderr)
				}
			}
		})
	}
}

// Each misuse of router plugin (a module that does not load, no event, a
// malformed flag, a plugin refusing to start without config) exits 3 with
// an error that says what was wrong; check with the config it needs
// succeeds.
func TestPluginCommandErrors(t *testing.T) {
	_, stderr, code := runPluginTest(t, pluginTestEvent, "test", wasmTestdata(t, "badimport"), "-cache-dir", "")
	if code != 3 {
		t.Errorf("a plugin that does not load: exit %d, want 3", code)
	}
	_ = stderr
	for _, tc := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{"", []string{"test", wasmTestdata(t, "passthrough")}, "no event on stdin"},
		{"[]", []string{"test", wasmTestdata(t, "passthrough")}, "one event per run"},
		{pluginTestEvent, []string{"test"}, "name the plugin's .wasm file"},
		{pluginTestEvent, []string{"test", "x.wasm", "-config", "novalue"}, `"novalue" is not key=value`},
		{pluginTestEvent, []string{"frobnicate"}, `unknown subcommand "frobnicate"`},
		// A plugin whose sy_init refuses to start without config: the
		// error says how to give it one.
		{"", []string{"check", wasmTestdata(t, "initfail"), "-cache-dir", ""},
			`sy_init returned 1: config key "region" is required (the plugin's sy_init ran without config: give it with -config key=value`},
	} {
		var out, errOut bytes.Buffer
		err := NewMain(strings.NewReader(tc.stdin), &out, &errOut).Run(context.Background(), append([]string{"plugin"}, tc.args...))
		if err == nil || exitCode(err) != 3 || !strings.Contains(err.Error()+errOut.String(), tc.want) {
			t.Errorf("%v: error %v (exit %d), want %q", tc.args, err, exitCode(err), tc.want)
		}
	}

	var out bytes.Buffer
	err := NewMain(nil, &out, io.Discard).Run(context.Background(), []string{"plugin", "check", wasmTestdata(t, "initcfg"), "-cache-dir", "", "-config", "a=1"})
	if err != nil || !strings.Contains(out.String(), "ok, plugin ABI v1") || !strings.Contains(out.String(), "_initialize, sy_abi_version, sy_handle, sy_init") {
		t.Errorf("check: %v\n%s", err, out.String())
	}
}

// TestRunWithWasmPlugin runs the router with a plugin chain: the splitter
// makes three outputs of one event, each published to NATS; the data
// directory gets the compilation cache.
func TestRunWithWasmPlugin(t *testing.T) {
	dir, err := os.MkdirTemp("", "sy")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "r.sock")
	src := `
listen  { socket = "` + sock + `" }
storage { path = "` + filepath.Join(dir, "r.db") + `" }
nats "local" {
  embedded = true
  port     = -1
  stream "events" { subjects = ["t.>"] }
}
plugin "split" {
  wasm = "` + wasmTestdata(t, "splitter") + `"
  limits { timeout = "5s" }
}
event "t.order" {
  plugins = ["split"]
  route {
    to      = "nats.local"
    subject = "t.orders"
  }
}
`
	path := filepath.Join(dir, "policies.hcl")
	os.WriteFile(path, []byte(src), 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	var logs testkit.Buffer
	go func() {
		done <- NewMain(nil, io.Discard, &logs).Run(ctx, []string{"run", "-config", path, "-log-level", "debug"})
	}()
	c := testkit.UnixClient(sock, 10*time.Second)
	waitHealthy(t, c)
	resp, err := c.Post("http://r/v1/events", "application/cloudevents+json",
		strings.NewReader(`{"specversion":"1.0","type":"t.order","source":"/t","id":"o-1","partitionkey":"k","data":{}}`))
	if err != nil || resp.StatusCode != 202 {
		t.Fatalf("post: %v %v", resp, err)
	}
	resp.Body.Close()
	var body string
	testkit.EventuallyWith(t, 10*time.Second, func() bool {
		body = get(t, c, "/v1/events/o-1")
		return strings.Contains(body, `"delivered"`) && strings.Count(body, `"sequence"`) == 3
	}, func() string { return fmt.Sprintf("not delivered as 3 outputs: %s\n%s", body, logs.String()) })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "wasm-cache")); len(entries) == 0 {
		t.Error("no compilation cache in the data directory")
	}
	if l := logs.String(); !strings.Contains(l, "plugin loaded: plugin=split") {
		t.Errorf("no plugin loaded line:\n%s", l)
	}
}

// Golden tests: -update writes the result without what changes between
// runs (took); -expect passes while the plugin's answer stays the same and
// fails with the lines that changed when it does not; -dir runs every
// NAME.event.json against NAME.expected.json, and a missing golden file
// names -update.
func TestPluginTestGolden(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ev := write("order.event.json", pluginTestEvent)
	golden := filepath.Join(dir, "order.expected.json")
	tr := wasmTestdata(t, "transformer")

	out, errOut, code := runPluginTest(t, "", "test", tr, "-cache-dir", "", "-event", ev, "-expect", golden, "-update")
	if code != 0 || !strings.Contains(out, "wrote "+golden) {
		t.Fatalf("-update: exit %d\n%s\n%s", code, out, errOut)
	}
	if b, _ := os.ReadFile(golden); strings.Contains(string(b), `"took"`) || !strings.Contains(string(b), `"region": "eu-1"`) {
		t.Fatalf("golden file:\n%s", b)
	}
	if out, errOut, code = runPluginTest(t, "", "test", tr, "-cache-dir", "", "-event", ev, "-expect", golden); code != 0 || !strings.Contains(out, "ok   "+golden) {
		t.Fatalf("-expect the same: exit %d\n%s\n%s", code, out, errOut)
	}

	// Another plugin's answer differs: exit 1 and the changed lines.
	out, _, code = runPluginTest(t, "", "test", wasmTestdata(t, "filter"), "-name", "transformer", "-cache-dir", "", "-event", ev, "-expect", golden)
	if code != goldenExitDiffer || !strings.Contains(out, "FAIL "+golden) || !strings.Contains(out, `  - `) || !strings.Contains(out, `"note": "no outputs: the event is filtered (nothing sent)"`) {
		t.Fatalf("-expect a different answer: exit %d\n%s", code, out)
	}

	// A folder: the pair passes; a new event without its golden file fails,
	// naming -update; -update writes it, and then the folder passes.
	if out, _, code = runPluginTest(t, "", "test", tr, "-cache-dir", "", "-dir", dir); code != 0 || !strings.Contains(out, "ok: 1 cases") {
		t.Fatalf("-dir: exit %d\n%s", code, out)
	}
	write("second.event.json", strings.Replace(pluginTestEvent, `"e-1"`, `"e-2"`, 1))
	if _, errOut, code = runPluginTest(t, "", "test", tr, "-cache-dir", "", "-dir", dir); code != pluginExitError || !strings.Contains(errOut, "second.expected.json does not exist: run with -update") {
		t.Fatalf("-dir with a missing golden file: exit %d\n%s", code, errOut)
	}
	if _, _, code = runPluginTest(t, "", "test", tr, "-cache-dir", "", "-dir", dir, "-update"); code != 0 {
		t.Fatalf("-dir -update: exit %d", code)
	}
	if out, _, code = runPluginTest(t, "", "test", tr, "-cache-dir", "", "-dir", dir); code != 0 || !strings.Contains(out, "ok: 2 cases") {
		t.Fatalf("-dir after -update: exit %d\n%s", code, out)
	}
	// The plugin's name is no part of a case: the same module under
	// another name (a file built as another, a policies block named
	// otherwise) passes (a plugin trial: every case differed by its
	// "plugin" line alone).
	if out, _, code = runPluginTest(t, "", "test", tr, "-name", "renamed", "-cache-dir", "", "-dir", dir); code != 0 || !strings.Contains(out, "ok: 2 cases") {
		t.Fatalf("-dir under another name: exit %d\n%s", code, out)
	}
	// -update of a case whose plugin traps writes it, and says so: a trap
	// written as expected passes from then on (a plugin trial).
	trapDir := t.TempDir()
	os.WriteFile(filepath.Join(trapDir, "crash.event.json"), []byte(strings.Replace(pluginTestEvent, `"e-1"`, `"x-1"`, 1)), 0o644) // trap.wasm traps on ids starting with x
	if out, _, code = runPluginTest(t, "", "test", wasmTestdata(t, "trap"), "-cache-dir", "", "-dir", trapDir, "-update"); code != 0 ||
		!strings.Contains(out, "crash.expected.json: the plugin's verdict is retry (sy_handle trapped") {
		t.Fatalf("-dir -update of a trap: exit %d\n%s", code, out)
	}
	// A folder that is not there is said to be missing, not to hold no
	// NAME.event.json files.
	if _, errOut, code := runPluginTest(t, "", "test", tr, "-cache-dir", "", "-dir", filepath.Join(dir, "nope")); code != pluginExitError || !strings.Contains(errOut, "no such file or directory") {
		t.Fatalf("-dir of a missing folder: exit %d\n%s", code, errOut)
	}
}

// router plugin test keeps a stateful plugin's state in memory: from event
// to event of a -dir run, in name order, and shows it after each event in
// the result (binary values in base64), so golden files check it too.
func TestPluginTestKeepsState(t *testing.T) {
	dir := t.TempDir()
	for i := 1; i <= 3; i++ {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("e%d.event.json", i)), []byte(fmt.Sprintf(`{"id":"e%d","type":"t"}`, i)), 0o644)
	}
	counter := wasmTestdata(t, "counter")
	if _, errOut, code := runPluginTest(t, "", "test", counter, "-cache-dir", "", "-dir", dir, "-update"); code != 0 {
		t.Fatalf("-update: exit %d\n%s", code, errOut)
	}
	for i, want := range []string{"AQAAAA==", "AgAAAA==", "AwAAAA=="} { // 1, 2, 3 as u32 little endian
		b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("e%d.expected.json", i+1)))
		if !strings.Contains(string(b), `"n": "base64:`+want+`"`) {
			t.Fatalf("e%d.expected.json: want the count %d in its state:\n%s", i+1, i+1, b)
		}
	}
	if out, _, code := runPluginTest(t, "", "test", counter, "-cache-dir", "", "-dir", dir); code != 0 || !strings.Contains(out, "ok: 3 cases") {
		t.Fatalf("again: exit %d\n%s", code, out)
	}
}

// plugin test rejects, as the router would dead-letter, an output whose
// destination names a sink the -policies file does not configure; without
// the file, the destination's form is still checked. Before, the test
// said ok and the router dead-lettered the event on its first attempt (a
// plugin author's trial). With the file, outputs that reach one of the
// type's routes under one id are warned of, as the router notes them.
func TestPluginTestChecksDestinations(t *testing.T) {
	dir := t.TempDir()
	policies := filepath.Join(dir, "policies.hcl")
	os.WriteFile(policies, []byte(fmt.Sprintf(`
nats "local" { embedded = true }
plugin "transformer" { wasm = %q }
`, wasmTestdata(t, "transformer"))), 0o600)
	stdout, _, code := runPluginTest(t, pluginTestEvent, "test", "-policies", policies, "-name", "transformer", "-cache-dir", "", "-log-level", "off")
	if code != 2 || !strings.Contains(stdout, `"verdict": "reject"`) || !strings.Contains(stdout, `destination \"kafka.main:enriched\" names sink \"kafka.main\", which is not configured (the router dead-letters the event)`) {
		t.Fatalf("an output to a sink not configured: exit %d\n%s", code, stdout)
	}
	// An output to the type's routes and one to a route of them, under one
	// id, reach one subject: warned of when -policies gives the routes
	// (without it, two destinations are all the test can tell).
	os.WriteFile(policies, []byte(fmt.Sprintf(`
nats "local" { embedded = true }
plugin "fanout" { wasm = %q }
event "order.created" {
  plugins = ["fanout"]
  route {
    to      = "nats.local"
    subject = "orders"
  }
}
`, wasmTestdata(t, "fanout"))), 0o600)
	stdout, _, code = runPluginTest(t, pluginTestEvent, "test", "-policies", policies, "-cache-dir", "", "-log-level", "off")
	if code != 0 || !strings.Contains(stdout, `outputs 0 and 1 to nats.local:orders have the same id \"e-1\"`) {
		t.Errorf("the routes and a route of them, with -policies: exit %d\n%s", code, stdout)
	}
	stdout, _, code = runPluginTest(t, pluginTestEvent, "test", wasmTestdata(t, "fanout"), "-cache-dir", "", "-log-level", "off")
	if code != 0 || strings.Contains(stdout, "warnings") {
		t.Errorf("the routes and another destination, routes unknown: exit %d\n%s", code, stdout)
	}
	// An output to a subject no declared stream of an embedded server
	// captures is never acknowledged: warned of. Before, the test said ok
	// and the router retried the event until it dead-lettered it.
	os.WriteFile(policies, []byte(fmt.Sprintf(`
nats "local" {
  embedded = true
  stream "events" { subjects = ["shop.>"] }
}
plugin "fanout" { wasm = %q }
event "order.created" {
  plugins = ["fanout"]
  route {
    to      = "nats.local"
    subject = "shop.orders"
  }
}
`, wasmTestdata(t, "fanout"))), 0o600)
	stdout, _, code = runPluginTest(t, pluginTestEvent, "test", "-policies", policies, "-cache-dir", "", "-log-level", "off")
	if code != 0 || !strings.Contains(stdout, `output 1 to nats.local:orders: no declared stream of nats \"local\" captures subject \"orders\"`) {
		t.Errorf("an output to a subject no stream captures: exit %d\n%s", code, stdout)
	}
	if strings.Contains(stdout, "shop.orders") {
		t.Errorf("the route to a captured subject warned of:\n%s", stdout)
	}
	if err := engine.CheckDestinations([]switchyard.PluginOutput{{Destination: "nats.local:demo.>"}}, nil); err == nil || !strings.Contains(err.Error(), "wildcard") {
		t.Errorf("a wildcard subject without -policies: %v", err)
	}
	if err := engine.CheckDestinations([]switchyard.PluginOutput{{Destination: "demo.x"}}, nil); err == nil || !strings.Contains(err.Error(), "is not <sink>:<topic or subject>") {
		t.Errorf("no sink without -policies: %v", err)
	}
}
