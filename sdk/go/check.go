package sdk

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Output limits the router holds every output to (plugins/wasm/envelope.go
// in the router's repository, output.check).
const (
	MaxHeaderValue = 4096 // bytes of one header's value
	MaxExtensions  = 256  // headers of one output, the trace context (traceparent, tracestate) aside
	MaxIDLen       = 1024 // bytes of an output's id
	// DefaultMaxOutputs is limits.max_outputs unless the plugin's block
	// sets it: the outputs of one call.
	DefaultMaxOutputs = 16
	// DefaultMaxOutputBytes is limits.max_output_bytes unless the plugin's
	// block sets it: the bytes of one output's envelope (its destination,
	// key, id, headers and data as Emit encodes them).
	DefaultMaxOutputBytes = 1 << 20
)

// CheckOutput says why the router would refuse o, or nil: a destination
// with white space or not UTF-8; a key, id or header value that is not
// UTF-8 or holds a control character (U+0000-U+001F, U+007F-U+009F); an
// empty or over-long id; a header name ValidHeaderName refuses, a name
// given twice, a value over MaxHeaderValue, or more than MaxExtensions
// headers. The router rejects the event when one output is refused
// (dead-lettered with the reason at its first attempt). Outside wasip1,
// Emit checks every output with it, so that a unit test (Run) fails where
// the router would: it took outputs the router refuses.
func CheckOutput(o Output) error {
	if !utf8.ValidString(o.Destination) {
		return fmt.Errorf("the destination is not valid UTF-8")
	}
	if strings.ContainsAny(o.Destination, " \t\r\n") {
		return fmt.Errorf("destination %q contains white space", o.Destination)
	}
	if o.Key != nil {
		if err := checkAttr("the key", *o.Key); err != nil {
			return err
		}
	}
	if o.ID != nil {
		switch id := *o.ID; {
		case id == "":
			return fmt.Errorf("the id is empty")
		case len(id) > MaxIDLen:
			return fmt.Errorf("the id is %d bytes, over %d", len(id), MaxIDLen)
		default:
			if err := checkAttr("the id", id); err != nil {
				return err
			}
		}
	}
	return checkHeaders(o.Headers)
}

// checkHeaders is CheckOutput's part for the headers.
func checkHeaders(hs Headers) error {
	exts := 0
	seen := make(map[string]bool, len(hs))
	for _, h := range hs {
		if h.Name != "traceparent" && h.Name != "tracestate" {
			exts++
		}
		switch {
		case !ValidHeaderName(h.Name):
			return fmt.Errorf("header name %q: names are 1 to 64 lower-case letters and digits, not a context attribute (id, source, type, ...)", h.Name)
		case seen[h.Name]:
			return fmt.Errorf("header %q appears twice", h.Name)
		case len(h.Value) > MaxHeaderValue:
			return fmt.Errorf("header %q: the value is longer than %d bytes", h.Name, MaxHeaderValue)
		}
		seen[h.Name] = true
		if err := checkAttr("header "+fmt.Sprintf("%q", h.Name), h.Value); err != nil {
			return err
		}
	}
	if exts > MaxExtensions {
		return fmt.Errorf("%d headers: an event has at most %d extension attributes", exts, MaxExtensions)
	}
	return nil
}

// checkAttr holds what names an attribute's value to CloudEvents'
// attribute strings: UTF-8 without control characters.
func checkAttr(what, v string) error {
	if !utf8.ValidString(v) {
		return fmt.Errorf("%s is not valid UTF-8", what)
	}
	for i, r := range v {
		if r <= 0x1f || r >= 0x7f && r <= 0x9f {
			return fmt.Errorf("%s has the control character %U at byte %d", what, r, i)
		}
	}
	return nil
}
