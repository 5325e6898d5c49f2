package cloudevents

import (
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/switchyard-router/switchyard"
)

// Binding is the binary content mode of one CloudEvents protocol binding:
// how an event's attributes become message headers and back, the data
// being the message body. The three the router speaks differ in two rules
// (docs/decisions/cloudevents-codec.md):
//
//   - HTTP (http-protocol-binding §3.1.3): ce- headers, values
//     percent-encoded; datacontenttype is Content-Type.
//   - NATS (nats-protocol-binding §3.1.3): ce- headers, values
//     percent-encoded as in HTTP; datacontenttype is ce-datacontenttype
//     (the router writes Content-Type too, for tools that read it).
//   - Kafka (kafka-protocol-binding §3.2.3): ce_ headers, values as plain
//     UTF-8, never percent-encoded; datacontenttype is content-type.
type Binding struct {
	name    string
	prefix  string
	percent bool // values are percent-encoded
	ceType  bool // datacontenttype travels as <prefix>datacontenttype
	// names are the context attributes' header names (prefix + name),
	// made once: sinks encode the headers of every message they send. A
	// pointer, so that Bindings still compare with ==.
	names *headerNames
}

type headerNames struct{ of map[string]string }

// The bindings.
var (
	HTTP  = withNames(Binding{name: "HTTP", prefix: "ce-", percent: true})
	NATS  = withNames(Binding{name: "NATS", prefix: "ce-", percent: true, ceType: true})
	Kafka = withNames(Binding{name: "Kafka", prefix: "ce_"})
)

func withNames(b Binding) Binding {
	b.names = &headerNames{of: make(map[string]string, len(contextAttributes))}
	for _, a := range contextAttributes {
		b.names.of[a] = b.prefix + a
	}
	return b
}

// headerName is prefix + name, made once for the context attributes.
func (b Binding) headerName(prefix, name string) string {
	if b.names != nil && prefix == b.prefix {
		if n, ok := b.names.of[name]; ok {
			return n
		}
	}
	return prefix + name
}

// ContentTypeHeader carries datacontenttype (lower-case, as the bindings
// write header names).
const ContentTypeHeader = "content-type"

// Prefix is the header name prefix of the binding's attributes.
func (b Binding) Prefix() string { return b.prefix }

// String names the binding.
func (b Binding) String() string { return b.name }

// Headers returns e's attributes as the binding's headers, values encoded
// as it requires; names are lower-case. Sinks add their own (Nats-Msg-Id,
// Idempotency-Key) on top.
func (b Binding) Headers(e *switchyard.Event) []switchyard.Header {
	return b.AppendHeaders(make([]switchyard.Header, 0, 9+len(e.Extensions)), e)
}

// AppendHeaders appends Headers(e) to h: a sink reuses one slice for
// every message it encodes.
func (b Binding) AppendHeaders(h []switchyard.Header, e *switchyard.Event) []switchyard.Header {
	b.each(e, func(prefix, name, value string, encode bool) {
		if encode {
			value = PercentEncode(value)
		}
		h = append(h, switchyard.Header{Name: b.headerName(prefix, name), Value: value})
	})
	return h
}

// Size is what Headers(e) adds up to, without building it: the bytes of
// every header's name and encoded value, and how many headers there are.
// Ingest sizes every event against its routes with it, so it allocates
// nothing.
func (b Binding) Size(e *switchyard.Event) (bytes, headers int) {
	if t := e.Time; !t.IsZero() {
		// The time header is counted without formatting it (a string per
		// event); its text never needs percent-encoding.
		bytes, headers = len(b.prefix)+len(AttrTime)+formattedTimeLen(t), 1
		untimed := *e
		untimed.Time = time.Time{}
		e = &untimed
	}
	b.each(e, func(prefix, name, value string, encode bool) {
		n := len(value)
		if encode {
			n = percentEncodedLen(value)
		}
		bytes += len(prefix) + len(name) + n
		headers++
	})
	return bytes, headers
}

