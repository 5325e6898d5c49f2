//go:build !wasip1

package sdk

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// An event written to the input envelope, laid out as the ABI says (the
// version, then the id), decodes back to itself.
func TestEventRoundTrip(t *testing.T) {
	in := Event{ID: "id-1", Type: "order.created", Source: "/shop", Subject: "s", Key: "k",
		Headers: Headers{{"traceparent", "00-abc"}, {"region", "eu"}}, Data: []byte(`{"amount":5}`)}
	b := appendEvent(nil, &in)
	// Hand-built reference for the first fields: version, then str id.
	if b[0] != 1 || !bytes.Equal(b[1:5], []byte{4, 0, 0, 0}) || string(b[5:9]) != "id-1" {
		t.Fatalf("bad layout % x", b[:12])
	}
	out, err := decodeEvent(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.ID != in.ID || out.Type != in.Type || out.Source != in.Source || out.Subject != in.Subject ||
		out.Key != in.Key || len(out.Headers) != 2 || out.Headers[1] != in.Headers[1] || string(out.Data) != string(in.Data) {
		t.Fatalf("round trip: %+v", out)
	}
}

// An input envelope cut at any byte, with a byte too many, of another
// version, or claiming a huge header count is ErrMalformed.
func TestDecodeEventMalformed(t *testing.T) {
	good := appendEvent(nil, &Event{ID: "a", Headers: Headers{{"x", "y"}}, Data: []byte("d")})
	for i := 0; i < len(good); i++ {
		if _, err := decodeEvent(good[:i]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("truncated at %d: err = %v", i, err)
		}
	}
	if _, err := decodeEvent(append(append([]byte{}, good...), 0)); !errors.Is(err, ErrMalformed) {
		t.Fatal("trailing byte accepted")
	}
	bad := append([]byte{}, good...)
	bad[0] = 2
	if _, err := decodeEvent(bad); !errors.Is(err, ErrMalformed) {
		t.Fatal("version 2 accepted")
	}
	// A huge header count must fail without allocating for it.
	huge := []byte{1}
	for i := 0; i < 5; i++ {
		huge = appendStr(huge, "")
	}
	huge = appendU32(huge, 0xffffffff)
	if _, err := decodeEvent(huge); !errors.Is(err, ErrMalformed) {
		t.Fatal("huge header count accepted")
	}
}

// Each output field sets its flag bit and survives a round trip; the
// envelope layout is the ABI's, byte for byte.
func TestOutputFlags(t *testing.T) {
	cases := []struct {
		o     Output
		flags byte
	}{
		{Output{}, 0},
		{To("nats.local:x").WithKey(""), FlagKey},
		{To("").WithHeaders(nil), FlagHeaders},
		{To("").WithData(nil), FlagData},
		{To("kafka.main:t").WithKey("k").WithHeaders(Headers{{"a", "b"}}).WithData([]byte("z")), 7},
		{To("").WithID("e1/0"), FlagID},
		{To("").WithData([]byte("z")).WithID("e1/1"), FlagData | FlagID},
	}
	for _, c := range cases {
		b := appendOutput(nil, &c.o)
		n := int(b[0]) | int(b[1])<<8 | int(b[2])<<16 | int(b[3])<<24
		if got := b[4+n]; got != c.flags {
			t.Errorf("%+v: flags %d, want %d", c.o, got, c.flags)
		}
		back, err := decodeOutput(b)
		if err != nil {
			t.Fatal(err)
		}
		if back.Destination != c.o.Destination || (back.Key == nil) != (c.o.Key == nil) ||
			(back.Headers == nil) != (c.o.Headers == nil) || (back.Data == nil) != (c.o.Data == nil) ||
			(back.ID == nil) != (c.o.ID == nil) || back.ID != nil && *back.ID != *c.o.ID {
			t.Errorf("round trip %+v -> %+v", c.o, back)
		}
	}
	// The id comes last, after the data (docs/plugin-abi.md).
	if b := appendOutput(nil, ptr(To("").WithData([]byte("d")).WithID("i"))); string(b) != "\x00\x00\x00\x00\x0c\x01\x00\x00\x00d\x01\x00\x00\x00i" {
		t.Fatalf("output with data and id % x", b)
	}
	// The pass-through output is exactly 5 bytes: empty destination, flags 0.
	if b := appendOutput(nil, &Output{}); !bytes.Equal(b, []byte{0, 0, 0, 0, 0}) {
		t.Fatalf("forward envelope % x", b)
	}
}

// The config envelope lists its entries sorted by key, byte for byte as the
// ABI lays it out, and decodes back to the same map.
func TestConfig(t *testing.T) {
	b := appendConfig(nil, map[string]string{"b": "2", "a": "1"})
	want := []byte{2, 0, 0, 0, 1, 0, 0, 0, 'a', 1, 0, 0, 0, '1', 1, 0, 0, 0, 'b', 1, 0, 0, 0, '2'}
	if !bytes.Equal(b, want) {
		t.Fatalf("config envelope % x", b)
	}
	m, err := decodeConfig(b)
	if err != nil || m["a"] != "1" || m["b"] != "2" || len(m) != 2 {
		t.Fatalf("%v %v", m, err)
	}
}

// Get gives a name's first value, Set leaves one value under a name (or
// adds it), Del removes every value of a name, and changing a clone leaves
// the original as it was.
func TestHeaders(t *testing.T) {
	h := Headers{{"a", "1"}, {"b", "2"}, {"a", "3"}}
	if v, ok := h.Get("a"); !ok || v != "1" {
		t.Fatal(v, ok)
	}
	s := h.Clone().Set("a", "9")
	if len(s) != 2 || s[0] != (Header{"a", "9"}) || s[1] != (Header{"b", "2"}) {
		t.Fatal(s)
	}
	if s := Headers(nil).Set("x", "y"); len(s) != 1 {
		t.Fatal(s)
	}
	if d := h.Del("a"); len(d) != 1 || d[0].Name != "b" {
		t.Fatal(d)
	}
	if h[0] != (Header{"a", "1"}) {
		t.Fatal("Clone+Set changed the original")
	}
}

// A header name is lower-case letters and digits, and no CloudEvents
// context attribute: an empty name, a dash, upper case, "type" or "id" is
// refused.
func TestValidHeaderName(t *testing.T) {
	for _, n := range []string{"region", "x9", "traceparent", "partitionkey"} {
		if !ValidHeaderName(n) {
			t.Errorf("%q refused", n)
		}
	}
	for _, n := range []string{"", "a-b", "Region", "type", "id", string(make([]byte, 65))} {
		if ValidHeaderName(n) {
			t.Errorf("%q accepted", n)
		}
	}
}

// Run plays the host for a plugin's unit tests: the config reaches Init,
// an event gets the handler's verdict, outputs, logs and reason (ok,
// reject, retry), and a failing Init is an InitError with its reason.
func TestRun(t *testing.T) {
	var seen map[string]string
	Init(func(cfg map[string]string) error {
		seen = cfg
		if cfg["bad"] != "" {
			return errors.New("bad config")
		}
		return nil
	})
	Handle(func(ev *Event) Verdict {
		var v struct{ N int }
		if err := ev.JSON(&v); err != nil {
			return Reject("not json: " + err.Error())
		}
		if v.N < 0 {
			return Retry("negative")
		}
		Log(LevelInfo, "n")
		for i := 0; i < v.N; i++ {
			if err := Emit(To("nats.local:x").WithKey(ev.ID)); err != nil {
				return Retry(err.Error())
			}
		}
		return OK
	})
	defer func() { handler, initFunc = nil, nil }()

	res, err := Run(map[string]string{"k": "v"}, Event{ID: "e1", Data: []byte(`{"N":2}`)})
	if err != nil || res.Verdict != OK || len(res.Outputs) != 2 || *res.Outputs[1].Key != "e1" || seen["k"] != "v" || len(res.Logs) != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	res, _ = Run(nil, Event{Data: []byte(`nope`)})
	if res.Verdict != VerdictReject || res.Reason == "" {
		t.Fatalf("%+v", res)
	}
	res, _ = Run(nil, Event{Data: []byte(`{"N":-1}`)})
	if res.Verdict != VerdictRetry || res.Reason != "negative" {
		t.Fatalf("%+v", res)
	}
	var ie *InitError
	if _, err := Run(map[string]string{"bad": "1"}, Event{}); !errors.As(err, &ie) || ie.Reason != "bad config" {
		t.Fatalf("init error: %v", err)
	}
}

// Run's simulated host refuses an output the router refuses, as the
// router does (Emit fails, Run returns why), and one past the default
// limits.max_outputs, and one whose envelope is over the default
// limits.max_output_bytes: it took them, and the plugin's unit tests passed
// where the router dead-lettered the event.
func TestRunRefusesWhatTheRouterRefuses(t *testing.T) {
	var emitErr, afterErr error
	Handle(func(ev *Event) Verdict {
		n, _ := ev.Headers.Get("n")
		for i := 0; i < len(n); i++ {
			if emitErr = Emit(To("nats.local:a").WithHeaders(Headers{{Name: "tier", Value: "vip"}})); emitErr != nil {
				return Reject(emitErr.Error())
			}
		}
		if _, big := ev.Headers.Get("big"); big {
			emitErr = Emit(To("nats.local:a").WithData(make([]byte, DefaultMaxOutputBytes)))
		}
		if _, bad := ev.Headers.Get("bad"); bad {
			emitErr = Emit(To("nats.local:a b"))
			afterErr = Emit(To("nats.local:a")) // the call failed: the router keeps it failed
		}
		return OK
	})
	defer func() { handler = nil }()
	if res, err := Run(nil, Event{ID: "e1", Headers: Headers{{Name: "n", Value: "x"}}}); err != nil || len(res.Outputs) != 1 {
		t.Fatalf("a good output: %+v, %v", res, err)
	}
	_, err := Run(nil, Event{ID: "e1", Headers: Headers{{Name: "bad", Value: "1"}}})
	if emitErr == nil || afterErr == nil || err == nil || !strings.Contains(err.Error(), `output 1 refused: destination "nats.local:a b" contains white space`) {
		t.Fatalf("a destination with a space: emit %v, the next emit %v, run %v", emitErr, afterErr, err)
	}
	_, err = Run(nil, Event{ID: "e1", Headers: Headers{{Name: "n", Value: strings.Repeat("x", 17)}}})
	if emitErr == nil || err == nil || !strings.Contains(err.Error(), "output 17 refused: over limits.max_outputs (16 by default)") {
		t.Fatalf("17 outputs: emit %v, run %v", emitErr, err)
	}
	_, err = Run(nil, Event{ID: "e1", Headers: Headers{{Name: "big", Value: "1"}}})
	if emitErr == nil || err == nil || !strings.Contains(err.Error(), "output 1 refused: over limits.max_output_bytes (1 MiB by default)") {
		t.Fatalf("an output over 1 MiB: emit %v, run %v", emitErr, err)
	}
}

// The state functions through Run's simulated host: a value written by one
// event is read by the next, a value longer than the first read buffer
// comes back whole, a delete removes it, and ResetState empties the state.
func TestState(t *testing.T) {
	Handle(func(ev *Event) Verdict {
		v, _, err := StateGet([]byte(ev.Subject))
		if err != nil {
			return Retry(err.Error())
		}
		if ev.Type == "delete" {
			StateDelete([]byte(ev.Subject))
			return OK
		}
		if err := StatePut([]byte(ev.Subject), append(v, ev.Data...), 0); err != nil {
			return Retry(err.Error())
		}
		return OK
	})
	defer func() { handler = nil; ResetState() }()
	long := strings.Repeat("x", 300)
	for _, d := range []string{"a", long} {
		if res, err := Run(nil, Event{Subject: "k", Data: []byte(d)}); err != nil || res.Verdict != OK {
			t.Fatalf("%+v %v", res, err)
		}
	}
	if v, ok, err := StateGet([]byte("k")); !ok || err != nil || string(v) != "a"+long {
		t.Fatalf("state k = %d bytes %v %v, want the two appended", len(v), ok, err)
	}
	Run(nil, Event{Type: "delete", Subject: "k"})
	if _, ok, _ := StateGet([]byte("k")); ok {
		t.Fatal("deleted key still there")
	}
	StatePut([]byte("z"), []byte("1"), 0)
	ResetState()
	if _, ok, _ := StateGet([]byte("z")); ok {
		t.Fatal("ResetState kept a key")
	}
}

// A time to live reaches the host in whole seconds rounded up, so that a
// sub-second one is a second and not 0 ("no expiry"), clamped to the
// ABI's int32, and negative when it is (the host rejects that).
func TestTTLSeconds(t *testing.T) {
	for ttl, want := range map[time.Duration]int32{
		0: 0, time.Nanosecond: 1, 500 * time.Millisecond: 1, time.Second: 1, 1500 * time.Millisecond: 2,
		time.Hour: 3600, -time.Second: -1, 1<<63 - 1: math.MaxInt32,
	} {
		if got := ttlSeconds(ttl); got != want {
			t.Errorf("ttlSeconds(%v) = %d, want %d", ttl, got, want)
		}
	}
}

func ptr[T any](v T) *T { return &v }
