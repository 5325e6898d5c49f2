package engine

import (
	"context"

	"github.com/switchyard-router/switchyard"
)

// runChain runs plugins in order, each on every output of the one before.
func runChain(ctx context.Context, chain []switchyard.Plugin, ev *switchyard.Event) ([]switchyard.PluginOutput, error) {
	outs := []switchyard.PluginOutput{{Event: *ev, Key: ev.PartitionKey()}}
	for _, p := range chain {
		var next []switchyard.PluginOutput
		for i := range outs {
			got, err := p.Handle(ctx, &outs[i].Event)
			if err != nil {
				return nil, err
			}
			for _, o := range got {
				if o.Destination == "" {
					o.Destination = outs[i].Destination
				}
				next = append(next, o)
			}
		}
		outs = next
	}
	return outs, nil
}
