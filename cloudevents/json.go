package cloudevents

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"mime"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/switchyard-router/switchyard"
)

// The media types of the JSON event format's content modes.
const (
	MediaStructured = "application/cloudevents+json"
	MediaBatch      = "application/cloudevents-batch+json"
)

// DecodeJSON reads one event in the JSON event format. Attribute values
// are strings, or numbers and booleans kept in their JSON form (the
// Integer and Boolean types' canonical strings); null is absent. data is
// kept as the bytes it was sent as when the content type is JSON (absent
// content type = application/json), a JSON string's text otherwise;
// data_base64 is decoded. Required attributes are the caller's to check.
func DecodeJSON(body []byte) (switchyard.Event, error) {
	var ev switchyard.Event
	if !utf8.Valid(body) {
		return ev, invalid("the body is not valid UTF-8")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return ev, invalid("the body is not a JSON object: %v", err)
	}
	data, hasData := m["data"]
	data64, hasData64 := m["data_base64"]
	delete(m, "data")
	delete(m, "data_base64")
	for k, v := range m {
		s, err := attrString(k, v)
		if err != nil {
			return ev, err
		}
		if s == nil {
			continue // null: absent
		}
		if err := Set(&ev, k, *s); err != nil {
			return ev, err
		}
	}
	SortExtensions(&ev)
	if hasData && hasData64 && !isNull(data) && !isNull(data64) {
		return ev, invalid("an event has data or data_base64, not both")
	}
	var err error
	switch {
	case hasData64 && !isNull(data64):
		ev.Data, err = decodeBase64(data64)
	case hasData && !isNull(data):
		ev.Data, err = decodeData(&ev, data)
	}
	if len(ev.Data) == 0 {
		ev.Data = nil
	}
	return ev, err
}

// DecodeBatch reads a batch: a JSON array of events in the JSON format,
// at least one and at most max.
func DecodeBatch(body []byte, max int) ([]switchyard.Event, error) {
	if !utf8.Valid(body) {
		return nil, invalid("the body is not valid UTF-8")
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(body, &raws); err != nil {
		return nil, invalid("a batch is a JSON array of CloudEvents: %v", err)
	}
	if len(raws) == 0 {
		return nil, invalid("the batch is empty")
	}
	if len(raws) > max {
		return nil, switchyard.Errorf(switchyard.ETOOLARGE, "the batch has %d events; the limit is %d", len(raws), max)
	}
	events := make([]switchyard.Event, len(raws))
	for i, raw := range raws {
		ev, err := DecodeJSON(raw)
		if err != nil {
			if e, ok := err.(*switchyard.Error); ok {
				e.Message = "event " + strconv.Itoa(i) + ": " + e.Message
			}
			return nil, err
		}
		events[i] = ev
	}
	return events, nil
}

func decodeBase64(v json.RawMessage) ([]byte, error) {
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return nil, invalid("data_base64 must be a string")
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, invalid("data_base64 is not base64: %v", err)
	}
	return b, nil
}

// decodeData reads the data member: JSON kept as sent for a JSON content
// type, a string's text for any other.
func decodeData(ev *switchyard.Event, v json.RawMessage) ([]byte, error) {
	if ev.DataContentType == "" {
		ev.DataContentType = "application/json"
	}
	if v[0] == '"' && !IsJSONMedia(ev.DataContentType) {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, invalid("data: %v", err)
		}
		return []byte(s), nil
	}
	return bytes.Clone(v), nil
}

// attrString reads an attribute value: strings as they are, numbers and
// booleans in their JSON form, null as absent.
func attrString(name string, v json.RawMessage) (*string, error) {
	v = bytes.TrimSpace(v)
	switch {
	case len(v) == 0 || isNull(v):
		return nil, nil
	case v[0] == '"':
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, invalid("attribute %q: %v", name, err)
		}
		return &s, nil
	case v[0] == '{' || v[0] == '[':
		return nil, invalid("attribute %q must be a string, number or boolean", name)
	default:
		s := string(v)
		return &s, nil
	}
}

func isNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

// IsJSONMedia reports a JSON content type: application/json, text/json or
// any +json suffix.
func IsJSONMedia(contentType string) bool {
	media, _, _ := mime.ParseMediaType(contentType)
	return media == "application/json" || media == "text/json" || strings.HasSuffix(media, "+json")
}

// EncodeJSON renders e in the JSON event format, attributes in the
// canonical order. data goes in the one form DecodeJSON reads back to the
// same bytes and content type: as JSON when the content type is JSON and
// the bytes are one JSON value with no surrounding space; as a string when
// the content type is another one and the bytes are UTF-8; else (no
// content type, or bytes that fit neither) as data_base64.
func EncodeJSON(e *switchyard.Event) []byte { return AppendJSON(nil, e) }

// AppendJSON appends EncodeJSON(e) to b.
func AppendJSON(b []byte, e *switchyard.Event) []byte {
	b = append(b, '{')
	first := true
	member := func(name string) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendString(b, name)
		b = append(b, ':')
	}
	Each(e, func(name, value string) {
		member(name)
		b = appendString(b, value)
	})
	switch form, d := dataForm(e); form {
	case "data":
		member("data")
		b = append(b, d...)
	case "text":
		member("data")
		b = appendString(b, string(d))
	case "data_base64":
		member("data_base64")
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, d)
		b = append(b, '"')
	}
	return append(b, '}')
}

// dataForm says how AppendJSON writes e's data.
func dataForm(e *switchyard.Event) (string, []byte) {
	d := e.Data
	switch {
	case len(d) == 0:
		return "", nil
	case e.DataContentType == "":
		return "data_base64", d
	case IsJSONMedia(e.DataContentType):
		if json.Valid(d) && len(bytes.TrimSpace(d)) == len(d) && string(d) != "null" {
			return "data", d
		}
		return "data_base64", d
	case utf8.Valid(d):
		return "text", d
	}
	return "data_base64", d
}

// appendString appends s as a JSON string. encoding/json's escaping, but
// without HTML escaping: the JSON read by people keeps '<', '>' and '&'.
func appendString(b []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}
