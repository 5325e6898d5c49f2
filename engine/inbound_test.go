package engine

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/cloudevents"
	"github.com/switchyard-router/switchyard/internal/testkit"
)

// A broker message becomes the event its CloudEvents headers say, by the
// Kafka or NATS binding's rules (percent-decoding only for ce-), with a
// warning for each value kept raw, replaced or dropped, an id from a
// configured header, and an id derived when it is missing, empty or too
// long.
func TestDecodeInbound(t *testing.T) {
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	at := time.Date(2026, 3, 4, 5, 6, 7, 890000000, time.UTC)
	hs := func(kv ...string) []switchyard.Header {
		out := make([]switchyard.Header, 0, len(kv)/2)
		for i := 0; i < len(kv); i += 2 {
			out = append(out, switchyard.Header{Name: kv[i], Value: kv[i+1]})
		}
		return out
	}
	tests := []struct {
		name     string
		headers  []switchyard.Header
		value    string
		binding  cloudevents.Binding
		idHeader string
		want     switchyard.Event
		derived  bool
		tooLong  bool
		warnings int
	}{
		{
			name: "kafka binding",
			headers: hs("ce_specversion", "1.0", "ce_id", "a-1", "ce_source", "/pay", "ce_type", "payment.done",
				"ce_subject", "inv/7", "ce_time", "2026-03-04T05:06:07.89Z", "ce_dataschema", "urn:s",
				"content-type", "application/json", "ce_partitionkey", "cust-1", "traceparent", tp,
				"tracestate", "k=v", "x-app", "ignored"),
			value:   `{"amount":1}`,
			binding: cloudevents.Kafka,
			want: switchyard.Event{ID: "a-1", SpecVersion: "1.0", Source: "/pay", Type: "payment.done", Subject: "inv/7",
				Time: at, DataSchema: "urn:s", DataContentType: "application/json",
				Extensions: hs("partitionkey", "cust-1", "traceparent", tp, "tracestate", "k=v"),
				Data:       []byte(`{"amount":1}`)},
		},
		{
			name:    "nats binding, mixed case names",
			headers: hs("Ce-Specversion", "1.0", "CE-ID", "n-1", "ce-source", "/s", "ce-type", "t", "Content-Type", "text/plain"),
			value:   "hi",
			binding: cloudevents.NATS,
			want: switchyard.Event{ID: "n-1", SpecVersion: "1.0", Source: "/s", Type: "t", DataContentType: "text/plain",
				Data: []byte("hi")},
		},
		{
			name:    "percent-decoding with ce-",
			headers: hs("ce-id", "id%20one", "ce-source", "/caf%C3%A9", "ce-type", "t", "ce-note", "100%25 %22ok%22"),
			binding: cloudevents.NATS,
			want: switchyard.Event{ID: "id one", Source: "/café", Type: "t",
				Extensions: hs("note", `100% "ok"`)},
		},
		{
			name:    "no percent-decoding with ce_",
			headers: hs("ce_id", "id%20one", "ce_source", "/caf%C3%A9"),
			binding: cloudevents.Kafka,
			want:    switchyard.Event{ID: "id%20one", Source: "/caf%C3%A9"},
		},
		{
			name:     "bad percent-encoding keeps the raw value",
			headers:  hs("ce-id", "x", "ce-source", "100%"),
			binding:  cloudevents.NATS,
			want:     switchyard.Event{ID: "x", Source: "100%"},
			warnings: 1,
		},
		{
			name:     "bad time is dropped with a warning",
			headers:  hs("ce_id", "x", "ce_time", "yesterday"),
			binding:  cloudevents.Kafka,
			want:     switchyard.Event{ID: "x"},
			warnings: 1,
		},
		{
			name:     "invalid UTF-8 is replaced",
			headers:  hs("ce_id", "x", "ce_source", "a\xffb"),
			binding:  cloudevents.Kafka,
			want:     switchyard.Event{ID: "x", Source: "a\uFFFDb"},
			warnings: 1,
		},
		{
			name:     "custom id header; ce id not used",
			headers:  hs("ce_id", "ce-value", "Message-Id", "m-9", "ce_type", "t"),
			binding:  cloudevents.Kafka,
			idHeader: "message-id",
			want:     switchyard.Event{ID: "m-9", Type: "t"},
		},
		{
			name:     "id header naming a context attribute",
			headers:  hs("ce_id", "ce-value", "ce_subject", "s-1", "ce_type", "t"),
			binding:  cloudevents.Kafka,
			idHeader: "ce_subject",
			want:     switchyard.Event{ID: "s-1", Type: "t", Subject: "s-1"},
		},
		{
			name:     "first of a repeated header wins, with a warning",
			headers:  hs("ce_id", "first", "ce_id", "second"),
			binding:  cloudevents.Kafka,
			want:     switchyard.Event{ID: "first"},
			warnings: 1,
		},
		{
			name:    "datacontenttype attribute as fallback",
			headers: hs("ce_id", "x", "ce_datacontenttype", "application/xml"),
			binding: cloudevents.Kafka,
			want:    switchyard.Event{ID: "x", DataContentType: "application/xml"},
		},
		{
			name:    "missing id is derived",
			headers: hs("ce_source", "/s", "ce_type", "t"),
			value:   "body",
			binding: cloudevents.Kafka,
			want: switchyard.Event{ID: DeriveInboundID("/s", "t", "", hs("ce_source", "/s", "ce_type", "t"), []byte("body")),
				Source: "/s", Type: "t", Data: []byte("body")},
			derived: true,
		},
		{
			// CloudEvents has no empty id: said, and derived.
			name:     "empty id is derived",
			headers:  hs("ce-id", ""),
			binding:  cloudevents.NATS,
			want:     switchyard.Event{ID: DeriveInboundID("", "", "", hs("ce-id", ""), nil)},
			derived:  true,
			warnings: 1,
		},
		{
			// A key bbolt cannot take would fail every commit of the
			// inbox: derived instead, and left out.
			name:     "an id too long is derived, a partition key too long left out",
			headers:  hs("ce-id", strings.Repeat("L", switchyard.MaxInboundIDLen+1), "ce-partitionkey", strings.Repeat("k", MaxAttrLen+1)),
			binding:  cloudevents.NATS,
			want:     switchyard.Event{ID: DeriveInboundID("", "", "", hs("ce-id", strings.Repeat("L", switchyard.MaxInboundIDLen+1), "ce-partitionkey", strings.Repeat("k", MaxAttrLen+1)), nil), Extensions: hs()},
			derived:  true,
			tooLong:  true,
			warnings: 2,
		},
		{
			name:    "an id and a partition key at the limits are kept",
			headers: hs("ce-id", strings.Repeat("L", switchyard.MaxInboundIDLen), "ce-partitionkey", strings.Repeat("k", MaxAttrLen)),
			binding: cloudevents.NATS,
			want:    switchyard.Event{ID: strings.Repeat("L", switchyard.MaxInboundIDLen), Extensions: hs("partitionkey", strings.Repeat("k", MaxAttrLen))},
		},
		{
			name:     "id header of another prefix does not count",
			headers:  hs("ce-id", "dash"),
			binding:  cloudevents.Kafka,
			idHeader: "",
			want:     switchyard.Event{ID: DeriveInboundID("", "", "", hs("ce-id", "dash"), nil)},
			derived:  true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var value []byte
			if tc.value != "" {
				value = []byte(tc.value)
			}
			in, warnings := DecodeInbound(tc.binding, tc.headers, value, tc.idHeader, "kafka.main:p/0@1")
			// Most cases leave a required attribute out, for brevity:
			// TestDecodeInboundSaysWhatIsNoCloudEvent checks that warning.
			warnings = slices.DeleteFunc(warnings, func(w DecodeWarning) bool { return w.Kind == WarnNotACloudEvent })
			if len(warnings) != tc.warnings {
				t.Errorf("warnings = %q, want %d", warnings, tc.warnings)
			}
			if in.IDDerived != tc.derived || in.IDTooLong != tc.tooLong {
				t.Errorf("IDDerived, IDTooLong = %v, %v, want %v, %v", in.IDDerived, in.IDTooLong, tc.derived, tc.tooLong)
			}
			if in.Origin != "kafka.main:p/0@1" {
				t.Errorf("Origin = %q", in.Origin)
			}
			if !reflect.DeepEqual(in.Event, tc.want) {
				t.Errorf("event\n got %+v\nwant %+v", in.Event, tc.want)
			}
		})
	}
}

