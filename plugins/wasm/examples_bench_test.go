package wasm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
)

// exampleDir is where the example plugins live, relative to this package.
var exampleDir = filepath.Join("..", "..", "examples", "plugins")

// examplePlugins are the example plugins with the config their READMEs
// load them with, and the number of outputs their event.json gives.
var examplePlugins = []struct {
	dir, wasm string
	config    map[string]string
	limits    config.PluginLimits
	outputs   int
}{
	{"route-go", "route.wasm", map[string]string{
		"threshold":         "1000",
		"large_destination": "kafka.main:orders.large",
		"small_destination": "nats.local:orders.small",
	}, config.PluginLimits{Memory: 16 << 20}, 1},
	{"enrich-c", "enrich.wasm", map[string]string{"region": "eu-1"}, config.PluginLimits{}, 1},
	{"filter-as", "filter.wasm", map[string]string{
		"drop_types":     "debug.*,audit.login",
		"drop_if_header": "env=test",
	}, config.PluginLimits{}, 1},
	{"split-rust", "split.wasm", map[string]string{
		"destination":  "nats.local:items",
		"index_header": "splitindex",
	}, config.PluginLimits{MaxOutputs: 1000}, 4},
	{"passthrough-wat", "passthrough.wasm", nil, config.PluginLimits{}, 1},
}