// SizeBound is an upper bound of Size(e) in a few additions: every value
// counted as if each of its bytes were percent-encoded (three bytes) where
// the binding encodes, every attribute name as the longest one, every
// header the binding could write counted. A sink that checks an event
// against its limits with it needs Size only when the bound does not fit
// (an event of ordinary size never comes near them).
func (b Binding) SizeBound(e *switchyard.Event) (bytes, headers int) {
	enc := 1
	if b.percent {
		enc = 3
	}
	values := len(e.SpecVersion) + len(e.ID) + len(e.Source) + len(e.Type) + len(e.Subject) + len(e.DataContentType) + len(e.DataSchema)
	headers = 8 + len(e.Extensions) // seven string attributes, the time, the extensions
	if b.ceType {
		headers++ // datacontenttype as content-type and as <prefix>datacontenttype
		values += len(e.DataContentType)
	}
	names := headers * (len(b.prefix) + len(AttrDataContentType)) // the longest name
	for _, x := range e.Extensions {
		names += len(x.Name)
		values += len(x.Value)
	}
	bytes = names + enc*values
	if !e.Time.IsZero() {
		bytes += formattedTimeLen(e.Time)
	}
	return bytes, headers
}

// each calls add for every header of e in the binding, its name in two
// parts (the attribute prefix, or "" for content-type and the pass-through
// headers) and whether its value is to be percent-encoded.
func (b Binding) each(e *switchyard.Event, add func(prefix, name, value string, encode bool)) {
	Each(e, func(name, value string) {
		switch {
		case name == AttrDataContentType:
			add("", ContentTypeHeader, value, false)
			if b.ceType {
				add(b.prefix, name, value, b.percent)
			}
		case passThrough[name]:
			add("", name, value, false)
		default:
			add(b.prefix, name, value, b.percent)
		}
	})
}

// Decode reads an event from a message's headers and body, strictly: the
// first header that does not follow the binding or the spec is an
// invalid_event error. A message whose content type is the JSON event
// format is read in structured mode (DecodeJSON). Ingest uses it.
func (b Binding) Decode(hs []switchyard.Header, data []byte) (switchyard.Event, error) {
	if b.isStructured(hs) {
		return DecodeJSON(data)
	}
	var first error
	ev := b.decodeBinary(hs, data, func(header string, err error) bool {
		first = invalid("header %s: %s", header, switchyard.ErrorMessage(err))
		return false
	})
	return ev, first
}

// DecodeLenient reads an event as Decode does, but never fails: a consumer
// must neither wedge on a message it cannot fully read nor drop it. What
// it worked around is returned as warnings: a value that is not UTF-8
// (invalid bytes replaced by U+FFFD), a bad percent-encoding (the raw value
// kept), a time that is not RFC 3339 (left zero), a name the spec does not
// allow (kept), a structured body that is not a CloudEvent (read as
// binary). Missing attributes are left empty.
func (b Binding) DecodeLenient(hs []switchyard.Header, data []byte) (ev switchyard.Event, warnings []string) {
	if b.isStructured(hs) {
		ev, err := decodeJSON(data, func(w string) { warnings = append(warnings, "structured body: "+w) })
		if err == nil {
			return ev, warnings
		}
		warnings = append(warnings[:0], "structured body: "+switchyard.ErrorMessage(err)+"; read in binary mode")
	}
	ev = b.decodeBinary(hs, data, func(header string, err error) bool {
		warnings = append(warnings, warn(header, "%s", lenientMessage(err)))
		return true
	})
	return ev, warnings
}

// decodeBinary maps headers to attributes. Names match case-insensitively;
// of a repeated header the first counts. problem is told each header it
// had to work around and says whether to go on.
func (b Binding) decodeBinary(hs []switchyard.Header, data []byte, problem func(header string, err error) bool) switchyard.Event {
	d := binaryDecoder{b: b, problem: problem}
	seen := make(map[string]bool, len(hs))
	for _, h := range hs {
		name := strings.ToLower(h.Name)
		if seen[name] {
			switch {
			case name == "tracestate":
				// A list (W3C Trace Context; RFC 9110 §5.3): its lines
				// are one value, joined by commas.
				d.joinExtension(name, h.Value)
			case passThrough[name], name == d.b.prefix:
				// traceparent: the first counts; a trace header is not
				// a reason to refuse the event. The prefix alone was
				// said of, and dropped, the first time.
			case d.b.isEventHeader(name) && !d.problem(h.Name, workedAround(invalid("the header is repeated: an attribute has one value"), "the first value kept")):
				return d.ev
			}
			continue
		}
		seen[name] = true
		if !d.header(h, name) {
			return d.ev
		}
	}
	d.ev.DataContentType = b.contentType(d.contentType, d.ceContentType)
	SortExtensions(&d.ev)
	if len(data) > 0 {
		d.ev.Data = data
	}
	return d.ev
}

// isEventHeader says whether the header name (lower case) carries part of
// the event: an attribute, the content type or a pass-through header.
func (b Binding) isEventHeader(name string) bool {
	return strings.HasPrefix(name, b.prefix) || name == ContentTypeHeader || passThrough[name]
}

