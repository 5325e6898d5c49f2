package wasm

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/switchyard-router/switchyard"
)

// An event written to a plugin's input envelope decodes back to its
// attributes, key, extensions and data, and the envelope is laid out byte
// for byte as the ABI documents it for SDK authors.
func TestEventEnvelopeRoundTrip(t *testing.T) {
	ev := testEvent("e1")
	b := appendEvent(nil, ev)
	got, key, err := decodeEvent(b)
	if err != nil {
		t.Fatal(err)
	}
	if key != "k1" || got.ID != ev.ID || got.Type != ev.Type || got.Source != ev.Source || got.Subject != ev.Subject ||
		!reflect.DeepEqual(got.Extensions, ev.Extensions) || !bytes.Equal(got.Data, ev.Data) {
		t.Fatalf("decoded %+v key %q from %+v", got, key, ev)
	}
	// The layout, byte for byte, for the SDK authors.
	small := &switchyard.Event{ID: "i", Type: "t", Source: "s", Extensions: []switchyard.Header{{Name: "partitionkey", Value: "k"}}, Data: []byte("d")}
	want := "\x01" + "\x01\x00\x00\x00i" + "\x01\x00\x00\x00t" + "\x01\x00\x00\x00s" + "\x00\x00\x00\x00" + "\x01\x00\x00\x00k" +
		"\x01\x00\x00\x00" + "\x0c\x00\x00\x00partitionkey" + "\x01\x00\x00\x00k" + "\x01\x00\x00\x00d"
	if got := string(appendEvent(nil, small)); got != want {
		t.Fatalf("envelope %q, want %q", got, want)
	}
}

