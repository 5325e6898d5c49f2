package cloudevents

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"mime"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/switchyard-router/switchyard"
)

// The media types of the JSON event format's content modes.
const (
	MediaStructured = "application/cloudevents+json"
	MediaBatch      = "application/cloudevents-batch+json"
)

// DecodeJSON reads one event in the JSON event format. Attribute values
// are strings, or numbers and booleans kept in their JSON form (the
// Integer and Boolean types' canonical strings); null is absent; of a
// repeated member the last counts. data is kept as the bytes it was sent
// as when the content type is JSON (absent content type =
// application/json), a JSON string's text otherwise; data_base64 is
// decoded. Required attributes are the caller's to check.
//
// It reads the body in one pass with a streaming tokenizer (jsontext, of
// encoding/json/v2: docs/decisions/json-decoding.md), without building a
// map of the members.
func DecodeJSON(body []byte) (switchyard.Event, error) {
	return decodeJSON(body, nil)
}

// decodeJSON is DecodeJSON; with warn, what a member breaks is worked
// around and told to warn, as a consumer's lenient decoding needs
// (Binding.DecodeLenient): a value of the wrong JSON type is kept as its
// JSON text; a member that cannot be an attribute (an object or array, a
// name the spec does not allow, a time that does not parse) and
// extensions past the bound are left out; of a member named twice the
// last is kept. The body must still be a JSON
// object.
func decodeJSON(body []byte, warn func(string)) (switchyard.Event, error) {
	if !utf8.Valid(body) {
		return switchyard.Event{}, invalid("the body is not valid UTF-8")
	}
	return withDecoder(body, func(d *jsontext.Decoder) (switchyard.Event, error) {
		ev, err := decodeObject(d, nil, warn)
		if err != nil {
			return ev, err
		}
		if _, err := d.ReadToken(); err != io.EOF {
			return ev, invalid("the body is not a JSON object: more after the object")
		}
		return ev, nil
	})
}

// DecodeBatch reads a batch: a JSON array of events in the JSON format,
// at least one and at most max.
func DecodeBatch(body []byte, max int) ([]switchyard.Event, error) {
	if !utf8.Valid(body) {
		return nil, invalid("the body is not valid UTF-8")
	}
	return withDecoder(body, func(d *jsontext.Decoder) ([]switchyard.Event, error) { return decodeBatch(d, max) })
}

// decodeBatch reads the array of a batch from d.
func decodeBatch(d *jsontext.Decoder, max int) ([]switchyard.Event, error) {
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '[' {
		return nil, invalid("a batch is a JSON array of CloudEvents%s", syntaxDetail(err))
	}
	var events []switchyard.Event
	var seen interner
	for d.PeekKind() != ']' {
		if len(events) == max {
			n, _ := countRest(d)
			return nil, switchyard.Errorf(switchyard.ETOOLARGE, "the batch has %d events; the limit is %d", max+n, max)
		}
		ev, err := decodeObject(d, &seen, nil)
		if err != nil {
			if e := (*switchyard.Error)(nil); errors.As(err, &e) {
				e.Message = BatchItem(len(events)) + ": " + e.Message
			}
			return nil, err
		}
		events = append(events, ev)
	}
	if _, err := d.ReadToken(); err != nil {
		return nil, invalid("a batch is a JSON array of CloudEvents%s", syntaxDetail(err))
	}
	if _, err := d.ReadToken(); err != io.EOF {
		return nil, invalid("a batch is a JSON array of CloudEvents: more after the array")
	}
	return events, nil // "[]" too: the HTTP binding lets a batch be empty
}

