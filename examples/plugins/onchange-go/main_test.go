package main

import (
	"testing"

	sdk "github.com/switchyard-router/switchyard/sdk/go"
)

// A reading goes on only when it differs from the last one of its key.
func TestOnlyOnChange(t *testing.T) {
	defer sdk.ResetState()
	for i, c := range []struct {
		key, data string
		outputs   int
	}{{"s1", "1", 1}, {"s1", "1", 0}, {"s2", "1", 1}, {"s1", "2", 1}, {"s1", "2", 0}} {
		res, err := sdk.Run(nil, sdk.Event{ID: "e", Key: c.key, Data: []byte(c.data)})
		if err != nil || res.Verdict != sdk.OK || len(res.Outputs) != c.outputs {
			t.Fatalf("reading %d (%s=%s): %+v %v, want %d outputs", i, c.key, c.data, res, err, c.outputs)
		}
	}
}
