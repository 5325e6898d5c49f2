package cloudevents_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/cloudevents"
)

// referenceDecodeJSON is DecodeJSON as it was before it read the body with
// a streaming tokenizer: encoding/json into a map of raw members. The
// differential fuzz target holds the new decoder to it.
func referenceDecodeJSON(body []byte) (switchyard.Event, error) {
	var ev switchyard.Event
	if !utf8.Valid(body) {
		return ev, refInvalid("the body is not valid UTF-8")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return ev, refInvalid("the body is not a JSON object: %v", err)
	}
	data, hasData := m["data"]
	data64, hasData64 := m["data_base64"]
	delete(m, "data")
	delete(m, "data_base64")
	for k, v := range m {
		s, err := refAttrString(k, v)
		if err != nil {
			return ev, err
		}
		if s == nil {
			continue // null: absent
		}
		if err := cloudevents.Set(&ev, k, *s); err != nil {
			return ev, err
		}
	}
	cloudevents.SortExtensions(&ev)
	if hasData && hasData64 && !refIsNull(data) && !refIsNull(data64) {
		return ev, refInvalid("an event has data or data_base64, not both")
	}
	var err error
	switch {
	case hasData64 && !refIsNull(data64):
		ev.Data, err = refDecodeBase64(data64)
	case hasData && !refIsNull(data):
		ev.Data, err = refDecodeData(&ev, data)
	}
	if len(ev.Data) == 0 {
		ev.Data = nil
	}
	return ev, err
}

func refDecodeBase64(v json.RawMessage) ([]byte, error) {
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return nil, refInvalid("data_base64 must be a string")
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, refInvalid("data_base64 is not base64: %v", err)
	}
	return b, nil
}
func refDecodeData(ev *switchyard.Event, v json.RawMessage) ([]byte, error) {
	if ev.DataContentType == "" {
		ev.DataContentType = "application/json"
	}
	if v[0] == '"' && !cloudevents.IsJSONMedia(ev.DataContentType) {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, refInvalid("data: %v", err)
		}
		return []byte(s), nil
	}
	return bytes.Clone(v), nil
}
func refAttrString(name string, v json.RawMessage) (*string, error) {
	v = bytes.TrimSpace(v)
	switch {
	case len(v) == 0 || refIsNull(v):
		return nil, nil
	case v[0] == '"':
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, refInvalid("attribute %q: %v", name, err)
		}
		return &s, nil
	case v[0] == '{' || v[0] == '[':
		return nil, refInvalid("attribute %q must be a string, number or boolean", name)
	case refContext[name]:
		return nil, refInvalid("attribute %q must be a JSON string", name)
	case v[0] != 't' && v[0] != 'f':
		if _, err := strconv.ParseInt(string(v), 10, 32); err != nil {
			return nil, refInvalid("extension attribute %q: not a CloudEvents Integer", name)
		}
		fallthrough
	default:
		s := string(v)
		return &s, nil
	}
}

// refContext are the context attributes: JSON strings only.
var refContext = map[string]bool{"specversion": true, "id": true, "source": true, "type": true,
	"subject": true, "time": true, "datacontenttype": true, "dataschema": true}

func refIsNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

func refInvalid(format string, args ...any) error {
	return switchyard.Errorf(switchyard.EINVALID, format, args...)
}