// An id derived for a message without one depends only on its content:
// the same headers in any order and case and the same data give the same
// id at any offset; other data, a header changed or missing give another.
func TestDeriveInboundIDStable(t *testing.T) {
	h := []switchyard.Header{{Name: "ce_type", Value: "t"}, {Name: "x-b", Value: "2"}, {Name: "X-A", Value: "1"}}
	a, _ := DecodeInbound(cloudevents.Kafka, h, []byte("data"), "", "kafka.main:p/0@1")
	// The same content at another offset, headers in another order.
	h2 := []switchyard.Header{{Name: "x-a", Value: "1"}, {Name: "ce_type", Value: "t"}, {Name: "x-b", Value: "2"}}
	b, _ := DecodeInbound(cloudevents.Kafka, h2, []byte("data"), "", "kafka.main:p/5@900")
	if !a.IDDerived || a.Event.ID != b.Event.ID {
		t.Fatalf("ids differ for identical content: %q vs %q", a.Event.ID, b.Event.ID)
	}
	if !strings.HasPrefix(a.Event.ID, DerivedIDPrefix) || len(a.Event.ID) != len(DerivedIDPrefix)+64 {
		t.Fatalf("derived id %q", a.Event.ID)
	}
	for _, other := range []struct {
		h    []switchyard.Header
		data string
	}{
		{h, "datb"},
		{[]switchyard.Header{{Name: "ce_type", Value: "u"}, {Name: "x-b", Value: "2"}, {Name: "X-A", Value: "1"}}, "data"},
		{[]switchyard.Header{{Name: "ce_type", Value: "t"}, {Name: "x-b", Value: "2"}}, "data"},
		{[]switchyard.Header{{Name: "ce_type", Value: "t"}, {Name: "x-b", Value: "21"}, {Name: "X-A", Value: ""}}, "data"},
	} {
		c, _ := DecodeInbound(cloudevents.Kafka, other.h, []byte(other.data), "", "o")
		if c.Event.ID == a.Event.ID {
			t.Errorf("different content %v %q got the same id", other.h, other.data)
		}
	}
}