// countRest counts the values left in the array d is in, to say how large
// a batch over the limit is.
func countRest(d *jsontext.Decoder) (int, error) {
	n := 0
	for d.PeekKind() != ']' {
		if err := d.SkipValue(); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// decoders are reused: a decoder's buffers are most of what decoding an
// event allocates.
var decoders = sync.Pool{New: func() any { return &pooledDecoder{} }}

type pooledDecoder struct {
	r bytes.Reader
	d jsontext.Decoder
}

// withDecoder runs fn with a decoder reading body.
func withDecoder[T any](body []byte, fn func(*jsontext.Decoder) (T, error)) (T, error) {
	p := decoders.Get().(*pooledDecoder)
	defer decoders.Put(p)
	p.r.Reset(body)
	// Repeated member names are allowed by the decoder: in data they are
	// the sender's business. Among an event's own members decodeObject
	// refuses them (twice).
	p.d.Reset(&p.r, jsontext.AllowDuplicateNames(true))
	defer func() { p.r.Reset(nil); p.d.Reset(&p.r) }() // keep no reference to body
	return fn(&p.d)
}

// member is one attribute member of an event object, before it is set.
type member struct {
	name, value string
	null        bool
}

// decodeObject reads one event object from d; seen, when not nil, hands
// out the names and values the batch's earlier events had.
func decodeObject(d *jsontext.Decoder, seen *interner, warn func(string)) (switchyard.Event, error) {
	var ev switchyard.Event
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '{' {
		return ev, invalid("the body is not a JSON object%s", syntaxDetail(err))
	}
	lenient := leniency{warn}
	var room [12]member // the attributes of most events: no allocation
	members := room[:0]
	var data, data64 jsontext.Value
	exts := 0 // extension members so far
	for d.PeekKind() != '}' {
		name, err := d.ReadValue()
		if err != nil {
			return ev, invalid("the body is not a JSON object%s", syntaxDetail(err))
		}
		key, err := memberName(name, seen)
		if err != nil {
			return ev, invalid("the body is not a JSON object%s", syntaxDetail(err))
		}
		v, err := d.ReadValue()
		if err != nil {
			return ev, invalid("the body is not a JSON object%s", syntaxDetail(err))
		}
		switch key {
		case "data", "data_base64":
			held := &data
			if key == "data_base64" {
				held = &data64
			}
			if *held != nil {
				if err := lenient.pass(twice(key), "the last kept"); err != nil {
					return ev, err
				}
			}
			*held = bytes.Clone(v)
		default:
			if members, err = addMember(members, &exts, key, v, seen, lenient); err != nil {
				return ev, err
			}
		}
	}
	if _, err := d.ReadToken(); err != nil {
		return ev, invalid("the body is not a JSON object%s", syntaxDetail(err))
	}
	for _, m := range members {
		if m.null {
			continue // null: absent
		}
		if err := lenient.pass(Set(&ev, m.name, m.value), "left out"); err != nil {
			return ev, err
		}
	}
	SortExtensions(&ev)
	return ev, setData(&ev, data, data64)
}

// addMember adds the attribute member key: v to members, held to the JSON
// format's types and to the bound on extensions (exts counts them so far).
func addMember(members []member, exts *int, key string, v jsontext.Value, seen *interner, lenient leniency) ([]member, error) {
	if err := lenient.pass(checkMemberType(key, v), "kept as its JSON text"); err != nil {
		return members, err
	}
	m, err := memberOf(key, v, seen)
	if err != nil {
		return members, lenient.pass(err, "left out")
	}
	before := len(members)
	members = setMember(members, m)
	if len(members) == before { // named again
		return members, lenient.pass(twice(key), "the last kept")
	}
	if isContextAttribute(key) {
		return members, nil
	}
	if *exts++; *exts <= MaxExtensions {
		return members, nil
	}
	*exts--
	return members[:before], lenient.pass(invalid("extension attribute %q: an event has at most %d extension attributes", key, MaxExtensions), "left out")
}

// twice is the error of an event member named twice. RFC 8259 leaves it to
// each reader which counts, so a proxy that checked the first and the
// router that stored the last would disagree on the event.
func twice(key string) error {
	return invalid("member %q appears twice in the event object: its names must be unique (RFC 8259), or readers disagree on which counts", key)
}

// leniency is how decodeObject meets a problem: strictly (no warn) it
// fails on it; leniently it warns that the problem was worked around and
// goes on.
type leniency struct{ warn func(string) }

// pass returns err when decoding strictly; leniently it warns of err and
// what was done about it (did), and returns nil.
func (l leniency) pass(err error, did string) error {
	if err == nil || l.warn == nil {
		return err
	}
	l.warn(lenientMessage(workedAround(err, did)))
	return nil
}

// memberName is an object member's name: the spec's names without
// allocating a string for each, others unquoted (or, in a batch, the
// string an earlier event's member of that name had).
func memberName(quoted jsontext.Value, seen *interner) (string, error) {
	switch string(quoted) {
	case `"specversion"`:
		return AttrSpecVersion, nil
	case `"id"`:
		return AttrID, nil
	case `"source"`:
		return AttrSource, nil
	case `"type"`:
		return AttrType, nil
	case `"subject"`:
		return AttrSubject, nil
	case `"time"`:
		return AttrTime, nil
	case `"datacontenttype"`:
		return AttrDataContentType, nil
	case `"dataschema"`:
		return AttrDataSchema, nil
	case `"data"`:
		return "data", nil
	case `"data_base64"`:
		return "data_base64", nil
	}
	if bytes.IndexByte(quoted, '\\') < 0 {
		return seen.intern("", quoted[1:len(quoted)-1]), nil
	}
	b, err := jsontext.AppendUnquote(nil, quoted)
	return string(b), err
}

// checkMemberType says why v breaks the JSON format's types: a context
// attribute is a string; an extension a string, a boolean or an Integer (a
// whole number in 32 bits, the only number CloudEvents has).
func checkMemberType(name string, v jsontext.Value) error {
	switch k := v.Kind(); {
	case (k == 't' || k == 'f' || k == '0') && isContextAttribute(name):
		return invalid("attribute %q must be a JSON string, not %s", name, v)
	case k == '0':
		if _, err := strconv.ParseInt(string(v), 10, 32); err != nil {
			return invalid("extension attribute %q: %s is not a CloudEvents Integer (a whole number from -2147483648 to 2147483647); send other numbers as strings", name, v)
		}
	}
	return nil
}

// memberOf reads an attribute value: a string's text, a number or boolean
// in its JSON form, null as absent; objects and arrays are refused.
func memberOf(name string, v jsontext.Value, seen *interner) (member, error) {
	switch v.Kind() {
	case '"':
		if bytes.IndexByte(v, '\\') < 0 {
			// No escapes (jsontext has validated it): the text between
			// the quotes, in one allocation instead of two, or none when
			// it repeats.
			return member{name: name, value: seen.intern(name, v[1:len(v)-1])}, nil
		}
		s, err := jsontext.AppendUnquote(nil, v)
		return member{name: name, value: string(s)}, err
	case 'n':
		return member{name: name, null: true}, nil
	case '{', '[':
		return member{}, invalid("attribute %q must be a string, number or boolean", name)
	}
	return member{name: name, value: string(v)}, nil
}

// setMember adds m, replacing an earlier member of the same name.
func setMember(ms []member, m member) []member {
	for i := range ms {
		if ms[i].name == m.name {
			ms[i] = m
			return ms
		}
	}
	return append(ms, m)
}

// setData sets ev's data from the data or data_base64 member (either may
// be absent or null).
func setData(ev *switchyard.Event, data, data64 jsontext.Value) error {
	hasData, hasData64 := len(data) > 0 && data.Kind() != 'n', len(data64) > 0 && data64.Kind() != 'n'
	var err error
	switch {
	case hasData && hasData64:
		return invalid("an event has data or data_base64, not both")
	case hasData64:
		ev.Data, err = decodeBase64(data64)
	case hasData:
		ev.Data, err = decodeData(ev, data)
	}
	if len(ev.Data) == 0 {
		ev.Data = nil
	}
	return err
}

// syntaxDetail is ": " and a decoder's error, or "" for none.
func syntaxDetail(err error) string {
	if err == nil {
		return ""
	}
	return ": " + plainSyntax(err)
}

// plainSyntax is the tokenizer's error in the API's words: without its
// package's name, and "after byte" where it says "after offset".
func plainSyntax(err error) string {
	msg := strings.TrimPrefix(err.Error(), "jsontext: ")
	return strings.Replace(msg, " after offset ", " after byte ", 1)
}

func decodeBase64(v jsontext.Value) ([]byte, error) {
	if v.Kind() != '"' {
		return nil, invalid("data_base64 must be a string")
	}
	s, err := jsontext.AppendUnquote(nil, v)
	if err != nil {
		return nil, invalid("data_base64: %s", plainSyntax(err))
	}
	b, err := base64.StdEncoding.AppendDecode(nil, s)
	if err != nil {
		if len(s)%4 != 0 {
			// Go names the start of the last group, which says nothing.
			return nil, invalid("data_base64 is not base64: %d characters, not a multiple of 4 (standard base64 pads with '=')", len(s))
		}
		return nil, invalid("data_base64 is not base64: %v", err)
	}
	return b, nil
}

// decodeData reads the data member: JSON kept as sent for a JSON content
// type, a string's text for any other. v is the decoder's copy.
func decodeData(ev *switchyard.Event, v jsontext.Value) ([]byte, error) {
	if ev.DataContentType == "" {
		ev.DataContentType = "application/json"
	}
	if v.Kind() == '"' && !IsJSONMedia(ev.DataContentType) {
		s, err := jsontext.AppendUnquote(nil, v)
		if err != nil {
			return nil, invalid("data: %v", err)
		}
		return s, nil
	}
	return v, nil
}

// Media is a content type's media type, lower-case, without parameters; ""
// when it does not parse. The common values, exactly as this package
// writes them, skip the parser (it allocates on every call).
func Media(contentType string) string {
	switch contentType {
	case MediaStructured, MediaBatch, "application/json":
		return contentType
	}
	media, _, _ := mime.ParseMediaType(contentType)
	return media
}

// IsJSONMedia reports a JSON content type: application/json, text/json or
// any +json suffix.
func IsJSONMedia(contentType string) bool {
	media := Media(contentType)
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
		// Valid as DecodeJSON reads it: UTF-8, no lone surrogate escapes
		// (encoding/json.Valid takes both); repeated names allowed.
		if jsontext.Value(d).IsValid(jsontext.AllowDuplicateNames(true)) && len(bytes.TrimSpace(d)) == len(d) && string(d) != "null" {
			return "data", d
		}
		return "data_base64", d
	case utf8.Valid(d):
		return "text", d
	}
	return "data_base64", d
}

// appendString appends s as a JSON string: encoding/json's escaping, but
// without HTML escaping, so the JSON people read keeps '<', '>' and '&'.
func appendString(b []byte, s string) []byte { return appendJSONString(b, s, false) }

// BatchItem names the event at index i of a batch in an error: batch[1]
// is the second, as a JSON reader counts (it read "event 1", taken for
// the first).
func BatchItem(i int) string { return "batch[" + strconv.Itoa(i) + "]" }
