package cloudevents

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
)

// The event digest is taken of exactly the bytes json.Marshal made of the
// event (without its trace context) before appendDigestJSON wrote them by hand:
// a digest stored by an older router must still match a resend.
func FuzzDigestJSONIsMarshal(f *testing.F) {
	f.Add("id-1", "/s", "t", "sub", "application/json", "", "partitionkey", "k", "traceparent", "00-x", []byte(`{"a":1}`), int64(1764500000123456789), 0)
	f.Add("<&>", "\u2028\u2029", "\x00\x1f\"\\", "\b\f\n\r\t", "\xff\xfe", "é", "tracestate", "x", "z", "", []byte{}, int64(-62135596800000000), 3600)
	f.Add("", "", "", "", "", "", "", "", "", "", []byte(nil), int64(0), -45*60)
	f.Fuzz(func(t *testing.T, id, src, typ, subject, dct, schema, n1, v1, n2, v2 string, data []byte, nanos int64, offset int) {
		ev := switchyard.Event{ID: id, Source: src, Type: typ, SpecVersion: "1.0", Subject: subject,
			Time: time.Unix(0, nanos).In(time.FixedZone("", offset%(24*3600)/60*60)), DataContentType: dct, DataSchema: schema, Data: data}
		for _, h := range []switchyard.Header{{Name: n1, Value: v1}, {Name: n2, Value: v2}} {
			if h.Name != "" {
				ev.Extensions = append(ev.Extensions, h)
			}
		}
		e := ev
		e.Extensions = slices.DeleteFunc(slices.Clone(e.Extensions), func(h switchyard.Header) bool { return IsPassThrough(h.Name) })
		want, err := json.Marshal(&e)
		if err != nil {
			return // json.Marshal refuses it; appendDigestJSON then uses json.Marshal too
		}
		if got := appendDigestJSON(nil, &ev); string(got) != string(want) {
			t.Fatalf("digest bytes differ:\n got %s\nwant %s", got, want)
		}
	})
}

// A time json.Marshal refuses (a year outside 0–9999, which the fuzz target's
// nanoseconds since 1970 cannot reach) takes json.Marshal's own path: the
// digest is of what it made before, nothing, so such events keep matching
// a digest stored by an older router. (No CloudEvents time in RFC 3339 has
// such a year; the API never decodes one.)
func TestDigestJSONOutOfRangeYear(t *testing.T) {
	for _, year := range []int{-1, 10000} {
		ev := switchyard.Event{ID: "a", Source: "/s", Type: "t", SpecVersion: "1.0",
			Time: time.Date(year, 1, 2, 3, 4, 5, 0, time.UTC)}
		want, err := json.Marshal(&ev)
		if err == nil {
			t.Fatalf("year %d: json.Marshal accepted it (%s); the fallback is not needed", year, want)
		}
		if got := appendDigestJSON([]byte("prefix"), &ev); string(got) != "prefix"+string(want) {
			t.Errorf("year %d: appendDigestJSON = %q, want %q", year, got, "prefix"+string(want))
		}
	}
}

// The string writer quotes as encoding/json does, in both forms: with HTML
// escaping as json.Marshal (the digest, the 202 body), without it as a
// json.Encoder with SetEscapeHTML(false) (the JSON event format).
func FuzzJSONStringIsEncodingJSON(f *testing.F) {
	for _, s := range []string{"", "plain", "<&>", "\u2028\u2029", "\x00\x1f\"\\", "\b\f\n\r\t", "\xff\xfe", "é\x7f", "a\xe2\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		marshal, _ := json.Marshal(s)
		if got := AppendJSONString([]byte("x"), s); string(got) != "x"+string(marshal) {
			t.Fatalf("html: got %s, json.Marshal %s", got, marshal)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.Encode(s)
		want := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		if got := appendString(nil, s); string(got) != string(want) {
			t.Fatalf("no html: got %s, json.Encoder %s", got, want)
		}
	})
}
