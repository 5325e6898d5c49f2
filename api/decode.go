package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/engine"
)

// The CloudEvents content modes (HTTP binding).
const (
	mediaStructured = "application/cloudevents+json"
	mediaBatch      = "application/cloudevents-batch+json"
)

// Limits on attributes the router stores and puts in URLs and headers.
const (
	maxIDLen = 256
	// maxTypeLen bounds a type name: each type is a queue, a loop and a
	// label on every per-type metric.
	maxTypeLen      = 256
	maxAttrLen      = 4096
	maxExtensionLen = 64
)

// decodeRequest turns a POST /v1/events body into events, in whichever
// CloudEvents mode the request uses. batch reports the batch mode, whose
// response is a list.
func decodeRequest(h http.Header, body []byte, maxBatch int, now func() time.Time) (events []engine.IngestEvent, batch bool, err error) {
	ct := h.Get("Content-Type")
	media, _, _ := mime.ParseMediaType(ct)
	switch {
	case media == mediaStructured:
		ev, err := decodeStructured(body)
		if err != nil {
			return nil, false, err
		}
		events = []engine.IngestEvent{ev}
	case media == mediaBatch:
		if events, err = decodeBatch(body, maxBatch); err != nil {
			return nil, true, err
		}
		batch = true
	case h.Get("Ce-Specversion") != "":
		ev, err := decodeBinary(h, body)
		if err != nil {
			return nil, false, err
		}
		events = []engine.IngestEvent{ev}
	default:
		return nil, false, switchyard.Errorf(switchyard.EMEDIATYPE,
			"content type %q is not a CloudEvent: send %s (structured), %s (batch), or ce-* headers with the data as body (binary)",
			ct, mediaStructured, mediaBatch)
	}
	for i := range events {
		passTraceContext(h, &events[i].Event)
		finish(&events[i], now)
	}
	return events, batch, nil
}

func decodeBatch(body []byte, maxBatch int) ([]engine.IngestEvent, error) {
	if !utf8.Valid(body) {
		return nil, switchyard.Errorf(switchyard.EINVALID, "the body is not valid UTF-8")
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(body, &raws); err != nil {
		return nil, switchyard.Errorf(switchyard.EINVALID, "a batch is a JSON array of CloudEvents: %v", err)
	}
	if len(raws) == 0 {
		return nil, switchyard.Errorf(switchyard.EINVALID, "the batch is empty")
	}
	if len(raws) > maxBatch {
		return nil, switchyard.Errorf(switchyard.ETOOLARGE, "the batch has %d events; the limit is %d", len(raws), maxBatch)
	}
	events := make([]engine.IngestEvent, len(raws))
	ids := make(map[[2]string]bool, len(raws))
	for i, raw := range raws {
		ev, err := decodeStructured(raw)
		if err != nil {
			var e *switchyard.Error
			if ok := errors.As(err, &e); ok {
				e.Message = "event " + strconv.Itoa(i) + ": " + e.Message
			}
			return nil, err
		}
		if ev.ClientID {
			k := [2]string{ev.Event.Source, ev.Event.ID}
			if ids[k] {
				return nil, switchyard.Errorf(switchyard.EINVALID, "event %d: id %q from source %q appears twice in the batch", i, ev.Event.ID, ev.Event.Source)
			}
			ids[k] = true
		}
		events[i] = ev
	}
	return events, nil
}

// decodeStructured decodes one event in the CloudEvents JSON format.
func decodeStructured(body []byte) (engine.IngestEvent, error) {
	var out engine.IngestEvent
	if !utf8.Valid(body) {
		return out, switchyard.Errorf(switchyard.EINVALID, "the body is not valid UTF-8")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return out, switchyard.Errorf(switchyard.EINVALID, "the body is not a JSON object: %v", err)
	}
	ev := &out.Event
	var data, data64 json.RawMessage
	for k, v := range m {
		switch k {
		case "data":
			data = v
			continue
		case "data_base64":
			data64 = v
			continue
		}
		s, err := attrString(k, v)
		if err != nil {
			return out, err
		}
		if s == nil {
			continue // null: absent
		}
		if err := setAttr(ev, k, *s); err != nil {
			return out, err
		}
	}
	switch {
	case data != nil && data64 != nil:
		return out, switchyard.Errorf(switchyard.EINVALID, "an event has data or data_base64, not both")
	case data64 != nil:
		var s string
		if err := json.Unmarshal(data64, &s); err != nil {
			return out, switchyard.Errorf(switchyard.EINVALID, "data_base64 must be a string")
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return out, switchyard.Errorf(switchyard.EINVALID, "data_base64 is not base64: %v", err)
		}
		ev.Data = b
	case data != nil && string(data) != "null":
		if ev.DataContentType == "" {
			ev.DataContentType = "application/json"
		}
		ev.Data = []byte(data)
		// A JSON string carries text for a non-JSON content type.
		if data[0] == '"' && !isJSONMedia(ev.DataContentType) {
			var s string
			json.Unmarshal(data, &s)
			ev.Data = []byte(s)
		}
	}
	return out, validate(&out)
}

func isJSONMedia(ct string) bool {
	media, _, _ := mime.ParseMediaType(ct)
	return media == "application/json" || media == "text/json" || strings.HasSuffix(media, "+json")
}

// attrString reads an attribute value: strings as they are, numbers and
// booleans in their JSON form (CloudEvents integer and boolean types),
// null as absent.
func attrString(name string, v json.RawMessage) (*string, error) {
	v = bytes.TrimSpace(v)
	switch {
	case len(v) == 0 || string(v) == "null":
		return nil, nil
	case v[0] == '"':
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, switchyard.Errorf(switchyard.EINVALID, "attribute %q: %v", name, err)
		}
		return &s, nil
	case v[0] == '{' || v[0] == '[':
		return nil, switchyard.Errorf(switchyard.EINVALID, "attribute %q must be a string, number or boolean", name)
	default:
		s := string(v)
		return &s, nil
	}
}