// The streaming decoder accepts what the map-based one accepted (with the
// JSON format's types since 2026-12: context attributes are strings,
// number extensions whole 32-bit numbers) and reads the same event from
// it. Three differences on purpose: a member of the event named twice,
// which the map kept the last of and the streaming decoder refuses
// (RFC 8259 leaves it to each reader which counts); a body
// that is JSON null, which the map-based decoder read as an empty event,
// and a lone surrogate escape ("\ud800"), which it turned into U+FFFD and
// the new one refuses as invalid JSON text (RFC 8259 §8.2).
func FuzzDecodeJSONMatchesReference(f *testing.F) {
	for _, s := range []string{
		`{"specversion":"1.0","id":"1","source":"/s","type":"t","data":{"a": [1, 2]}}`,
		`{"specversion":"1.0","id":"1","id":"2","subject":null,"subject":"x","ext":1500,"b":true,"data_base64":"AAEC"}`,
		`{"specversion":"1.0","id":"1","ext":1.5e3}`,
		`{"datacontenttype":"text/plain","data":"h\u00e9llo","data_base64":null}`,
		`{"data":"x","data_base64":"eA=="}`, `{"a":{}}`, `{"a":[]}`, `[]`, `null`, ` {"x":"y"} `, `{"x":"y"} {}`,
		`{"time":"2020-01-01T00:00:00+02:00","data":null}`, `{"subject":"\ud800"}`, `{"data_base64":"!!"}`, `{"data_base64":7}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := cloudevents.DecodeJSON(body)
		want, refErr := referenceDecodeJSON(body)
		if string(bytes.TrimSpace(body)) == "null" || err != nil && refErr == nil && strings.Contains(err.Error(), "surrogate") {
			return
		}
		if err != nil && refErr == nil && (strings.Contains(err.Error(), "appears twice") ||
			strings.Contains(err.Error(), "must be a JSON string") || strings.Contains(err.Error(), "is not a CloudEvents Integer")) {
			return // a member named twice (its earlier value maybe of the wrong type)
		}
		if (err == nil) != (refErr == nil) {
			t.Fatalf("%q: error %v, the reference's %v", body, err, refErr)
		}
		if err == nil {
			sameEvent(t, "decoded", got, want)
		}
	})
}

// benchEvent is a typical event as a client posts it: the context
// attributes, two extensions and 400 bytes of JSON data.
var benchEvent = []byte(`{"specversion":"1.0","id":"0193b2b4-6a1e-7c3a-9d2f-4c1e2a3b4c5d","source":"/shop/checkout","type":"orders.created","subject":"order-1234","time":"2026-11-30T12:34:56.789Z","datacontenttype":"application/json","partitionkey":"customer-42","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","data":{"order":"1234","customer":"42","items":[{"sku":"A-1","qty":2,"price":"9.99"},{"sku":"B-7","qty":1,"price":"24.50"}],"note":"leave at the door, ring twice; the dog is friendly but loud","address":{"street":"1 Long Road","city":"Springfield","zip":"12345","country":"XX"},"total":"44.48","currency":"EUR","paid":true}}`)

// BenchmarkDecodeJSON compares the streaming decoder with the map-based one
// it replaced, on one typical event and on a batch of 100, in one run.
func BenchmarkDecodeJSON(b *testing.B) {
	batch := []byte("[" + string(bytes.Repeat(append(benchEvent, ','), 99)) + string(benchEvent) + "]")
	for _, c := range []struct {
		name string
		one  func([]byte) (switchyard.Event, error)
	}{{"map-reference", referenceDecodeJSON}, {"jsontext", cloudevents.DecodeJSON}} {
		b.Run(c.name+"/event", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(benchEvent)))
			for b.Loop() {
				if _, err := c.one(benchEvent); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("map-reference/batch100", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(batch)))
		for b.Loop() {
			var raws []json.RawMessage
			if err := json.Unmarshal(batch, &raws); err != nil {
				b.Fatal(err)
			}
			for _, r := range raws {
				if _, err := referenceDecodeJSON(r); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("jsontext/batch100", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(batch)))
		for b.Loop() {
			if _, err := cloudevents.DecodeBatch(batch, 1000); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkEncodeJSON is the JSON event format written for the webhook,
// tail and plugin JSON, of the typical event above.
func BenchmarkEncodeJSON(b *testing.B) {
	ev, err := cloudevents.DecodeJSON(benchEvent)
	if err != nil {
		b.Fatal(err)
	}
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = cloudevents.AppendJSON(buf[:0], &ev)
	}
}
