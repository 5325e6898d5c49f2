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

// maxBackoff bounds one wait: far past any outbox ttl, and within the
// times a record can hold (a float past an int64 became a negative wait,
// and so a retry at once, in a tight loop).
const maxBackoff = 100 * 365 * 24 * time.Hour

// Backoff is how long a failed event waits before its next attempt:
// delay × multiplier^(attempt-1), at most maxBackoff. Disabled backoff
// retries on the next poll.
func Backoff(b config.Backoff, attempt int) time.Duration {
	if !b.Enabled || attempt < 1 {
		return 0
	}
	d := float64(b.Delay)
	for range attempt - 1 {
		d *= b.Multiplier
		if d >= float64(maxBackoff) {
			return maxBackoff
		}
	}
	return time.Duration(d)
}