// isControl reports the characters CloudEvents' String type excludes. A
// header binding could not carry them as sent (NATS and Kafka headers end
// at CR LF), so what is stored would not be what is published.
func isControl(r rune) bool { return r <= 0x1f || (r >= 0x7f && r <= 0x9f) }

// setAttr sets a context attribute or extension by its CloudEvents name.
func setAttr(ev *switchyard.Event, name, value string) error {
	if len(value) > maxAttrLen {
		return switchyard.Errorf(switchyard.EINVALID, "attribute %q is longer than %d bytes", name, maxAttrLen)
	}
	if !utf8.ValidString(value) {
		return switchyard.Errorf(switchyard.EINVALID, "attribute %q is not valid UTF-8", name)
	}
	if i := strings.IndexFunc(value, isControl); i >= 0 {
		r, _ := utf8.DecodeRuneInString(value[i:])
		return switchyard.Errorf(switchyard.EINVALID, "attribute %q has the control character %U at byte %d: CloudEvents attribute strings exclude U+0000-U+001F and U+007F-U+009F", name, r, i)
	}
	switch name {
	case "specversion":
		ev.SpecVersion = value
	case "id":
		ev.ID = value
	case "source":
		ev.Source = value
	case "type":
		ev.Type = value
	case "subject":
		ev.Subject = value
	case "datacontenttype":
		ev.DataContentType = value
	case "dataschema":
		ev.DataSchema = value
	case "time":
		t, err := time.Parse(time.RFC3339Nano, value)
		if err != nil {
			return switchyard.Errorf(switchyard.EINVALID, "time %q is not an RFC 3339 timestamp", value)
		}
		ev.Time = t
	default:
		if !validExtensionName(name) {
			return switchyard.Errorf(switchyard.EINVALID, "extension attribute %q: names are 1 to %d lower-case letters and digits", name, maxExtensionLen)
		}
		ev.Extensions = append(ev.Extensions, switchyard.Header{Name: name, Value: value})
	}
	return nil
}

