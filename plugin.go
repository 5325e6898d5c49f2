package switchyard

import (
	"context"
	"errors"
	"time"
)

// Plugin transforms and routes one event: the engine knows plugins only
// through this interface; plugins/wasm implements it on wazero.
type Plugin interface {
	// Name is the plugin block's name in policies.hcl.
	Name() string
	// Handle runs the plugin on one event and returns its outputs: none
	// means the event is filtered (it ends "filtered", nothing sent). A verdict of retry returns an
	// error (the event is retried with backoff); a reject returns an error
	// wrapped with Permanent (the event goes to the DLQ with the reason).
	// Errors name the plugin and the event id. ev is the engine's for the
	// call only (it reuses the memory for the next event): a plugin that
	// keeps anything of it past Handle copies it.
	Handle(ctx context.Context, ev *Event) ([]PluginOutput, error)
}

// PluginOutput is one output of a plugin.
type PluginOutput struct {
	// Destination is "<sink>:<topic or subject>", for example
	// "kafka.main:orders"; "" sends the output along the type's routes.
	Destination string
	// Event is the output event: the input's, with whatever the plugin
	// replaced (key, headers, data, id). Its id is the input's unless the
	// plugin gave one (docs/decisions/output-ids.md).
	Event Event
	// Key is the partition key (Kafka record key).
	Key string
}

// ErrPluginRetry marks a plugin's retry verdict or failure (trap, timeout,
// memory limit, malformed output): the event is retried with backoff.
var ErrPluginRetry = errors.New("plugin asked for a retry")

// PluginModule says where a loaded plugin's code came from, for operators
// (the console's plugins page, GET /v1/plugins).
type PluginModule struct {
	File     string    // the module's path, as configured
	SHA256   string    // of the module's bytes, hex
	LoadedAt time.Time // when this module was loaded (start or reload)
}

// ModuleReporter is implemented by plugins that can say which module they
// run (plugins/wasm does).
type ModuleReporter interface {
	Module() PluginModule
}