// BenchmarkExamples is the per-event cost of each example plugin in
// examples/plugins through the real host, with timeouts on: its README's
// config, its event.json, one Handle per iteration (as BenchmarkHandle).
// Target for C, AssemblyScript and WAT: ≤ 3 µs.
func BenchmarkExamples(b *testing.B) {
	for _, ex := range examplePlugins {
		b.Run(ex.dir, func(b *testing.B) {
			rt := quietRuntime(b)
			lim := ex.limits
			lim.Timeout = 10 * time.Second // armed on every call; long, so a stalled machine does not fail the run
			p, err := rt.Load(context.Background(), config.Plugin{
				Name:   ex.dir,
				Wasm:   filepath.Join(exampleDir, ex.dir, ex.wasm),
				Config: ex.config,
				Limits: withDefaults(lim),
			}, LoadOptions{Instances: 1})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { p.Close(context.Background()) })
			ev := exampleEvent(b, filepath.Join(exampleDir, ex.dir, "event.json"))
			ctx := context.Background()
			outs, err := p.Handle(ctx, ev)
			if err != nil || len(outs) != ex.outputs {
				b.Fatalf("%s on event.json: %d outputs, error %v; want %d outputs", ex.dir, len(outs), err, ex.outputs)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Handle(ctx, ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// exampleEvent reads a structured CloudEvent (an example's event.json): its
// attributes as strings, its data as JSON.
func exampleEvent(tb testing.TB, path string) *switchyard.Event {
	tb.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	ev := &switchyard.Event{DataContentType: "application/json", Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	for k, v := range m {
		if k == "data" {
			ev.Data = bytes.TrimSpace(v)
			continue
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			tb.Fatalf("%s: attribute %q: %v", path, k, err)
		}
		switch k {
		case "specversion":
			ev.SpecVersion = s
		case "id":
			ev.ID = s
		case "source":
			ev.Source = s
		case "type":
			ev.Type = s
		case "subject":
			ev.Subject = s
		case "datacontenttype":
			ev.DataContentType = s
		default:
			ev.Extensions = append(ev.Extensions, switchyard.Header{Name: k, Value: s})
		}
	}
	slices.SortFunc(ev.Extensions, func(a, b switchyard.Header) int { return strings.Compare(a.Name, b.Name) })
	return ev
}

// BenchmarkLoad is what a router start or a reload costs per plugin: Load
// (compile or read the compiled module, validate, start one instance and
// run _initialize, sy_abi_version and sy_init) of each example, cold (a new
// runtime with no cache: compiles every time) and cached (a new runtime on
// a cache directory that holds the module, as <data dir>/wasm-cache does
// after the first start).
func BenchmarkLoad(b *testing.B) {
	ctx := context.Background()
	for _, ex := range examplePlugins {
		cfg := config.Plugin{Name: ex.dir, Wasm: filepath.Join(exampleDir, ex.dir, ex.wasm), Config: ex.config, Limits: withDefaults(ex.limits)}
		for _, mode := range []string{"cold", "cached"} {
			b.Run(ex.dir+"/"+mode, func(b *testing.B) {
				dir := ""
				if mode == "cached" {
					dir = b.TempDir()
					warm(b, ctx, dir, cfg)
				}
				for b.Loop() {
					rt, err := NewRuntime(ctx, RuntimeOptions{CacheDir: dir})
					if err != nil {
						b.Fatal(err)
					}
					p, err := rt.Load(ctx, cfg, LoadOptions{Instances: 1})
					if err != nil {
						b.Fatal(err)
					}
					p.Close(ctx)
					rt.Close(ctx)
				}
			})
		}
	}
}

// warm compiles cfg's module into the cache at dir.
func warm(b *testing.B, ctx context.Context, dir string, cfg config.Plugin) {
	rt, err := NewRuntime(ctx, RuntimeOptions{CacheDir: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close(ctx)
	p, err := rt.Load(ctx, cfg, LoadOptions{Instances: 1})
	if err != nil {
		b.Fatal(err)
	}
	p.Close(ctx)
}

// BenchmarkState is the per-event cost of plugins that read and write their
// state through the real host — one state_get and one state_put per event —
// with an in-memory view (in the router the engine's overlay and the commit
// come on top). Two events alternate so that every event writes:
// wat-counter against wat-passthrough isolates the two host calls;
// go-onchange and rust-threshold are the examples. $SWITCHYARD_STATE_BENCH
// may name more modules ("name=file.wasm,..."), such as the C and
// AssemblyScript counters of the SDK READMEs built by hand.
func BenchmarkState(b *testing.B) {
	type stateCase struct {
		name, wasm string
		config     map[string]string
		events     [2]string // event.json files, or inline JSON
	}
	reading := func(key, data string) string {
		return fmt.Sprintf(`{"id":"r","type":"sensor.reading","source":"/b","partitionkey":%q,"data":%s}`, key, data)
	}
	cases := []stateCase{
		{"wat-passthrough", testdata("passthrough"), nil, [2]string{reading("k", "1"), reading("k", "2")}},
		{"wat-counter", testdata("counter"), nil, [2]string{reading("k", "1"), reading("k", "2")}},
		{"go-onchange", filepath.Join(exampleDir, "onchange-go", "onchange.wasm"), nil, [2]string{reading("k", "1"), reading("k", "2")}},
		{"rust-threshold", filepath.Join(exampleDir, "threshold-rust", "threshold.wasm"),
			map[string]string{"threshold": "30", "alert_destination": "nats.local:alerts", "field": "celsius"},
			[2]string{reading("k", `{"celsius": 31.5}`), reading("k", `{"celsius": 20}`)}},
	}
	for _, more := range strings.Split(os.Getenv("SWITCHYARD_STATE_BENCH"), ",") {
		if name, file, ok := strings.Cut(more, "="); ok {
			cases = append(cases, stateCase{name, file, nil, [2]string{reading("k", "1"), reading("k", "2")}})
		}
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			rt := quietRuntime(b)
			p, err := rt.Load(context.Background(), config.Plugin{Name: c.name, Wasm: c.wasm, Config: c.config,
				Limits: withDefaults(config.PluginLimits{Timeout: 10 * time.Second})}, LoadOptions{Instances: 1})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { p.Close(context.Background()) })
			var evs [2]*switchyard.Event
			for i, src := range c.events {
				f := filepath.Join(b.TempDir(), "event.json")
				os.WriteFile(f, []byte(src), 0o644)
				evs[i] = exampleEvent(b, f)
			}
			view := MemoryState{}
			ctx := switchyard.WithState(context.Background(), view)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := p.Handle(ctx, evs[i&1]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			if c.name != "wat-passthrough" && len(view) == 0 {
				b.Fatalf("%s wrote no state", c.name)
			}
		})
	}
}
