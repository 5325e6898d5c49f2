// Package switchyard is the router's vocabulary: the event it carries
// (Event, Header, Position), the contracts the engine schedules through
// (Message and Sink, Inbound and Source, Plugin), and its one coded Error.
// Every other package speaks these words: storage persists them, engine
// schedules them, api maps them to HTTP, cloudevents to each protocol
// binding, and plugins/* implement Sink, Source and Plugin for one
// technology each (the layout of benbjohnson/wtf and litestream).
//
// It also holds what the binary takes from the repository root: the shipped
// policies.hcl, so that `router run` works with no file at all and the
// defaults a user reads are the defaults the router runs.
package switchyard

import _ "embed"

// Policies is the shipped policies.hcl.
//
//go:embed policies.hcl
var Policies []byte
