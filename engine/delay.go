package engine

import (
	"time"

	"github.com/switchyard-router/switchyard/config"
)

// Delay is the poll delay of one loop (contract §5, oncebox's rule): a poll
// that returns a full batch resets the delay to Min; a partial or empty one
// multiplies it by Multiplier, capped at Max. A fixed policy always waits
// Min. It is pure logic: the loop feeds it outcomes, tests feed it a clock.
type Delay struct {
	policy  config.Polling
	current time.Duration
}

// NewDelay starts at the policy's minimum.
func NewDelay(p config.Polling) *Delay { return &Delay{policy: p, current: p.Min} }

// Current is the delay the loop waits now.
func (d *Delay) Current() time.Duration { return d.current }

// Next records a poll's outcome and returns the delay until the next poll.
func (d *Delay) Next(full bool) time.Duration {
	switch {
	case d.policy.Type == config.PollingFixed || full:
		d.current = d.policy.Min
	default:
		next := time.Duration(float64(d.current) * d.policy.Multiplier)
		d.current = min(next, d.policy.Max)
	}
	return d.current
}

// Backoff is how long a failed event waits before its next attempt:
// delay × multiplier^(attempt-1). Disabled backoff retries on the next poll.
func Backoff(b config.Backoff, attempt int) time.Duration {
	if !b.Enabled || attempt < 1 {
		return 0
	}
	d := float64(b.Delay)
	for range attempt - 1 {
		d *= b.Multiplier
	}
	return time.Duration(d)
}
