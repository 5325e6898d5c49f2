package wasm

import (
	"strings"
	"testing"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/cloudevents"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/engine"
	sdk "github.com/switchyard-router/switchyard/sdk/go"
)

// The Go SDK's CheckOutput, which its unit-test host (sdk.Run) holds every
// output to, refuses what the router refuses and takes what it takes: a
// plugin's unit tests passed with outputs the router then dead-lettered
// (a header "Tier", a destination with a space: an SDK trial).
func TestSDKChecksOutputsAsTheRouterDoes(t *testing.T) {
	hdrs := func(hs ...switchyard.Header) output { return output{HasHeaders: true, Headers: hs} }
	h := func(name, value string) switchyard.Header { return switchyard.Header{Name: name, Value: value} }
	for _, tc := range []struct {
		name string
		o    output
		ok   bool
	}{
		{"inherits everything", output{}, true},
		{"a route, a key, headers, data, an id", output{Destination: "nats.local:a.b", HasKey: true, Key: "k", HasData: true, Data: []byte("d"),
			HasID: true, ID: "x/1", HasHeaders: true, Headers: []switchyard.Header{h("tier", "vip"), h("traceparent", "00-x")}}, true},
		{"empty id", output{HasID: true}, false},
		{"CR LF in the id", output{HasID: true, ID: "a\r\nb"}, false},
		{"an id of 1024 bytes", output{HasID: true, ID: strings.Repeat("i", 1024)}, true},
		{"long id", output{HasID: true, ID: strings.Repeat("i", 1025)}, false},
		{"header name", hdrs(h("Tier", "x")), false},
		{"context attribute", hdrs(h("type", "x")), false},
		{"header value", hdrs(h("a", "\xff")), false},
		{"C1 control in a value", hdrs(h("a", "x\u0085")), false},
		{"long header value", hdrs(h("a", strings.Repeat("v", 4097))), false},
		{"a value of 4096 bytes", hdrs(h("a", strings.Repeat("v", 4096))), true},
		{"duplicate header", hdrs(h("a", "1"), h("a", "2")), false},
		{"key", output{HasKey: true, Key: "\xc0"}, false},
		{"CR LF in the key", output{HasKey: true, Key: "k\r\n"}, false},
		{"too many headers", hdrs(manyHeaders(257)...), false},
		{"256 and the trace context", hdrs(append(manyHeaders(256), h("traceparent", "t"), h("tracestate", "s"))...), true},
		{"destination", output{Destination: "nats.local: x"}, false},
		{"destination not UTF-8", output{Destination: "nats.local:\xff"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, routerErr := decodeOutput(appendOutput(nil, &tc.o))
			sdkErr := sdk.CheckOutput(toSDK(tc.o))
			if (routerErr == nil) != tc.ok || (sdkErr == nil) != tc.ok {
				t.Fatalf("router: %v; SDK: %v; want ok = %v from both", routerErr, sdkErr, tc.ok)
			}
		})
	}
}

// The Go SDK's limits are the router's: a plugin block's default output
// count and size, an output's header value, headers and id (the SDK, a
// module of its own, writes them again for plugin authors).
func TestSDKLimitsAreTheRouters(t *testing.T) {
	for _, c := range []struct {
		name        string
		sdk, router int64
	}{
		{"DefaultMaxOutputs", sdk.DefaultMaxOutputs, int64(config.DefaultPluginLimits.MaxOutputs)},
		{"DefaultMaxOutputBytes", sdk.DefaultMaxOutputBytes, config.DefaultPluginLimits.MaxOutputBytes},
		{"MaxHeaderValue", sdk.MaxHeaderValue, maxHeaderValue},
		{"MaxHeaderValue (the API's for extensions)", sdk.MaxHeaderValue, engine.MaxAttrLen},
		{"MaxExtensions", sdk.MaxExtensions, cloudevents.MaxExtensions},
		{"MaxIDLen", sdk.MaxIDLen, switchyard.MaxInboundIDLen},
	} {
		if c.sdk != c.router {
			t.Errorf("sdk.%s is %d, the router's %d", c.name, c.sdk, c.router)
		}
	}
}

// toSDK is o as the Go SDK's Output.
func toSDK(o output) sdk.Output {
	s := sdk.Output{Destination: o.Destination}
	if o.HasKey {
		s.Key = &o.Key
	}
	if o.HasHeaders {
		s.Headers = sdk.Headers{}
		for _, h := range o.Headers {
			s.Headers = append(s.Headers, sdk.Header{Name: h.Name, Value: h.Value})
		}
	}
	if o.HasData {
		s.Data = o.Data
	}
	if o.HasID {
		s.ID = &o.ID
	}
	return s
}
