package wasm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
)

// The state functions of module "switchyard" (optional imports; plugin ABI
// v1 with state, docs/plugin-abi.md "State"): a key-value store per plugin
// and event type whose writes count once per event outcome.
//
//	state_get(key_ptr, key_len, buf_ptr, buf_len) -> i32
//	    the value's length (its first buf_len bytes copied to buf), or
//	    StateNotFound; StateFailed when the store failed (return retry)
//	state_put(key_ptr, key_len, val_ptr, val_len, ttl_seconds) -> i32
//	    StateOK; a write over a limit is a broken rule (the event is
//	    rejected with the reason); ttl_seconds 0 = no expiry
//	state_delete(key_ptr, key_len) -> i32
//	    StateOK, also when the key was not there
const (
	StateOK       = 0
	StateNotFound = -1
	StateFailed   = -2 // the store failed, or no state here (a tool without one)
)

var stateFuncs = map[string]struct {
	fn    api.GoModuleFunc
	names []string
}{
	"state_get":    {hostStateGet, []string{"key_ptr", "key_len", "buf_ptr", "buf_len"}},
	"state_put":    {hostStatePut, []string{"key_ptr", "key_len", "val_ptr", "val_len", "ttl_seconds"}},
	"state_delete": {hostStateDelete, []string{"key_ptr", "key_len"}},
}

// importsState says whether the module imports a state function.
func importsState(m wazero.CompiledModule) bool {
	for _, f := range m.ImportedFunctions() {
		if mod, name, _ := f.Import(); mod == HostModule && stateFuncs[name].fn != nil {
			return true
		}
	}
	return false
}

// stateCall is the instance, its state and the key of a state call, or
// why it cannot run (the result to return).
func stateCall(ctx context.Context, mod api.Module, call string, ptr, n uint32) (*instance, []byte, int32) {
	in := instanceOf(ctx)
	if in != nil && in.phase == phaseInit {
		// It answered -2 ("failed, retry") without a word, which no retry
		// changes (a plugin author's trial): a load error, as emit is.
		in.broke("%s called in sy_init: plugin state is per event type and tenant, known only while sy_handle runs", call)
		return nil, nil, StateFailed
	}
	if in == nil || in.phase != phaseHandle {
		return nil, nil, StateFailed
	}
	if in.state == nil {
		in.stateErr = fmt.Errorf("%s: no plugin state here (this tool keeps none)", call)
		return nil, nil, StateFailed
	}
	key, ok := mod.Memory().Read(ptr, n)
	if !ok {
		in.broke("%s: the key (%d, %d) points outside the plugin's memory (%d bytes)", call, ptr, n, mod.Memory().Size())
		return nil, nil, StateFailed
	}
	return in, key, StateOK
}

func hostStateGet(ctx context.Context, mod api.Module, stack []uint64) {
	in, key, rc := stateCall(ctx, mod, "state_get", api.DecodeU32(stack[0]), api.DecodeU32(stack[1]))
	if in == nil {
		stack[0] = api.EncodeI32(rc)
		return
	}
	val, ok, err := in.state.Get(in.p.name, key)
	switch {
	case err != nil:
		in.stateErr = fmt.Errorf("state_get: %w", err)
		stack[0] = api.EncodeI32(StateFailed)
		return
	case !ok:
		stack[0] = api.EncodeI32(StateNotFound)
		return
	}
	buf, n := api.DecodeU32(stack[2]), api.DecodeU32(stack[3])
	if !mod.Memory().Write(buf, val[:min(uint32(len(val)), n)]) {
		in.broke("state_get: the buffer (%d, %d) points outside the plugin's memory (%d bytes)", buf, n, mod.Memory().Size())
		stack[0] = api.EncodeI32(StateFailed)
		return
	}
	stack[0] = api.EncodeI32(int32(len(val)))
}

func hostStatePut(ctx context.Context, mod api.Module, stack []uint64) {
	in, key, rc := stateCall(ctx, mod, "state_put", api.DecodeU32(stack[0]), api.DecodeU32(stack[1]))
	if in == nil {
		stack[0] = api.EncodeI32(rc)
		return
	}
	ptr, n := api.DecodeU32(stack[2]), api.DecodeU32(stack[3])
	val, ok := mod.Memory().Read(ptr, n)
	if !ok {
		in.broke("state_put: the value (%d, %d) points outside the plugin's memory (%d bytes)", ptr, n, mod.Memory().Size())
		stack[0] = api.EncodeI32(StateFailed)
		return
	}
	secs := api.DecodeI32(stack[4])
	if secs < 0 {
		// It read as "never expires": the opposite of what a plugin that
		// computed a negative time to live meant (a plugin author's trial).
		in.broke("state_put: ttl_seconds %d: a key lives 0 (for ever) or a positive number of seconds", secs)
		stack[0] = api.EncodeI32(StateFailed)
		return
	}
	ttl := time.Duration(secs) * time.Second
	stack[0] = api.EncodeI32(in.stateResult("state_put", in.state.Put(in.p.name, key, val, ttl)))
}

func hostStateDelete(ctx context.Context, mod api.Module, stack []uint64) {
	in, key, rc := stateCall(ctx, mod, "state_delete", api.DecodeU32(stack[0]), api.DecodeU32(stack[1]))
	if in == nil {
		stack[0] = api.EncodeI32(rc)
		return
	}
	stack[0] = api.EncodeI32(in.stateResult("state_delete", in.state.Delete(in.p.name, key)))
}

// stateResult turns a write's error into its result: a limit is a broken
// rule (it fails the same way every time), anything else a failure the
// plugin should answer with retry.
func (in *instance) stateResult(call string, err error) int32 {
	switch {
	case err == nil:
		return StateOK
	case errors.Is(err, switchyard.ErrStateLimit):
		in.broke("%s: %v", call, err)
	default:
		in.stateErr = fmt.Errorf("%s: %w", call, err)
	}
	return StateFailed
}

// MemoryState is a switchyard.StateView kept in memory, for tools and
// tests that run plugins without a router (router plugin test, the
// benchmarks): every event sees the writes of the ones before it, nothing
// is discarded, TTLs are ignored, and every plugin shares it. A write whose
// key or value is over its limit fails as in the router
// (config.CheckStateWrite); a namespace's totals are not counted.
type MemoryState map[string][]byte

// Get implements switchyard.StateView.
func (m MemoryState) Get(_ string, key []byte) ([]byte, bool, error) {
	v, ok := m[string(key)]
	return bytes.Clone(v), ok, nil
}

// Put implements switchyard.StateView.
func (m MemoryState) Put(_ string, key, value []byte, _ time.Duration) error {
	if err := config.CheckStateWrite(key, value); err != nil {
		return err
	}
	m[string(key)] = bytes.Clone(value)
	return nil
}

// Delete implements switchyard.StateView.
func (m MemoryState) Delete(_ string, key []byte) error {
	delete(m, string(key))
	return nil
}