// An output envelope decodes to what was written (headers sorted), flags 0
// inherit everything, and the id comes after the data; a malformed envelope,
// or an id, key, header or destination the router cannot send, is refused
// saying where and what, while a 1024-byte id or 256 extensions pass.
func TestDecodeOutput(t *testing.T) {
	full := &output{Destination: "nats.local:x", HasKey: true, Key: "k", HasHeaders: true,
		Headers: []switchyard.Header{{Name: "b", Value: "2"}, {Name: "a", Value: "1"}}, HasData: true, Data: []byte("data"),
		HasID: true, ID: "e1/0"}
	b := appendOutput(nil, full)
	o, err := decodeOutput(b)
	if err != nil {
		t.Fatal(err)
	}
	sorted := *full
	sorted.Headers = []switchyard.Header{{Name: "a", Value: "1"}, {Name: "b", Value: "2"}}
	if !reflect.DeepEqual(o, sorted) {
		t.Fatalf("decoded %+v, want %+v (headers sorted)", o, sorted)
	}
	// flags 0: everything inherited
	if o, err := decodeOutput([]byte("\x00\x00\x00\x00\x00")); err != nil || !reflect.DeepEqual(o, output{}) {
		t.Fatalf("minimal envelope: %+v %v", o, err)
	}
	// The id comes last, after the data (the layout, for the SDK authors).
	if got, want := string(appendOutput(nil, &output{HasData: true, Data: []byte("d"), HasID: true, ID: "i"})),
		"\x00\x00\x00\x00"+"\x0c"+"\x01\x00\x00\x00d"+"\x01\x00\x00\x00i"; got != want {
		t.Fatalf("output envelope %q, want %q", got, want)
	}
	hdr := func(name, value string) []byte {
		return appendOutput(nil, &output{HasHeaders: true, Headers: []switchyard.Header{{Name: name, Value: value}}})
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "at byte 0: the envelope ends before the length of the destination (4 bytes, 0 left)"},
		{"no flags", []byte("\x00\x00\x00\x00"), "at byte 4: the envelope ends before the flags (1 byte)"},
		{"short destination", []byte("\x09\x00\x00\x00abc"), "at byte 0: the destination is 9 bytes long but only 3 bytes follow"},
		{"unknown flags", []byte("\x00\x00\x00\x00\x10"), "at byte 4: flags 0x10 has unknown bits (bit 0 key, bit 1 headers, bit 2 data, bit 3 id)"},
		{"id missing", []byte("\x00\x00\x00\x00\x08"), "at byte 5: the envelope ends before the length of the id"},
		{"empty id", appendOutput(nil, &output{HasID: true}), "the id: id must not be empty"},
		{"CR LF in the id", appendOutput(nil, &output{HasID: true, ID: "a\r\nNats-Msg-Id: x"}), `the id: attribute "id" has the control character U+000D at byte 1`},
		{"long id", appendOutput(nil, &output{HasID: true, ID: strings.Repeat("i", 1025)}), "the id is 1025 bytes long: an output's id is at most 1024"},
		{"key missing", []byte("\x00\x00\x00\x00\x01"), "at byte 5: the envelope ends before the length of the key"},
		{"huge header count", []byte("\x00\x00\x00\x00\x02\xff\xff\xff\xff"), "at byte 5: 4294967295 headers cannot fit in the 0 bytes left"},
		{"trailing bytes", []byte("\x00\x00\x00\x00\x00zz"), "at byte 5: 2 bytes follow the last field (flags 0x00)"},
		{"header name", hdr("Trace-Parent", "x"), `header name "Trace-Parent": names are 1 to 64 lower-case letters and digits`},
		{"context attribute", hdr("type", "x"), `header name "type" is a CloudEvents context attribute`},
		{"header value", hdr("a", "\xff"), `header "a": attribute "a" is not valid UTF-8`},
		{"CR LF in a header value", hdr("x", "a\r\nNats-Msg-Id: evil"), `header "x": attribute "x" has the control character U+000D at byte 1`},
		{"long header value", hdr("a", strings.Repeat("v", 4097)), `header "a": the value is longer than 4096 bytes`},
		{"duplicate header", appendOutput(nil, &output{HasHeaders: true, Headers: []switchyard.Header{{Name: "a"}, {Name: "a"}}}), `header "a" appears twice`},
		{"key", appendOutput(nil, &output{HasKey: true, Key: "\xc0"}), `the key: attribute "partitionkey" is not valid UTF-8`},
		{"CR LF in the key", appendOutput(nil, &output{HasKey: true, Key: "k\r\nx:"}), `the key: attribute "partitionkey" has the control character U+000D`},
		{"too many headers", appendOutput(nil, &output{HasHeaders: true, Headers: make([]switchyard.Header, 257)}), "257 headers: an event has at most 256 extension attributes"},
		{"destination", appendOutput(nil, &output{Destination: "nats.local: x"}), `destination "nats.local: x" contains white space`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeOutput(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	// An id as long as an inbox takes passes: one derived from a client's
	// longest ("<id>/<n>") fits.
	if _, err := decodeOutput(appendOutput(nil, &output{HasID: true, ID: strings.Repeat("i", 1024)})); err != nil {
		t.Errorf("an id of 1024 bytes: %v", err)
	}
	// 256 extensions and the trace context, as ingest lets an event have,
	// pass: the trace headers are not counted.
	hs := append(manyHeaders(256), switchyard.Header{Name: "traceparent", Value: "00-x"}, switchyard.Header{Name: "tracestate", Value: "a=1"})
	if _, err := decodeOutput(appendOutput(nil, &output{HasHeaders: true, Headers: hs})); err != nil {
		t.Errorf("256 extensions and the trace context: %v", err)
	}
}

// TestOutputKeyRules: the key and the partitionkey extension always agree.
func TestOutputKeyRules(t *testing.T) {
	p := &Plugin{}
	ev := testEvent("e1") // partitionkey k1, traceparent
	tp := ev.Extensions[1]
	for _, tc := range []struct {
		name    string
		o       output
		key     string
		headers []switchyard.Header
	}{
		{"inherit", output{}, "k1", ev.Extensions},
		{"new key", output{HasKey: true, Key: "k2"}, "k2", []switchyard.Header{{Name: "partitionkey", Value: "k2"}, tp}},
		{"key removed", output{HasKey: true}, "", []switchyard.Header{tp}},
		{"headers without partitionkey keep the key", output{HasHeaders: true, Headers: []switchyard.Header{{Name: "x", Value: "1"}}},
			"k1", []switchyard.Header{{Name: "partitionkey", Value: "k1"}, {Name: "x", Value: "1"}}},
		{"headers with partitionkey set the key", output{HasHeaders: true, Headers: []switchyard.Header{{Name: "partitionkey", Value: "k3"}}},
			"k3", []switchyard.Header{{Name: "partitionkey", Value: "k3"}}},
		{"the key wins over headers", output{HasKey: true, Key: "k4", HasHeaders: true, Headers: []switchyard.Header{{Name: "partitionkey", Value: "k3"}, {Name: "z", Value: "1"}}},
			"k4", []switchyard.Header{{Name: "partitionkey", Value: "k4"}, {Name: "z", Value: "1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := cloneEvent(ev)
			outs := p.outputs(ev, []output{tc.o})
			if got := outs[0]; got.Key != tc.key || !reflect.DeepEqual(got.Event.Extensions, tc.headers) {
				t.Errorf("key %q headers %+v, want %q %+v", got.Key, got.Event.Extensions, tc.key, tc.headers)
			}
			if !reflect.DeepEqual(*ev, before) {
				t.Errorf("the input changed")
			}
		})
	}
}

// An output's id replaces the input's; one without keeps it.
func TestOutputIDRules(t *testing.T) {
	p := &Plugin{}
	ev := testEvent("e1")
	outs := p.outputs(ev, []output{{}, {HasID: true, ID: "e1/1"}})
	if outs[0].Event.ID != "e1" || outs[1].Event.ID != "e1/1" || ev.ID != "e1" {
		t.Fatalf("ids %q %q (input %q), want e1 e1/1 (e1)", outs[0].Event.ID, outs[1].Event.ID, ev.ID)
	}
	if outs[1].Event.Source != ev.Source {
		t.Fatalf("source %q, want the input's %q", outs[1].Event.Source, ev.Source)
	}
}

// FuzzDecodeOutput: any bytes decode or fail cleanly (no panic, no huge
// allocation), and what decodes re-encodes to something that decodes the
// same. The seed corpus is in testdata/fuzz/FuzzDecodeOutput.
func FuzzDecodeOutput(f *testing.F) {
	f.Add([]byte("\x00\x00\x00\x00\x00"))
	f.Add(appendOutput(nil, &output{Destination: "kafka.main:orders", HasKey: true, Key: "k", HasHeaders: true,
		Headers: []switchyard.Header{{Name: "region", Value: "eu"}}, HasData: true, Data: []byte(`{"a":1}`)}))
	f.Add(appendOutput(nil, &output{HasData: true, Data: []byte("x"), HasID: true, ID: "e1/0"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		in := bytes.Clone(b)
		o, err := decodeOutput(in)
		if err != nil {
			if o.Destination != "" || o.Headers != nil || o.Data != nil {
				t.Fatalf("a failed decode returned %+v", o)
			}
			return
		}
		re := appendOutput(nil, &o)
		o2, err := decodeOutput(re)
		if err != nil {
			t.Fatalf("re-encoded %q does not decode: %v", re, err)
		}
		if !reflect.DeepEqual(o, o2) {
			t.Fatalf("round trip: %+v, then %+v", o, o2)
		}
		if len(re) != len(b) {
			t.Fatalf("re-encoded to %d bytes from %d", len(re), len(b))
		}
		// The result aliases its input: it must not be the caller's.
		if !bytes.Equal(in, b) {
			t.Fatalf("decodeOutput modified its input")
		}
	})
}

// Control characters a plugin writes reach the log as escapes, tabs and
// printable text as they are.
func TestEscapeControls(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, ünïcode\tand a tab": "plain text, ünïcode\tand a tab",
		"\x1b[2Jcleared":                 `\x1b[2Jcleared`,
		"a\x00b\r\nc":                    `a\x00b\x0d\x0ac`,
		"c1\u0085 and \u2028":            `c1\x85 and \u2028`,
	} {
		if got := escapeControls(in); got != want {
			t.Errorf("escapeControls(%q) = %q, want %q", in, got, want)
		}
	}
}

// manyHeaders is n distinct extension headers h0, h1, ….
func manyHeaders(n int) []switchyard.Header {
	hs := make([]switchyard.Header, n)
	for i := range hs {
		hs[i] = switchyard.Header{Name: fmt.Sprintf("h%d", i), Value: "v"}
	}
	return hs
}