// A message without the attributes CloudEvents requires (a producer's
// plain bytes, or one without ce-type) is taken, as it came, with a
// warning naming what it lacks; a whole CloudEvent gets none.
func TestDecodeInboundSaysWhatIsNoCloudEvent(t *testing.T) {
	for _, c := range []struct {
		headers []switchyard.Header
		want    string
	}{
		{nil, "not a CloudEvent: no specversion, type, source; passed on without, as the message came"},
		{[]switchyard.Header{{Name: "ce-specversion", Value: "1.0"}, {Name: "ce-source", Value: "/s"}}, "not a CloudEvent: no type;"},
		{[]switchyard.Header{{Name: "ce-specversion", Value: "1.0"}, {Name: "ce-source", Value: "/s"}, {Name: "ce-type", Value: "t"}}, ""},
	} {
		in, warnings := DecodeInbound(cloudevents.NATS, c.headers, []byte("plain"), "", "nats.local:hooks.raw")
		var texts []string
		for _, w := range warnings {
			if w.Kind != WarnNotACloudEvent {
				t.Errorf("headers %v: a warning of kind %d: %s", c.headers, w.Kind, w)
			}
			texts = append(texts, w.Text)
		}
		got := strings.Join(texts, "; ")
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("headers %v: warnings %q, want %q", c.headers, got, c.want)
		}
		if string(in.Event.Data) != "plain" || !in.IDDerived {
			t.Errorf("headers %v: %+v, want the data as it came, with a derived id", c.headers, in.Event)
		}
	}
}

// An inbox warns once that its messages are not CloudEvents, and says it
// of the others at debug, not as a warning a second (a producer of plain
// bytes sends them by design).
func TestNotACloudEventIsSaidOnce(t *testing.T) {
	var logs testkit.Buffer
	d := InboundDecoder{Binding: cloudevents.NATS, Log: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug}), Noun: "message"}
	for i := range 3 {
		d.Decode(nil, []byte{byte('a' + i)}, "nats.local:hooks.raw")
	}
	warns, debugs := 0, 0
	for _, line := range strings.Split(logs.String(), "\n") {
		switch {
		case !strings.Contains(line, "not a CloudEvent"):
		case strings.Contains(line, "[WARN]"):
			warns++
		case strings.Contains(line, "[DEBUG]"):
			debugs++
		}
	}
	if warns != 1 || debugs != 2 {
		t.Fatalf("%d warnings and %d debug lines that a message is not a CloudEvent for 3, want 1 and 2:\n%s", warns, debugs, logs.String())
	}
}
