package engine

import (
	"context"
	"testing"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
)

type namedPlugin string

func (p namedPlugin) Name() string { return string(p) }
func (namedPlugin) Handle(context.Context, *switchyard.Event) ([]switchyard.PluginOutput, error) {
	return nil, nil
}

// A policy read before a reload that removed one of its plugins, and the
// plugin set after it, make no chain (a nil plugin in it panicked the
// loop); the batch's events are then taken again (outputs).
func TestChainOfAPolicyWithoutItsPlugin(t *testing.T) {
	set := newPluginSet([]switchyard.Plugin{namedPlugin("a")})
	if chain, ok := set.chain(&config.Policy{Plugins: []string{"a"}}); !ok || len(chain) != 1 {
		t.Fatalf("a chain of a: %v %v", chain, ok)
	}
	if chain, ok := set.chain(&config.Policy{Plugins: []string{"a", "gone"}}); ok || chain != nil {
		t.Fatalf("a chain of a plugin the set lacks: %v %v", chain, ok)
	}
	if chain, ok := set.chain(&config.Policy{}); !ok || chain != nil {
		t.Fatalf("no plugins: %v %v", chain, ok)
	}
}