// binaryDecoder is decodeBinary's state: the event so far, and the two
// headers that may carry its datacontenttype.
type binaryDecoder struct {
	b                          Binding
	problem                    func(header string, err error) bool
	ev                         switchyard.Event
	contentType, ceContentType string
}

// header maps one header (name in lower case) into the event. It returns
// false when problem said to stop.
func (d *binaryDecoder) header(h switchyard.Header, name string) bool {
	attr, isAttr := strings.CutPrefix(name, d.b.prefix)
	if isAttr && attr == "" {
		// The prefix alone: a header meant as an attribute whose name was
		// lost (an empty template variable), not application metadata.
		return d.problem(h.Name, workedAround(invalid("the header names no attribute: the %q prefix must be followed by an attribute's name", d.b.prefix), "dropped"))
	}
	if !isAttr && name != ContentTypeHeader && !passThrough[name] {
		return true // not part of the event (broker or application metadata)
	}
	v, err := d.b.headerValue(h.Value, isAttr)
	if err != nil && !d.problem(h.Name, err) {
		return false
	}
	return d.place(h.Name, name, attr, isAttr, v)
}

// place puts the value v of the header named header (name in lower case;
// attr, with isAttr, the attribute it names after the prefix) where it
// belongs in the event. It returns false when problem said to stop.
func (d *binaryDecoder) place(header, name, attr string, isAttr bool, v string) bool {
	// valid checks v as the value of attribute a. An invalid one is left
	// out, and stop set when problem says to stop: a value the lenient
	// decoder let pass was kept before, and one no binding can carry on (a
	// content type of control characters) failed its delivery to a service
	// until it was dead-lettered (a broker trial).
	stop := false
	valid := func(a string) bool {
		err := Check(a, v)
		if err == nil {
			return true
		}
		stop = !d.problem(header, workedAround(err, "left out"))
		return false
	}
	switch {
	case name == ContentTypeHeader:
		if valid(AttrDataContentType) {
			d.contentType = v
		}
	case !isAttr:
		if valid(name) {
			d.extension(name, v)
		}
	case attr == AttrDataContentType:
		if valid(attr) {
			d.ceContentType = v
		}
	case !isContextAttribute(attr) && !ValidExtensionName(attr):
		// A name no binding could carry on (a webhook refuses the
		// header): not kept, or delivering the event would fail for
		// ever.
		return d.problem(header, workedAround(invalid("extension attribute %q: names are 1 to %d lower-case letters and digits", attr, MaxExtensionNameLen), "dropped"))
	case isContextAttribute(attr):
		// Kept even when the lenient decoder lets a problem pass: the
		// producer's id, source and type are what dedup and routing go by.
		// Left out, an id would be derived from every header, and a
		// redelivery with one header changed would count as new (a review).
		if err := Check(attr, v); err != nil && !d.problem(header, err) {
			return false
		}
		if err := set(&d.ev, attr, v); err != nil && !d.problem(header, err) {
			return false
		}
	case !valid(attr): // an invalid extension: left out
	case passThrough[attr]:
		d.extension(attr, v)
	default:
		if err := set(&d.ev, attr, v); err != nil && !d.problem(header, err) {
			return false
		}
	}
	return !stop
}

// extension keeps a pass-through header as an extension attribute: the
// first of ce-traceparent and traceparent counts.
func (d *binaryDecoder) extension(name, value string) {
	if value != "" && d.ev.Extension(name) == "" {
		d.ev.Extensions = append(d.ev.Extensions, switchyard.Header{Name: name, Value: value})
	}
}

// joinExtension appends value to the pass-through extension name, as a
// further element of its list.
func (d *binaryDecoder) joinExtension(name, value string) {
	for i := range d.ev.Extensions {
		if x := &d.ev.Extensions[i]; x.Name == name && value != "" && Check(name, value) == nil {
			x.Value += "," + value
			return
		}
	}
}

// contentType picks datacontenttype from the two headers that may carry
// it: the binding's own first, the other when it is absent.
func (b Binding) contentType(header, ce string) string {
	if b.ceType && ce != "" || header == "" {
		return ce
	}
	return header
}

// AttributeValue is an attribute as the binding carries it in a header
// value, decoded (Decode's rules): a value that does not decode is returned
// as it is.
func (b Binding) AttributeValue(v string) string {
	dec, _ := b.headerValue(v, true)
	return dec
}

