package switchyard

import (
	"context"
	"errors"
	"time"
)

// StateView is what a plugin's state calls (ABI: state_get, state_put,
// state_delete) reach while it handles one event: the committed state of
// its namespace, with the writes of this event and of the events before it
// in the batch (docs/plugin-state.md). The engine provides it; the writes
// become durable in the transaction that records the event's outcome.
type StateView interface {
	Get(plugin string, key []byte) (value []byte, ok bool, err error)
	Put(plugin string, key, value []byte, ttl time.Duration) error
	Delete(plugin string, key []byte) error
}

// ErrStateLimit marks a write over a state limit (key or value size, keys
// or bytes of a namespace): the same write fails every time.
var ErrStateLimit = errors.New("over a plugin state limit")

type stateKey struct{}

// WithState returns ctx carrying the state view of the event being handled.
func WithState(ctx context.Context, v StateView) context.Context {
	return context.WithValue(ctx, stateKey{}, v)
}

// StateFrom returns the state view ctx carries, or nil.
func StateFrom(ctx context.Context) StateView {
	v, _ := ctx.Value(stateKey{}).(StateView)
	return v
}
