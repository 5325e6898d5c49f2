package engine

import (
	"context"
	"time"

	"github.com/switchyard-router/switchyard"
)

// doubleSink makes every publish happen twice: the double-send mode
// (`router run -double-send`), so that any receiver that is not idempotent
// shows up in tests before it does in production. The second send's
// results are the ones recorded: if the first went through and the second
// failed, the event is retried, as it would be after a lost ack.
type doubleSink struct{ switchyard.Sink }

func (d doubleSink) Publish(ctx context.Context, msgs []*switchyard.Message) []switchyard.Result {
	d.Sink.Publish(ctx, msgs)
	return d.Sink.Publish(ctx, msgs)
}

// Healthy passes through to the wrapped sink when it can tell.
func (d doubleSink) Healthy(ctx context.Context) error {
	if h, ok := d.Sink.(switchyard.HealthChecker); ok {
		return h.Healthy(ctx)
	}
	return nil
}

// Kept passes through to the sink, so that double-send does not change
// what a republish after an unclean stop sends again.
func (d doubleSink) Kept(ctx context.Context, msgs []switchyard.Acked, window time.Duration) ([]bool, []switchyard.Stored, error) {
	if k, ok := d.Sink.(switchyard.Keeper); ok {
		return k.Kept(ctx, msgs, window)
	}
	return make([]bool, len(msgs)), nil, nil
}
