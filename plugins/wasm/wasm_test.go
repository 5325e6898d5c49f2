package wasm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

func newTestRuntime(t testing.TB, cacheDir string) (*Runtime, *testkit.Buffer) {
	t.Helper()
	logs := new(testkit.Buffer)
	log := hclog.New(&hclog.LoggerOptions{Name: "switchyard", Level: hclog.Trace, Output: logs})
	rt, err := NewRuntime(context.Background(), RuntimeOptions{CacheDir: cacheDir, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	return rt, logs
}

func testdata(name string) string { return filepath.Join("testdata", name+".wasm") }

// testLimits is config's default limits but for the timeout: 10s, not
// 50ms. Timeouts are wall-clock, and a test machine busy with other work
// can stall a process for longer than 50ms.
var testLimits = withDefaults(config.PluginLimits{Timeout: 10 * time.Second})

// load loads testdata/<name>.wasm, with testLimits' timeout unless lim
// sets one.
func load(t testing.TB, rt *Runtime, name string, lim config.PluginLimits, instances int) *Plugin {
	t.Helper()
	if lim.Timeout == 0 {
		lim.Timeout = testLimits.Timeout
	}
	p, err := rt.Load(context.Background(), config.Plugin{Name: name, Wasm: testdata(name), Limits: withDefaults(lim)}, LoadOptions{Instances: instances})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// withDefaults is lim with config's default for each limit it leaves zero,
// as a plugin block with a partial limits block resolves.
func withDefaults(lim config.PluginLimits) config.PluginLimits {
	d := config.DefaultPluginLimits
	if lim.Memory > 0 {
		d.Memory = lim.Memory
	}
	if lim.Timeout > 0 {
		d.Timeout = lim.Timeout
	}
	if lim.MaxOutputs > 0 {
		d.MaxOutputs = lim.MaxOutputs
	}
	if lim.MaxOutputBytes > 0 {
		d.MaxOutputBytes = lim.MaxOutputBytes
	}
	return d
}

func testEvent(id string) *switchyard.Event {
	return &switchyard.Event{
		ID:              id,
		Source:          "/orders",
		Type:            "order.created",
		SpecVersion:     "1.0",
		Subject:         "o-42",
		Time:            time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		DataContentType: "application/json",
		Extensions: []switchyard.Header{
			{Name: "partitionkey", Value: "k1"},
			{Name: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		},
		Data: []byte(`{"total":12}`),
	}
}

func cloneEvent(ev *switchyard.Event) switchyard.Event {
	c := *ev
	c.Extensions = append([]switchyard.Header(nil), ev.Extensions...)
	c.Data = append([]byte(nil), ev.Data...)
	return c
}

// mustRetry checks err is a retry-class *Error whose reason contains want.
func mustRetry(t *testing.T, err error, id, want string) *Error {
	t.Helper()
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *wasm.Error", err, err)
	}
	if !errors.Is(err, switchyard.ErrPluginRetry) || switchyard.IsPermanent(err) || pe.Verdict != VerdictRetry {
		t.Fatalf("error %v: want a retry (ErrPluginRetry, not permanent)", err)
	}
	if pe.EventID != id || !strings.HasPrefix(err.Error(), fmt.Sprintf("plugin %q, event %q: ", pe.Plugin, id)) {
		t.Fatalf("error %q does not name the plugin and the event %q", err, id)
	}
	if !strings.Contains(pe.Reason, want) {
		t.Fatalf("reason %q does not contain %q", pe.Reason, want)
	}
	return pe
}

// A plugin loaded with config's default limits reports them, and the
// passthrough example returns its input with the key it chose.
func TestWasmPassthrough(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	// The defaults are checked on a plugin loaded with them; the event goes
	// through one with testLimits, so that a busy machine cannot hit the
	// default 50ms timeout (a CI run once did, in another test).
	d, err := rt.Load(context.Background(), config.Plugin{Name: "passthrough", Wasm: testdata("passthrough"), Limits: config.DefaultPluginLimits}, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(context.Background())
	if l := d.Limits(); l != config.DefaultPluginLimits {
		t.Errorf("limits %+v, want the defaults %+v", l, config.DefaultPluginLimits)
	}
	p := load(t, rt, "passthrough", config.PluginLimits{}, 1)
	ev := testEvent("e1")
	outs, err := p.Handle(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	want := []switchyard.PluginOutput{{Event: *ev, Key: "k1"}}
	if !reflect.DeepEqual(outs, want) {
		t.Fatalf("outputs %+v, want %+v", outs, want)
	}
}

// A transformer's output goes to the destination and key it chose, with its
// data and headers in place of the input's and its key as the partitionkey
// extension, other attributes kept; the input event is left unchanged and
// the plugin's log() line reaches the router's log.
func TestWasmTransformer(t *testing.T) {
	rt, logs := newTestRuntime(t, "")
	p := load(t, rt, "transformer", config.PluginLimits{}, 1)
	ev := testEvent("e1")
	before := cloneEvent(ev)
	outs, err := p.Handle(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 1 {
		t.Fatalf("%d outputs", len(outs))
	}
	o := outs[0]
	if o.Destination != "kafka.main:enriched" || o.Key != "k2" || string(o.Event.Data) != `{"enriched":true}` {
		t.Errorf("output %+v", o)
	}
	// Headers replace the input's (traceparent is gone); the new key is
	// the partitionkey extension too; the rest is the input's.
	wantExt := []switchyard.Header{{Name: "partitionkey", Value: "k2"}, {Name: "region", Value: "eu-1"}}
	if !reflect.DeepEqual(o.Event.Extensions, wantExt) || o.Event.PartitionKey() != o.Key {
		t.Errorf("extensions %+v, want %+v", o.Event.Extensions, wantExt)
	}
	if o.Event.ID != ev.ID || o.Event.Type != ev.Type || o.Event.Source != ev.Source || !o.Event.Time.Equal(ev.Time) {
		t.Errorf("attributes changed: %+v", o.Event)
	}
	if !reflect.DeepEqual(*ev, before) {
		t.Errorf("the input event changed: %+v", *ev)
	}
	if l := logs.String(); !strings.Contains(l, "[INFO]  switchyard.plugin: transforming: plugin=transformer event=e1") {
		t.Errorf("log() line missing:\n%s", l)
	}
}

// A plugin that emits nothing drops the event: no outputs, no error.
func TestWasmFilter(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	p := load(t, rt, "filter", config.PluginLimits{}, 1)
	outs, err := p.Handle(context.Background(), testEvent("e1"))
	if err != nil || len(outs) != 0 {
		t.Fatalf("outputs %v, error %v; want none (dropped)", outs, err)
	}
}

// A splitter's three outputs each carry their own key and data, the key as
// the partitionkey extension and the other extensions inherited, and no
// destination of their own; the input event is left unchanged.
func TestWasmSplitter(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	p := load(t, rt, "splitter", config.PluginLimits{}, 1)
	ev := testEvent("e1")
	before := cloneEvent(ev)
	outs, err := p.Handle(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 3 {
		t.Fatalf("%d outputs, want 3", len(outs))
	}
	for i, o := range outs {
		key, data := string(rune('a'+i)), string(rune('1'+i))
		if o.Key != key || string(o.Event.Data) != data || o.Destination != "" {
			t.Errorf("output %d: key %q data %q destination %q", i, o.Key, o.Event.Data, o.Destination)
		}
		want := []switchyard.Header{{Name: "partitionkey", Value: key}, ev.Extensions[1]}
		if !reflect.DeepEqual(o.Event.Extensions, want) {
			t.Errorf("output %d: extensions %+v, want %+v", i, o.Event.Extensions, want)
		}
	}
	if !reflect.DeepEqual(*ev, before) {
		t.Errorf("the input event changed: %+v", *ev)
	}
}

// An output's id (flag bit 3), written by hand as plugin-abi.md lays it
// out, is the id its event is published under; the rest is inherited.
// (What the router makes of outputs that share an id: engine's
// TestPluginOutputsSharingAnID.)
func TestWasmOutputIDs(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	p := load(t, rt, "splitids", config.PluginLimits{}, 1)
	ev := testEvent("e1")
	outs, err := p.Handle(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 2 || outs[0].Event.ID != "e1/0" || outs[1].Event.ID != "e1/1" || string(outs[1].Event.Data) != "b" ||
		outs[1].Event.Source != ev.Source || outs[1].Key != ev.PartitionKey() || ev.ID != "e1" {
		t.Fatalf("outputs %+v (input %+v)", outs, ev)
	}
}

// A reject verdict is a permanent error, not a retry, whose message names
// the plugin, the event and the plugin's reason; the instance is kept.
func TestWasmRejectVerdict(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	p := load(t, rt, "reject", config.PluginLimits{}, 1)
	_, err := p.Handle(context.Background(), testEvent("e1"))
	if !switchyard.IsPermanent(err) || errors.Is(err, switchyard.ErrPluginRetry) {
		t.Fatalf("error %v: want a reject (permanent, not a retry)", err)
	}
	var pe *Error
	if !errors.As(err, &pe) || pe.Verdict != VerdictReject || pe.Reason != "order total is negative" {
		t.Fatalf("error %#v", err)
	}
	if got := err.Error(); got != `plugin "reject", event "e1": order total is negative` {
		t.Errorf("message %q", got)
	}
	if s := p.Stats(); s.Discarded != 0 {
		t.Errorf("a reject discarded the instance: %+v", s)
	}
}

// A plugin's reason is kept with its control characters escaped, as its
// log lines are: a reason reaches the operator's terminal (router dlq
// show, plugin test) and log, and a plugin must not colour or clear the
// screen or split a log line with it.
func TestWasmReasonEscapesControls(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	p := load(t, rt, "rejectctl", config.PluginLimits{}, 1)
	_, err := p.Handle(context.Background(), testEvent("e1"))
	var pe *Error
	if !errors.As(err, &pe) || pe.Reason != `bad\x1b[31mred\x0anewline\x07` {
		t.Fatalf("error %#v", err)
	}
}

// A retry verdict is a retryable error naming the plugin, the event and the
// plugin's reason; the instance is kept.
func TestWasmRetryVerdict(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	p := load(t, rt, "retry", config.PluginLimits{}, 1)
	_, err := p.Handle(context.Background(), testEvent("e1"))
	mustRetry(t, err, "e1", "upstream not ready")
	if s := p.Stats(); s.Discarded != 0 {
		t.Errorf("a retry verdict discarded the instance: %+v", s)
	}
}

// hostile runs a plugin that misbehaves on events whose id starts with "x":
// the bad event fails with a retry whose reason contains want, the instance
// is discarded, and the next event works on a new instance.
func hostile(t *testing.T, name string, lim config.PluginLimits, want string) *Error {
	t.Helper()
	rt, _ := newTestRuntime(t, "")
	p := load(t, rt, name, lim, 1)
	start := time.Now()
	_, err := p.Handle(context.Background(), testEvent("x1"))
	took := time.Since(start)
	pe := mustRetry(t, err, "x1", want)
	t.Logf("%s: %v (in %v)", name, err, took)
	if s := p.Stats(); s.Discarded != 1 || s.Live != 0 {
		t.Errorf("stats %+v: want the instance discarded", s)
	}
	outs, err := p.Handle(context.Background(), testEvent("e2"))
	if err != nil || len(outs) != 1 {
		t.Fatalf("the next event: %v %v", outs, err)
	}
	if s := p.Stats(); s.Started != 2 || s.Live != 1 {
		t.Errorf("stats %+v: want a second instance", s)
	}
	return pe
}

// A plugin that loops forever, or sleeps past its timeout (an hour), is
// stopped at limits.timeout, within seconds: a retry saying it timed out,
// its instance discarded, and the next event handled by a new one.
func TestWasmHostileEndlessLoop(t *testing.T) {
	for _, name := range []string{"loop", "sleep"} {
		start := time.Now()
		// 250ms, not the default 50ms: the next event must not time out on a
		// busy test machine.
		hostile(t, name, config.PluginLimits{Timeout: 250 * time.Millisecond}, "timed out: sy_handle ran longer than 250ms")
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s: took %v", name, took)
		}
	}
}

// A plugin that grows its memory without end is stopped at limits.memory: a
// retry saying how far it tried to grow, its instance discarded, and the
// next event handled by a new one.
func TestWasmHostileMemoryBomb(t *testing.T) {
	// A generous timeout: where the memory is a Go slice (not Linux) each
	// grow that moves it copies, slowly under -race, and the memory limit
	// is what must stop the plugin.
	hostile(t, "membomb", config.PluginLimits{Memory: 4 << 20, Timeout: 10 * time.Second}, "memory limit reached: the plugin tried to grow its memory to 4.1MiB, over limits.memory = 4MiB")
}

// A module's tables count in limits.memory (tables.go): one whose tables
// may hold more does not load, saying so (a security trial's three
// tables of 2^27 elements took 3 GB and ran 16 s past a 50 ms timeout),
// and a table declared without a maximum cannot grow (its grow of 2^27
// elements fails and the plugin passes the event through; before, it grew
// and trapped). The table's bytes show in the plugin's memory.
func TestWasmTablesCountInTheMemoryLimit(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	_, err := rt.Load(context.Background(), config.Plugin{Name: "tablebomb", Wasm: testdata("tablebomb"), Limits: withDefaults(config.PluginLimits{})}, LoadOptions{Instances: 1})
	if err == nil || !strings.Contains(err.Error(), "its tables may hold 3072MiB") || !strings.Contains(err.Error(), "limits.memory = 16MiB") {
		t.Fatalf("loading a module with 3 GiB of tables: %v", err)
	}
	// Its memory's first page and its table fit 64 KiB only without each
	// other: refused, naming both (before, wazero panicked allocating the
	// memory the tables had left too small: a crash at start or reload).
	_, err = rt.Load(context.Background(), config.Plugin{Name: "tablegrow", Wasm: testdata("tablegrow"), Limits: withDefaults(config.PluginLimits{Memory: 64 << 10})}, LoadOptions{Instances: 1})
	if err == nil || !strings.Contains(err.Error(), "its memory starts at 64KiB (65664 bytes with its tables' 128 bytes), over limits.memory = 64KiB") {
		t.Fatalf("memory and tables over limits.memory together: %v", err)
	}
	p := load(t, rt, "tablegrow", config.PluginLimits{}, 1)
	for _, id := range []string{"e1", "e2"} {
		if outs, err := p.Handle(context.Background(), testEvent(id)); err != nil || len(outs) != 1 {
			t.Fatalf("event %s: %v %v; want the grow refused and the event passed through", id, outs, err)
		}
	}
	if m := p.MemoryBytes(); m != 64<<10+16*tableElementBytes {
		t.Errorf("the plugin's memory %d bytes, want its page and its table's %d", m, 16*tableElementBytes)
	}
}

// A plugin that recurses without end traps with a stack overflow, named
// with the plugin and the event, and is retried like any trap; the
// instance is discarded and the next event runs on a new one. The call
// stack lives outside the plugin's linear memory, so limits.memory does not
// bound it: wazero grows it to ~80 MiB before it gives up (measured: ~140
// MiB of heap at the peak, with the copy it grows from). What must hold is
// that it is given back: within 5 s, the heap after a collection is within
// 16 MiB of what it was before. (Not at once: the goroutine wazero starts
// to watch the call's context, WithCloseOnContextDone, may hold the
// instance a moment longer; CI once saw 80 MiB kept at the first
// collection.)
func TestWasmHostileRecursion(t *testing.T) {
	heap := func() int64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := heap()
	hostile(t, "recurse", config.PluginLimits{Memory: 1 << 20, Timeout: 10 * time.Second}, "sy_handle trapped: stack overflow")
	var grew int64
	testkit.EventuallyWith(t, 5*time.Second, func() bool {
		grew = heap() - before
		return grew <= 16<<20
	}, func() string {
		return fmt.Sprintf("the heap kept %d MiB after the overflowing instance was discarded", grew>>20)
	})
}

// A plugin that traps is a retry naming the trap and where it happened,
// with the runtime's stack trace as its cause; its instance is discarded
// and the next event handled by a new one.
func TestWasmHostileTrap(t *testing.T) {
	pe := hostile(t, "trap", config.PluginLimits{}, "sy_handle trapped: unreachable (at parse_order ←")
	if pe.Cause == nil || !strings.Contains(pe.Cause.Error(), "wasm stack trace") {
		t.Errorf("cause %v: want the runtime's error with its stack trace", pe.Cause)
	}
}

// Outputs that break the ABI's rules, and an answer that is no verdict,
// fail the same way every time: a reject (the event goes to the DLQ with
// the reason), not a retry, counted as a broken rule.
func TestWasmHostileOutputs(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"toomany", "too many outputs: output 17 is over limits.max_outputs = 16"},
		{"toolarge", "output 1 is too large: 2.00001MiB, over limits.max_output_bytes = 1MiB"},
		{"malformed", "output 1 is malformed: at byte 4: flags 0xff has unknown bits"},
		{"badverdict", "sy_handle returned 3: the verdicts are 0 ok, 1 retry, 2 reject"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt, _ := newTestRuntime(t, "")
			p := load(t, rt, tc.name, config.PluginLimits{}, 1)
			_, err := p.Handle(context.Background(), testEvent("e1"))
			var pe *Error
			if !switchyard.IsPermanent(err) || errors.Is(err, switchyard.ErrPluginRetry) || !errors.As(err, &pe) || pe.Verdict != VerdictReject {
				t.Fatalf("error %v: want a reject (permanent, not a retry)", err)
			}
			if pe.Failure != FailureBrokenRule || !strings.Contains(pe.Reason, tc.want) || pe.EventID != "e1" {
				t.Fatalf("error %+v: want a broken rule saying %q", pe, tc.want)
			}
			t.Log(err)
			if s := p.Stats(); s.Discarded != 1 {
				t.Errorf("stats %+v: want the instance discarded", s)
			}
		})
	}
}

// Each way a module can fail to load gets one error that names the plugin
// and its file and says what is wrong and how to mend it.
func TestWasmLoadErrors(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	garbage := filepath.Join(t.TempDir(), "garbage.wasm")
	os.WriteFile(garbage, []byte("\x00asm\x02\x00\x00\x00"), 0o600)
	// A copy cut short in the middle of a section (an unfinished copy or build).
	whole, err := os.ReadFile(testdata("filter"))
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "cut.wasm")
	os.WriteFile(cut, whole[:len(whole)-3], 0o600)
	for _, tc := range []struct {
		name, file string
		lim        config.PluginLimits
		want       []string
	}{
		{"badimport", testdata("badimport"), config.PluginLimits{}, []string{
			`it imports "env"."abort" (abort(i32, i32, i32, i32)): plugins may import only from "switchyard" and "wasi_snapshot_preview1"`}},
		{"badwasi", testdata("badwasi"), config.PluginLimits{}, []string{
			`it imports "wasi_snapshot_preview1"."sock_open", which is not a wasi_snapshot_preview1 function`,
			`it imports switchyard.emit(i32) -> i32, want emit(i32, i32) -> i32`,
			`it exports sy_handle() -> i32, want sy_handle(i32) -> i32`}},
		{"abi2", testdata("abi2"), config.PluginLimits{}, []string{
			`sy_abi_version() returned 2: this router speaks plugin ABI version 1`}},
		{"command", testdata("command"), config.PluginLimits{}, []string{
			`it does not export sy_abi_version() -> i32`, `it does not export sy_handle(i32) -> i32`,
			`it exports _start and no _initialize, so it was built as a WASI command: build a reactor (Go: -buildmode=c-shared`}},
		{"gocommand", testdata("gocommand"), config.PluginLimits{}, []string{
			`it exports _start and no _initialize, so it was built as a WASI command: build a reactor (Go: -buildmode=c-shared`}},
		{"typo", testdata("typo"), config.PluginLimits{}, []string{
			`it does not export sy_handle(i32) -> i32 (it exports sy_abi_version, sy_handel): did you mean sy_handel?`}},
		{"env.abort", testdata("badimport"), config.PluginLimits{}, []string{
			`AssemblyScript: build with --use abort=~lib/@switchyard-router/sdk-assemblyscript/assembly/index/abort`}},
		{"initfail", testdata("initfail"), config.PluginLimits{}, []string{
			`sy_init returned 1: config key "region" is required`}},
		// A sleep in sy_init ends at init's bound, max(10 × timeout, 1s).
		{"initsleep", testdata("initsleep"), config.PluginLimits{Timeout: 50 * time.Millisecond}, []string{
			`timed out: sy_init ran longer than 1s`}},
		{"toolarge", testdata("toolarge"), config.PluginLimits{Memory: 1 << 20}, []string{
			`its memory starts at 2.1MiB, over limits.memory = 1MiB`}},
		{"garbage", garbage, config.PluginLimits{}, []string{`not a valid WebAssembly module`}},
		{"cut", cut, config.PluginLimits{}, []string{`not a valid WebAssembly module: it ends in the middle of its contents, after ` + fmt.Sprint(len(whole)-3) + ` bytes: is the file cut short`}},
		{"missing", "testdata/nope.wasm", config.PluginLimits{}, []string{`open testdata/nope.wasm: no such file`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rt.Load(context.Background(), config.Plugin{Name: tc.name, Wasm: tc.file, Limits: withDefaults(tc.lim)}, LoadOptions{})
			if err == nil {
				t.Fatal("loaded")
			}
			t.Log(err)
			prefix := fmt.Sprintf("plugin %q (%s): ", tc.name, tc.file)
			if tc.name == "missing" {
				prefix = fmt.Sprintf("plugin %q: ", tc.name)
			}
			if !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("error %q does not start with %q", err, prefix)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// A plugin's config reaches it at init as the ABI's config envelope, its
// entries sorted by key and an empty value kept.
func TestWasmInitAndConfig(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	p, err := rt.Load(context.Background(), config.Plugin{Name: "initcfg", Wasm: testdata("initcfg"), Limits: testLimits,
		Config: map[string]string{"region": "eu-1", "endpoint": "http://x", "a": ""}}, LoadOptions{Instances: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	outs, err := p.Handle(context.Background(), testEvent("e1"))
	if err != nil || len(outs) != 1 {
		t.Fatal(outs, err)
	}
	// The config envelope: u32 n × (str key, str value), sorted by key.
	want := appendU32(nil, 3)
	for _, kv := range [][2]string{{"a", ""}, {"endpoint", "http://x"}, {"region", "eu-1"}} {
		want = appendStr(appendStr(want, kv[0]), kv[1])
	}
	if !bytes.Equal(outs[0].Event.Data, want) {
		t.Errorf("config envelope %q, want %q", outs[0].Event.Data, want)
	}
}

// What a plugin writes to stdout (INFO), stderr (WARN) and log() reaches
// the router's log named with the plugin, the stream and the event; past
// 4 KiB in one call it is cut, with a line saying how many bytes were
// dropped.
func TestWasmGuestText(t *testing.T) {
	rt, logs := newTestRuntime(t, "")
	p := load(t, rt, "chatty", config.PluginLimits{}, 1)
	if _, err := p.Handle(context.Background(), testEvent("e1")); err != nil {
		t.Fatal(err)
	}
	l := logs.String()
	for _, want := range []string{
		"[INFO]  switchyard.plugin: hello from stdout: plugin=chatty stream=stdout event=e1",
		"[WARN]  switchyard.plugin: a warning from log(): plugin=chatty event=e1",
		"[WARN]  switchyard.plugin: " + strings.Repeat("e", maxText-len("hello from stdout")-len("a warning from log()")) + ": plugin=chatty stream=stderr event=e1",
		"[WARN]  switchyard.plugin: plugin output truncated: too much log text in one call: plugin=chatty dropped_bytes=941 limit_bytes=4096 event=e1",
	} {
		if !strings.Contains(l, want) {
			t.Errorf("log lacks %.120q", want)
		}
	}
	if t.Failed() {
		t.Logf("log:\n%.2000s", l)
	}
}

// An event handled under a cancelled context is a retry that discards no
// instance; one waiting while every instance is busy gives up at its
// context's deadline, as a retry saying so.
func TestWasmCancelledContext(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	p := load(t, rt, "passthrough", config.PluginLimits{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.Handle(ctx, testEvent("e1"))
	mustRetry(t, err, "e1", "context canceled")
	if s := p.Stats(); s.Discarded != 0 {
		t.Errorf("stats %+v", s)
	}
	// Every instance busy: Handle waits, and gives up with its context.
	in, _ := p.get(context.Background())
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = p.Handle(ctx, testEvent("e2"))
	mustRetry(t, err, "e2", "waiting for an instance: context deadline exceeded")
	p.idle <- in
}

// TestWasmCompilationCache loads a module into a runtime with an on-disk
// cache, then into a second runtime on the same directory, as a restart
// does: the second load reads the cache and writes nothing; a damaged
// entry is dropped and the module compiled again.
func TestWasmCompilationCache(t *testing.T) {
	dir := t.TempDir()
	files := func() map[string]time.Time {
		m := map[string]time.Time{}
		filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				info, _ := d.Info()
				m[path] = info.ModTime()
			}
			return nil
		})
		return m
	}
	loadOnce := func() time.Duration {
		rt, err := NewRuntime(context.Background(), RuntimeOptions{CacheDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close(context.Background())
		start := time.Now()
		p, err := rt.Load(context.Background(), config.Plugin{Name: "transformer", Wasm: testdata("transformer"), Limits: testLimits}, LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if _, err := p.Handle(context.Background(), testEvent("e1")); err != nil {
			t.Fatal(err)
		}
		return took
	}
	first := loadOnce()
	cached := files()
	if len(cached) == 0 {
		t.Fatal("the cache directory is empty after a load")
	}
	second := loadOnce()
	t.Logf("load with compile: %v; load from the cache: %v; %d cache files", first, second, len(cached))
	if after := files(); !reflect.DeepEqual(after, cached) {
		t.Errorf("the second load wrote to the cache (a miss): %v, then %v", cached, after)
	}
	// A damaged entry (cut short; then a byte changed) is emptied out and
	// the module compiled again: it stopped every start, and the error
	// blamed the plugin's file (an adversarial trial).
	for path := range cached {
		b, _ := os.ReadFile(path)
		os.WriteFile(path, b[:len(b)/2], 0o600)
	}
	loadOnce()
	for path := range files() {
		b, _ := os.ReadFile(path)
		b[len(b)-10] ^= 0xff
		os.WriteFile(path, b, 0o600)
	}
	loadOnce()
	if len(files()) == 0 {
		t.Error("the cache is empty after a load that compiled again")
	}
}

// TestWasmConcurrent drives one plugin's pool from many goroutines, with a
// trap every tenth event: run it with -race.
func TestWasmConcurrent(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	const size, goroutines, events = 4, 16, 100
	p := load(t, rt, "trap", config.PluginLimits{}, size)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			for i := range events {
				id := fmt.Sprintf("e-%d-%d", g, i)
				if i%10 == 9 {
					id = "x" + id
				}
				outs, err := p.Handle(context.Background(), testEvent(id))
				switch {
				case id[0] == 'x' && (err == nil || !errors.Is(err, switchyard.ErrPluginRetry)):
					errs <- fmt.Errorf("%s: want a trap, got %v", id, err)
					return
				case id[0] != 'x' && (err != nil || len(outs) != 1 || outs[0].Event.ID != id):
					errs <- fmt.Errorf("%s: %v %v", id, outs, err)
					return
				}
				if live := p.Stats().Live; live > size {
					errs <- fmt.Errorf("%d live instances, pool of %d", live, size)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	s := p.Stats()
	t.Logf("stats %+v", s)
	if want := int64(goroutines * events / 10); s.Discarded != want {
		t.Errorf("discarded %d, want %d", s.Discarded, want)
	}
}

// TestWasmEngineChain runs plugins the way the engine does (a chain): the
// splitter's outputs go through the transformer.
func TestWasmEngineChain(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	split := load(t, rt, "splitter", config.PluginLimits{}, 1)
	tr := load(t, rt, "transformer", config.PluginLimits{}, 1)
	var outs []switchyard.PluginOutput
	for _, in := range []switchyard.PluginOutput{{Event: *testEvent("e1")}} {
		got, err := split.Handle(context.Background(), &in.Event)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range got {
			got, err := tr.Handle(context.Background(), &o.Event)
			if err != nil {
				t.Fatal(err)
			}
			outs = append(outs, got...)
		}
	}
	if len(outs) != 3 || outs[2].Key != "k2" {
		t.Fatalf("%+v", outs)
	}
}

// A trap after the Go runtime printed "panic: <message>" to stderr (a Go
// plugin's panic: its SDK recovers nothing, a deferred recover costing
// ~20 µs a call on wasip1) keeps that line in the reason: a dead letter
// said only where it trapped, and the message was in the log alone (an
// SDK trial).
func TestWasmTrapKeepsAGoPanicsMessage(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	p := load(t, rt, "gopanic", config.PluginLimits{}, 1)
	_, err := p.Handle(context.Background(), testEvent("e1"))
	pe := mustRetry(t, err, "e1", "sy_handle trapped: unreachable")
	if !strings.HasSuffix(pe.Reason, "; it printed: panic: boom: custom message") {
		t.Fatalf("reason %q: want the panic's line", pe.Reason)
	}
	// The next call's trap does not keep this one's line.
	if _, err := p.Handle(context.Background(), testEvent("e2")); strings.Count(err.Error(), "panic: boom") != 1 {
		t.Fatalf("second call: %v", err)
	}
}

// A Go plugin's fatal error (a deadlock, the runtime out of memory) is
// kept in the trap's reason as a panic is: the runtime's first line, not
// only "unreachable" (a plugin trial).
func TestWasmTrapKeepsAGoFatalError(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	p := load(t, rt, "gofatal", config.PluginLimits{}, 1)
	_, err := p.Handle(context.Background(), testEvent("e1"))
	pe := mustRetry(t, err, "e1", "sy_handle trapped: unreachable")
	if !strings.Contains(pe.Reason, "it printed: fatal error: all goroutines are asleep - deadlock!") {
		t.Fatalf("reason %q: want the runtime's fatal error", pe.Reason)
	}
}

// A trap after the plugin called fail() — an AssemblyScript abort, a Rust
// panic through the SDK's hook — keeps what it said in the reason, beside
// where it trapped; it is retried and counted as a trap.
func TestWasmTrapKeepsTheLastFail(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	p := load(t, rt, "abort", config.PluginLimits{}, 1)
	_, err := p.Handle(context.Background(), testEvent("e1"))
	pe := mustRetry(t, err, "e1", "sy_handle trapped: unreachable")
	if !strings.Contains(pe.Reason, "the plugin said: panicked at split.rs:12:5: index out of bounds") || !strings.Contains(pe.Reason, "split") {
		t.Fatalf("reason %q: want the plugin's last fail() and the function it trapped in", pe.Reason)
	}
	if pe.Failure != FailureTrap {
		t.Fatalf("failure %q, want trap", pe.Failure)
	}
}

// Trap frames read as the plugin's own code: Rust's legacy mangling is
// undone (the hash dropped) and the panic machinery is left out.
func TestDemangleFrames(t *testing.T) {
	for in, want := range map[string]string{
		"._ZN6panics12parse_amount17h0123456789abcdefE(i32) i32": "panics::parse_amount",
		".parse_order()":      "parse_order",
		"._ZN3bad99E()":       "_ZN3bad99E",
		".sy_handle(i32) i32": "sy_handle",
		"._ZN4core9panicking5panic17h0123456789abcdefE(i32)": "core::panicking::panic",
	} {
		if got := demangle(in); got != want {
			t.Errorf("demangle(%q) = %q, want %q", in, got, want)
		}
	}
	if !runtimeFrame("core::panicking::panic") || !runtimeFrame("rust_panic") || runtimeFrame("panics::handle") ||
		!runtimeFrame("runtime.gopanic") || !runtimeFrame("runtime.mapassign_faststr") || runtimeFrame("main.handle") {
		t.Error("runtimeFrame: the panic path is the runtime's, the plugin's functions are not")
	}
}

// A trap's reason is bounded whatever the names of the functions it went
// through: each frame to maxFrame bytes, the whole to maxReason (a plugin
// trial: a 2 MB name in the module's name section made a 2 MB reason per
// attempt, kept in the data file, the log, GET /v1/plugins and the DLQ).
func TestATrapsReasonIsBounded(t *testing.T) {
	long := strings.Repeat("é", 1<<20) // 2 MB, two bytes a rune
	trace := "wasm error: unreachable\nwasm stack trace:\n\t." + long + "(i32) i32\n\t.sy_handle(i32) i32"
	got := describeTrap("sy_handle", errors.New(trace))
	if len(got) > maxReason+len("…") || !strings.HasPrefix(got, "sy_handle trapped: unreachable (at éé") || !strings.Contains(got, "… ← sy_handle)") {
		t.Fatalf("%d bytes: %.120s", len(got), got)
	}
	many := "wasm error: unreachable\nwasm stack trace:"
	for range 4 {
		many += "\n\t." + strings.Repeat("f", 100<<10) + "()"
	}
	if got := describeTrap("sy_handle", errors.New(many)); len(got) > maxReason+len("…") || !utf8.ValidString(got) {
		t.Fatalf("four long frames: %d bytes", len(got))
	}
}

// A plugin's memory is the linear memory of its live instances: the two
// pages the passthrough plugin declares, back to zero once closed.
func TestWasmMemoryBytes(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	p := load(t, rt, "passthrough", config.PluginLimits{}, 1)
	if got := p.MemoryBytes(); got != 2*65536 {
		t.Fatalf("memory of one instance = %d, want its two pages (131072)", got)
	}
	if _, err := p.Handle(context.Background(), testEvent("e1")); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := p.MemoryBytes(); got != 0 {
		t.Fatalf("memory after Close = %d, want 0", got)
	}
}

// A plugin uses state when its module imports a state function: the
// engine keeps a state overlay only for chains with one.
func TestWasmUsesState(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	if !load(t, rt, "counter", config.PluginLimits{}, 1).UsesState() {
		t.Error("counter imports state_get and state_put: UsesState is false")
	}
	if load(t, rt, "passthrough", config.PluginLimits{}, 1).UsesState() {
		t.Error("passthrough imports no state function: UsesState is true")
	}
}

// Plugins that use the same module load at the same time (the router loads
// its plugin blocks in parallel) from a warm compilation cache without
// racing inside wazero: it publishes a module read from the file cache
// before its entry preambles are compiled (wazero/wazero#2547), so a
// concurrent load of the same module could instantiate it half-made — a
// data race under -race, an index-out-of-range panic without it.
func TestSameModuleLoadsConcurrently(t *testing.T) {
	dir := t.TempDir()
	warm, _ := newTestRuntime(t, dir)
	load(t, warm, "transformer", config.PluginLimits{}, 1) // fills the file cache
	for round := range 5 {
		rt, _ := newTestRuntime(t, dir) // an empty memory cache, a warm file cache
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for i := range 4 {
			wg.Go(func() {
				p, err := rt.Load(context.Background(), config.Plugin{Name: fmt.Sprintf("t%d", i), Wasm: testdata("transformer"), Limits: testLimits}, LoadOptions{Instances: 1})
				if err == nil {
					_, err = p.Handle(context.Background(), testEvent("e1"))
					p.Close(context.Background())
				}
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}

// The compilation cache holds machine code the router maps executable, so
// a cache folder another user could have written into is refused before
// anything in it is read: one anyone may write (sticky or not), one with a
// file others may write, a link, or one another user owns. Before, another
// user's folder at <data dir>/wasm-cache in /tmp was used as it was, and a
// cache entry of theirs ran as the router's user (a security trial).
func TestCacheOthersCouldWriteIsRefused(t *testing.T) {
	ctx := context.Background()
	cases := map[string]func(dir string) error{
		"world-writable, sticky": func(dir string) error { return os.Chmod(dir, 0o777|os.ModeSticky) },
		"a file others may write": func(dir string) error {
			sub := filepath.Join(dir, "wazero-planted")
			if err := os.Mkdir(sub, 0o700); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(sub, "entry"), []byte("code"), 0o600); err != nil {
				return err
			}
			return os.Chmod(filepath.Join(sub, "entry"), 0o666)
		},
		"a link": func(dir string) error { return os.Symlink(t.TempDir(), filepath.Join(dir, "wazero-link")) },
	}
	if os.Geteuid() == 0 {
		cases["another user's"] = func(dir string) error { return os.Chown(dir, 65534, 65534) }
	} else {
		t.Log("not root: the case of a folder another user owns is left out (chown needs root)")
	}
	for name, spoil := range cases {
		dir := filepath.Join(t.TempDir(), "wasm-cache")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := spoil(dir); err != nil {
			t.Fatal(err)
		}
		rt, err := NewRuntime(ctx, RuntimeOptions{CacheDir: dir})
		if err == nil {
			rt.Close(ctx)
			t.Errorf("%s: the cache was taken", name)
			continue
		}
		t.Logf("%s: %v", name, err)
	}
	// The folder the runtime makes itself passes, and again once filled.
	dir := filepath.Join(t.TempDir(), "wasm-cache")
	for range 2 {
		rt, err := NewRuntime(ctx, RuntimeOptions{CacheDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rt.Load(ctx, config.Plugin{Name: "transformer", Wasm: testdata("transformer"), Limits: testLimits}, LoadOptions{}); err != nil {
			t.Fatal(err)
		}
		rt.Close(ctx)
	}
}

// A state write with a negative time to live rejects the event, naming
// the plugin, the event and the call: before, it read as "never expires",
// the opposite of what was meant (a plugin author's trial).
func TestNegativeTTLRejects(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	p := load(t, rt, "negttl", config.PluginLimits{}, 1)
	view := MemoryState{}
	_, err := p.Handle(switchyard.WithState(context.Background(), view), testEvent("e1"))
	var pe *Error
	if !errors.As(err, &pe) || pe.Verdict != VerdictReject || !strings.Contains(err.Error(), `plugin "negttl", event "e1": state_put: ttl_seconds -5`) {
		t.Fatalf("error %v", err)
	}
	if len(view) != 0 {
		t.Errorf("the key was written: %v", view)
	}
}

// A state call in sy_init fails the load, saying why: state belongs to an
// event type and tenant, which init has not. Before, it answered -2
// ("failed, answer with retry") without a word (a plugin author's trial).
func TestStateInInitFailsTheLoad(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	_, err := rt.Load(context.Background(), config.Plugin{Name: "initstate", Wasm: testdata("initstate"), Limits: withDefaults(testLimits)}, LoadOptions{Instances: 1})
	if err == nil || !strings.Contains(err.Error(), "state_get called in sy_init: plugin state is per event type and tenant") {
		t.Fatalf("load: %v", err)
	}
}

// A plugin lists every kind of failure it may give, once each, and listing
// them (at each metrics scrape) allocates nothing.
func TestFailureKindsListsEveryKindWithoutAllocating(t *testing.T) {
	var p *Plugin
	got := p.FailureKinds()
	if len(got) != len(Failures) {
		t.Fatalf("FailureKinds = %q, want the %d of Failures", got, len(Failures))
	}
	for i, f := range Failures {
		if got[i] != string(f) {
			t.Errorf("FailureKinds[%d] = %q, want %q", i, got[i], f)
		}
	}
	if n := testing.AllocsPerRun(100, func() { kindsSink = p.FailureKinds() }); n != 0 {
		t.Errorf("FailureKinds allocates %.0f times a call, want 0", n)
	}
}

var kindsSink []string // what a scrape keeps, so the list cannot stay on the stack

// An instance that cannot start when an event needs one (its sy_init or
// _initialize fails or runs past its time at run time, not at the load)
// is the plugin's failure of kind start, retried: a plugin trial saw such
// attempts only as verdicts of retry, never in the failures' counts.
func TestAnInstanceThatCannotStartIsAFailure(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	p := load(t, rt, "passthrough", config.PluginLimits{}, 1)
	p.discard(<-p.idle) // the load's instance gone, the next call starts one
	p.initTimeout = time.Nanosecond
	_, err := p.Handle(context.Background(), testEvent("e1"))
	var pe *Error
	if !errors.As(err, &pe) || pe.Failure != FailureStart || pe.Verdict != VerdictRetry || switchyard.IsPermanent(err) || pe.PluginFailure() != "start" {
		t.Fatalf("%#v", err)
	}
}

// A plugin that sleeps (WASI poll_oneoff, as Rust's thread::sleep and Go's
// scheduler do) sleeps, idle: the call takes the time asked for, the event
// passes, and the process spends little CPU meanwhile. A poll with no
// clock whose subscriptions are ready at once returns at once (wazero asks
// such a poll to sleep for ever: a review).
func TestAPluginsSleepSleeps(t *testing.T) {
	rt, _ := newTestRuntime(t, "")
	p := load(t, rt, "sleep", config.PluginLimits{}, 1)
	cpu0, start := processCPU(), time.Now()
	for i := range 3 {
		outs, err := p.Handle(context.Background(), testEvent(fmt.Sprintf("s%d", i)))
		if err != nil || len(outs) != 1 {
			t.Fatalf("outputs %v, error %v", outs, err)
		}
	}
	took, cpu := time.Since(start), processCPU()-cpu0
	if took < 90*time.Millisecond {
		t.Errorf("three 30 ms sleeps returned after %v", took)
	}
	if cpu > took/2 {
		t.Errorf("three 30 ms sleeps took %v of CPU in %v", cpu, took)
	}
	start = time.Now()
	if outs, err := p.Handle(context.Background(), testEvent("p1")); err != nil || len(outs) != 1 {
		t.Fatalf("a poll of stdout: outputs %v, error %v (in %v)", outs, err, time.Since(start))
	}
}

// processCPU is the CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A size in an error never reads as the limit it is over: a memory of
// 16 MiB and a few bytes is not "16.0MiB", and a memory beside tables says
// the sum limits.memory counts (a plugin trial read "grow its memory to
// 16MiB with its tables' …, over limits.memory = 16MiB" as a paradox).
func TestSizesInErrorsAreNotRoundedOntoTheLimit(t *testing.T) {
	for n, want := range map[uint64]string{
		16 << 20:        "16MiB",
		16<<20 + 1232:   "16.001MiB",
		16<<20 + 64<<10: "16.1MiB",
		4<<20 + 64<<10:  "4.1MiB",
		1<<20 + 1:       "1.000001MiB",
		2<<20 - 1:       "1.999999MiB",
		64 << 10:        "64KiB",
		65664:           "65664 bytes",
		uint64(3 << 30): "3072MiB",
	} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
	p := &Plugin{tables: 1232}
	if got, want := p.withTables(16<<20), "16MiB (16.001MiB with its tables' 1232 bytes)"; got != want {
		t.Errorf("withTables = %q, want %q", got, want)
	}
}

// slowCopies makes each copy of an output out of a plugin's memory take d,
// for the test.
func slowCopies(t *testing.T, d time.Duration) {
	afterCopy = func() { time.Sleep(d) }
	t.Cleanup(func() { afterCopy = nil })
}

// The router's copying of a plugin's outputs does not count against
// limits.timeout: a plugin whose own work is instant passes though the
// copies take longer than its timeout, a copy under way when the time
// runs out included (a review: one that spanned it ended the call); a
// caller's deadline still bounds the call (a plugin trial: 16 outputs of
// 900 KiB timed out now and then at 50 ms, the copies on a cold heap).
func TestCopyingOutputsIsNotThePluginsTime(t *testing.T) {
	slowCopies(t, 150*time.Millisecond)
	rt, _ := newTestRuntime(t, "")
	p := load(t, rt, "fanout", config.PluginLimits{Timeout: 100 * time.Millisecond}, 1)
	start := time.Now()
	outs, err := p.Handle(context.Background(), testEvent("e1"))
	if err != nil || len(outs) != 2 {
		t.Fatalf("outputs %v, error %v (in %v)", outs, err, time.Since(start))
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("two copies of 150 ms took %v", took)
	}
	p = load(t, rt, "fanout", config.PluginLimits{Timeout: 10 * time.Second}, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = p.Handle(ctx, testEvent("e2"))
	mustRetry(t, err, "e2", "timed out: sy_handle ran longer than")
}

// What the host lends a call is added once: a plugin that loops forever
// after an output is still stopped, at its timeout and the copy's time.
func TestWasmHostileLoopAfterAnOutput(t *testing.T) {
	slowCopies(t, 300*time.Millisecond)
	rt, _ := newTestRuntime(t, "")
	p := load(t, rt, "emitloop", config.PluginLimits{Timeout: 250 * time.Millisecond}, 1)
	start := time.Now()
	_, err := p.Handle(context.Background(), testEvent("x1"))
	took := time.Since(start)
	if pe := mustRetry(t, err, "x1", "timed out: sy_handle ran longer than 250ms (and "); !strings.HasSuffix(pe.Reason, "ms the router took copying its outputs)") {
		t.Errorf("reason %q does not say the copy's time", pe.Reason)
	}
	if took < 550*time.Millisecond || took > time.Second {
		t.Errorf("took %v, want the timeout and the copy's 300 ms", took)
	}
}
