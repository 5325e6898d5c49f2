package wasm

import (
	"context"
	"io"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/switchyard-router/switchyard/config"
)

// BenchmarkHandle is the per-event cost of a plugin with timeouts on: one
// Handle (pool get/put, envelope, one guest call with its timer, outputs).
// Target for passthrough-wat: ≤ 3 µs.
func BenchmarkHandle(b *testing.B) {
	for _, name := range []string{"passthrough", "filter", "transformer", "splitter"} {
		b.Run(name+"-wat", func(b *testing.B) {
			rt := quietRuntime(b)
			p := load(b, rt, name, config.PluginLimits{}, 1)
			ev := testEvent("01JABCDEFGHJKMNPQRSTVWXYZ0")
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Handle(ctx, ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("passthrough-wat-parallel", func(b *testing.B) {
		rt := quietRuntime(b)
		p := load(b, rt, "passthrough", config.PluginLimits{}, 0)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			ev := testEvent("01JABCDEFGHJKMNPQRSTVWXYZ0")
			for pb.Next() {
				if _, err := p.Handle(context.Background(), ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// quietRuntime logs nothing: the transformer's log() at info is filtered
// out (the level check is all it costs).
func quietRuntime(b *testing.B) *Runtime {
	rt, err := NewRuntime(context.Background(), RuntimeOptions{Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.Discard})})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rt.Close(context.Background()) })
	return rt
}