func validExtensionName(s string) bool {
	if s == "" || len(s) > maxExtensionLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// decodeBinary decodes an event in binary mode: attributes in ce-* headers,
// the body is the data.
func decodeBinary(h http.Header, body []byte) (engine.IngestEvent, error) {
	var out engine.IngestEvent
	ev := &out.Event
	for k, vs := range h {
		lk := strings.ToLower(k)
		if !strings.HasPrefix(lk, "ce-") || len(vs) == 0 {
			continue
		}
		v := vs[0]
		if strings.Contains(v, "%") {
			dec, err := url.PathUnescape(v)
			if err != nil {
				return out, switchyard.Errorf(switchyard.EINVALID, "header %s: bad percent-encoding", k)
			}
			v = dec
		}
		if err := setAttr(ev, lk[3:], v); err != nil {
			return out, err
		}
	}
	ev.DataContentType = h.Get("Content-Type")
	if len(body) > 0 {
		ev.Data = body
	}
	return out, validate(&out)
}

// passTraceContext copies W3C trace headers of the request onto an event
// that does not carry its own.
func passTraceContext(h http.Header, ev *switchyard.Event) {
	for _, name := range []string{"traceparent", "tracestate"} {
		if v := h.Get(name); v != "" && ev.Extension(name) == "" && utf8.ValidString(v) {
			ev.Extensions = append(ev.Extensions, switchyard.Header{Name: name, Value: v})
		}
	}
}

// validate checks the required attributes and the id.
func validate(in *engine.IngestEvent) error {
	ev := &in.Event
	switch {
	case ev.SpecVersion == "":
		return switchyard.Errorf(switchyard.EINVALID, "specversion is required")
	case ev.SpecVersion != "1.0":
		return switchyard.Errorf(switchyard.EINVALID, "specversion %q is not supported; use 1.0", ev.SpecVersion)
	case ev.Source == "":
		return switchyard.Errorf(switchyard.EINVALID, "source is required")
	case ev.Type == "":
		return switchyard.Errorf(switchyard.EINVALID, "type is required")
	case len(ev.Type) > maxTypeLen:
		return switchyard.Errorf(switchyard.EINVALID, "type is longer than %d bytes", maxTypeLen)
	case len(ev.ID) > maxIDLen:
		return switchyard.Errorf(switchyard.EINVALID, "id is longer than %d bytes", maxIDLen)
	}
	for _, r := range ev.ID {
		if r < 0x20 || r == 0x7f || r == '/' {
			return switchyard.Errorf(switchyard.EINVALID, "id must not contain control characters or '/'")
		}
	}
	sortExtensions(ev)
	if in.ClientID = ev.ID != ""; in.ClientID {
		in.Digest = eventDigest(ev)
	}
	return nil
}

// finish fills what the router assigns: a UUIDv7 id and the time.
func finish(in *engine.IngestEvent, now func() time.Time) {
	if in.Event.ID == "" {
		in.Event.ID = uuid.Must(uuid.NewV7()).String()
	}
	if in.Event.Time.IsZero() {
		in.Event.Time = now().UTC()
	}
	sortExtensions(&in.Event)
}

func sortExtensions(ev *switchyard.Event) {
	sort.Slice(ev.Extensions, func(i, j int) bool { return ev.Extensions[i].Name < ev.Extensions[j].Name })
}

// eventDigest fingerprints an event as the client sent it (before the
// router filled anything in), so a resend of the same event matches
// whichever content mode carried it.
func eventDigest(ev *switchyard.Event) []byte {
	b, _ := json.Marshal(ev)
	sum := sha256.Sum256(b)
	return sum[:]
}

// requestDigest fingerprints a whole request for the Idempotency-Key: its
// content type, its ce-* and trace headers, and its body.
func requestDigest(h http.Header, body []byte) []byte {
	d := sha256.New()
	d.Write([]byte(h.Get("Content-Type")))
	var names []string
	for k := range h {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "ce-") || lk == "traceparent" || lk == "tracestate" {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		d.Write([]byte{0})
		d.Write([]byte(strings.ToLower(k)))
		d.Write([]byte{0})
		d.Write([]byte(strings.Join(h[k], ",")))
	}
	d.Write([]byte{0})
	d.Write(body)
	return d.Sum(nil)
}

// DecodeEvent decodes one CloudEvent in the JSON format, with the checks
// ingest makes, and fills in what the router assigns (a UUIDv7 id, the
// time). `router plugin test` reads its input event with it.
func DecodeEvent(body []byte) (switchyard.Event, error) {
	in, err := decodeStructured(body)
	if err != nil {
		return switchyard.Event{}, err
	}
	finish(&in, time.Now)
	return in.Event, nil
}

// EncodeEvent renders an event in the CloudEvents JSON format (the pull
// subscription's messages, `router plugin test`'s outputs): data as JSON
// when its content type is JSON, as a string when it is UTF-8 text, else as
// data_base64.
func EncodeEvent(ev *switchyard.Event) map[string]any { return structuredEvent(ev) }
