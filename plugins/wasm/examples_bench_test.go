package wasm

import (
	"bytes"
	"context"
	"encoding/json"
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