// headerValue decodes one header value: valid UTF-8 (invalid bytes
// replaced, with an error), and for a percent-encoding binding's attribute
// one round of percent-decoding, after unquoting a double-quoted value
// (§3.1.3.2). A bad encoding keeps the raw value, with an error.
func (b Binding) headerValue(v string, isAttr bool) (string, error) {
	if !utf8.ValidString(v) {
		return strings.ToValidUTF8(v, "\uFFFD"), workedAround(invalid("value is not valid UTF-8"), "invalid bytes replaced")
	}
	if !isAttr || !b.percent {
		return v, nil
	}
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = unquote(v[1 : len(v)-1])
	}
	if strings.IndexByte(v, '%') < 0 {
		return v, nil
	}
	dec, err := url.PathUnescape(v)
	switch {
	case err != nil:
		return v, workedAround(invalid("bad percent-encoding"), "raw value kept")
	case !utf8.ValidString(dec):
		return v, workedAround(invalid("percent-encoding is not UTF-8"), "raw value kept")
	}
	return dec, nil
}

// unquote undoes an RFC 7230 quoted-string's backslash escapes.
func unquote(s string) string {
	if strings.IndexByte(s, '\\') < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// isStructured reports a message whose content type is the JSON event
// format: the body is the whole event. A message with the binding's
// specversion header is in binary mode whatever its content type (as the
// SDKs read it), so an event whose own datacontenttype is
// application/cloudevents+json still travels in binary mode.
func (b Binding) isStructured(hs []switchyard.Header) bool {
	structured := false
	for _, h := range hs {
		switch {
		case strings.EqualFold(h.Name, b.prefix+AttrSpecVersion):
			return false
		case strings.EqualFold(h.Name, ContentTypeHeader):
			media := Media(h.Value)
			structured = structured || media == MediaStructured
		}
	}
	return structured
}

// PercentEncode encodes v as the HTTP and NATS bindings require
// (§3.1.3.2): space, '"', '%' and every byte outside printable ASCII
// (U+0021..U+007E) become %XX of their UTF-8 bytes, upper-case.
func PercentEncode(v string) string {
	n := percentEncodedLen(v)
	if n == len(v) {
		return v
	}
	const hexDigits = "0123456789ABCDEF"
	b := make([]byte, 0, n)
	for i := 0; i < len(v); i++ {
		c := v[i]
		if mustEncode(c) {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

// formattedTimeLen is len(FormatTime(t)), without formatting t: RFC 3339 in
// UTC, "2006-01-02T15:04:05Z" with the nanoseconds' significant digits.
func formattedTimeLen(t time.Time) int {
	u := t.UTC()
	if y := u.Year(); y < 0 || y > 9999 {
		return len(FormatTime(t))
	}
	n := len("2006-01-02T15:04:05Z")
	if ns := u.Nanosecond(); ns != 0 {
		digits := 9
		for ns%10 == 0 {
			ns /= 10
			digits--
		}
		n += 1 + digits
	}
	return n
}

func percentEncodedLen(v string) int {
	n := len(v)
	for i := 0; i < len(v); i++ {
		if mustEncode(v[i]) {
			n += 2
		}
	}
	return n
}

func mustEncode(c byte) bool { return c <= ' ' || c >= 0x7f || c == '"' || c == '%' }

// FromHTTP lists an HTTP request's headers as the bindings read them: the
// first value of each, sorted by name so the result does not depend on
// map order.
func FromHTTP(h http.Header) []switchyard.Header {
	hs := make([]switchyard.Header, 0, len(h))
	for k, vs := range h {
		for _, v := range vs { // every value: a repeated attribute is the decoder's to refuse
			hs = append(hs, switchyard.Header{Name: k, Value: v})
		}
	}
	sort.SliceStable(hs, func(i, j int) bool { return hs[i].Name < hs[j].Name })
	return hs
}

// worked is a problem the lenient decoder works around, with what it did:
// strict decoding (ingest) refuses it with the problem alone, lenient
// decoding warns with both.
type worked struct {
	err error
	did string
}

func workedAround(err error, did string) error { return &worked{err, did} }

func (w *worked) Error() string { return w.err.Error() + "; " + w.did }
func (w *worked) Unwrap() error { return w.err }

// lenientMessage is a problem's message as the lenient decoder warns it.
func lenientMessage(err error) string {
	if w, ok := err.(*worked); ok {
		return switchyard.ErrorMessage(w.err) + "; " + w.did
	}
	return switchyard.ErrorMessage(err)
}
