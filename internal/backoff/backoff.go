// Package backoff holds the waits the inbox sources share: a delay that
// doubles between failed receives, and a sleep that ends with its context.
package backoff

import (
	"context"
	"time"
)

// Receive bounds the pause after a failed receive (the data file could not
// take the batch): the first is Min, each next one doubles, up to Max.
var Receive = Doubling{Min: 500 * time.Millisecond, Max: 30 * time.Second}

// Doubling is a delay that starts at Min and doubles up to Max.
type Doubling struct{ Min, Max time.Duration }

// Next is the delay after d: Min when d is zero, else twice d up to Max.
func (b Doubling) Next(d time.Duration) time.Duration {
	if d <= 0 {
		return b.Min
	}
	return min(2*d, b.Max)
}

// Sleep waits d or until ctx ends; it reports whether the full d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
