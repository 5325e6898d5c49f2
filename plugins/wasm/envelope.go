package wasm

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/cloudevents"
)

// Envelopes (docs/plugin-abi.md) are little-endian and length-prefixed; a str is a
// u32 byte length followed by the bytes.
//
// Event envelope, what sy_handle's input_read returns:
//
//	u8 version (1) | str id | str type | str source | str subject | str key |
//	u32 n × (str name, str value) headers | str data
//
// key is ev.PartitionKey(); headers are the event's Extensions (CloudEvents
// extension attributes and pass-through headers such as traceparent),
// sorted by name.
//
// Output envelope, what the guest passes to emit:
//
//	str destination | u8 flags | [str key] | [u32 n × (str, str)] | [str data] | [str id]
//
// flags bit 0: a key follows, bit 1: headers follow, bit 2: data follows,
// bit 3: an id follows, in that order; the other bits must be 0. An absent
// field inherits the input's; headers, when present, replace the input's
// headers. The id came last, in a later release than the others: an
// envelope without it is byte for byte what it was.
//
// Config envelope, what sy_init's input_read returns:
//
//	u32 n × (str key, str value)
//
// with the plugin block's config pairs sorted by key.
const (
	// EventVersion is the first byte of an event envelope.
	EventVersion = 1

	flagKey     = 1 << 0
	flagHeaders = 1 << 1
	flagData    = 1 << 2
	flagID      = 1 << 3
	flagsKnown  = flagKey | flagHeaders | flagData | flagID

	// Output header limits, the same as the HTTP API's for extensions.
	maxHeaderValue = 4096
)

// output is a decoded output envelope.
type output struct {
	Destination string
	HasKey      bool
	Key         string
	HasHeaders  bool
	Headers     []switchyard.Header
	HasData     bool
	Data        []byte
	HasID       bool
	ID          string
}

func appendU32(b []byte, n int) []byte { return binary.LittleEndian.AppendUint32(b, uint32(n)) }

func appendStr(b []byte, s string) []byte { return append(appendU32(b, len(s)), s...) }

// appendEvent appends the event envelope of ev to b.
func appendEvent(b []byte, ev *switchyard.Event) []byte {
	b = append(b, EventVersion)
	b = appendStr(b, ev.ID)
	b = appendStr(b, ev.Type)
	b = appendStr(b, ev.Source)
	b = appendStr(b, ev.Subject)
	b = appendStr(b, ev.PartitionKey())
	b = appendU32(b, len(ev.Extensions))
	for _, h := range ev.Extensions {
		b = appendStr(b, h.Name)
		b = appendStr(b, h.Value)
	}
	b = appendU32(b, len(ev.Data))
	return append(b, ev.Data...)
}

// appendConfig appends the config envelope of cfg (sorted by key) to b.
func appendConfig(b []byte, cfg map[string]string) []byte {
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = appendU32(b, len(keys))
	for _, k := range keys {
		b = appendStr(b, k)
		b = appendStr(b, cfg[k])
	}
	return b
}

// appendOutput appends the output envelope of o to b (the guest's side;
// the tests and the fuzzer use it).
func appendOutput(b []byte, o *output) []byte {
	b = appendStr(b, o.Destination)
	var flags byte
	if o.HasKey {
		flags |= flagKey
	}
	if o.HasHeaders {
		flags |= flagHeaders
	}
	if o.HasData {
		flags |= flagData
	}
	if o.HasID {
		flags |= flagID
	}
	b = append(b, flags)
	if o.HasKey {
		b = appendStr(b, o.Key)
	}
	if o.HasHeaders {
		b = appendU32(b, len(o.Headers))
		for _, h := range o.Headers {
			b = appendStr(b, h.Name)
			b = appendStr(b, h.Value)
		}
	}
	if o.HasData {
		b = appendU32(b, len(o.Data))
		b = append(b, o.Data...)
	}
	if o.HasID {
		b = appendStr(b, o.ID)
	}
	return b
}

// reader decodes an envelope. Its strings alias the buffer.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("at byte %d: %s", r.off, fmt.Sprintf(format, args...))
	}
}

func (r *reader) u8(what string) byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.b) {
		r.fail("the envelope ends before %s (1 byte)", what)
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *reader) u32(what string) int {
	if r.err != nil {
		return 0
	}
	if len(r.b)-r.off < 4 {
		r.fail("the envelope ends before the length of %s (4 bytes, %d left)", what, len(r.b)-r.off)
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b[r.off:])
	r.off += 4
	return int(v)
}

func (r *reader) bytes(what string) []byte {
	n := r.u32(what)
	if r.err != nil {
		return nil
	}
	if n > len(r.b)-r.off {
		r.off -= 4
		r.fail("%s is %d bytes long but only %d bytes follow", what, n, len(r.b)-r.off-4)
		return nil
	}
	v := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return v
}

// str returns the next str as a string that aliases the buffer: the caller
// owns the buffer and never modifies it afterwards.
func (r *reader) str(what string) string {
	b := r.bytes(what)
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// decodeOutput decodes and checks an output envelope. The strings and Data
// of the result alias b, which the caller must not modify afterwards.
func decodeOutput(b []byte) (output, error) {
	var o output
	r := reader{b: b}
	o.Destination = r.str("the destination")
	flags := r.u8("the flags")
	if r.err == nil && flags&^flagsKnown != 0 {
		r.off--
		r.fail("flags 0x%02x has unknown bits (bit 0 key, bit 1 headers, bit 2 data, bit 3 id)", flags)
	}
	if flags&flagKey != 0 {
		o.HasKey = true
		o.Key = r.str("the key")
	}
	if flags&flagHeaders != 0 {
		o.HasHeaders = true
		n := r.u32("the header count")
		// Every header takes at least 8 bytes: a huge count is malformed,
		// and must not make us allocate.
		if r.err == nil && n > (len(b)-r.off)/8 {
			r.off -= 4
			r.fail("%d headers cannot fit in the %d bytes left", n, len(b)-r.off-4)
		}
		if r.err == nil {
			o.Headers = make([]switchyard.Header, n)
			for i := range o.Headers {
				o.Headers[i].Name = r.str("a header name")
				o.Headers[i].Value = r.str("a header value")
			}
		}
	}
	if flags&flagData != 0 {
		o.HasData = true
		o.Data = r.bytes("the data")
	}
	if flags&flagID != 0 {
		o.HasID = true
		o.ID = r.str("the id")
	}
	if r.err == nil && r.off != len(b) {
		r.fail("%d bytes follow the last field (flags 0x%02x)", len(b)-r.off, flags)
	}
	if r.err != nil {
		return output{}, r.err
	}
	if err := o.check(); err != nil {
		return output{}, err
	}
	return o, nil
}

// reservedHeader says whether an output's header may not take name: a
// CloudEvents context attribute's, or data's (the sinks write both as
// ce-<name>).
func reservedHeader(name string) bool {
	return cloudevents.IsContextAttribute(name) || name == "data"
}

// check validates the fields of a decoded output and sorts its headers.
func (o *output) check() error {
	if !utf8.ValidString(o.Destination) {
		return fmt.Errorf("the destination is not valid UTF-8")
	}
	if strings.ContainsAny(o.Destination, " \t\r\n") {
		return fmt.Errorf("destination %q contains white space", o.Destination)
	}
	// The key and header values are attribute strings, as at ingest: UTF-8
	// without control characters, or a consumer would decode CR LF into
	// an attribute no client could have sent.
	if o.HasKey {
		if err := cloudevents.Check("partitionkey", o.Key); err != nil {
			return fmt.Errorf("the key: %s", switchyard.ErrorMessage(err))
		}
	}
	if o.HasID {
		if err := checkID(o.ID); err != nil {
			return err
		}
	}
	if !o.HasHeaders {
		return nil
	}
	exts := 0 // the trace context rides along, uncounted, as at ingest
	for _, h := range o.Headers {
		if !cloudevents.IsPassThrough(h.Name) {
			exts++
		}
	}
	if exts > cloudevents.MaxExtensions {
		return fmt.Errorf("%d headers: an event has at most %d extension attributes", exts, cloudevents.MaxExtensions)
	}
	for _, h := range o.Headers {
		if !cloudevents.ValidExtensionName(h.Name) {
			return fmt.Errorf("header name %q: names are 1 to %d lower-case letters and digits (CloudEvents extension names)", h.Name, cloudevents.MaxExtensionNameLen)
		}
		if reservedHeader(h.Name) {
			return fmt.Errorf("header name %q is a CloudEvents context attribute, not an extension", h.Name)
		}
		if len(h.Value) > maxHeaderValue {
			return fmt.Errorf("header %q: the value is longer than %d bytes", h.Name, maxHeaderValue)
		}
		if err := cloudevents.Check(h.Name, h.Value); err != nil {
			return fmt.Errorf("header %q: %s", h.Name, switchyard.ErrorMessage(err))
		}
	}
	if !slices.IsSortedFunc(o.Headers, cmpHeader) {
		slices.SortStableFunc(o.Headers, cmpHeader)
	}
	for i := 1; i < len(o.Headers); i++ {
		if o.Headers[i].Name == o.Headers[i-1].Name {
			return fmt.Errorf("header %q appears twice", o.Headers[i].Name)
		}
	}
	return nil
}

// checkID holds an output's id to the CloudEvents rules (not empty, UTF-8
// without control characters) and to what an inbox takes from a broker,
// switchyard.MaxInboundIDLen bytes: more than a client may give at ingest,
// so that an id derived from the event's ("<id>/<n>") always fits. Ingest
// also refuses '/', "." and "..", for a stored event's id is a segment of
// the API's URLs; an output's never is.
func checkID(id string) error {
	if len(id) > switchyard.MaxInboundIDLen {
		return fmt.Errorf("the id is %d bytes long: an output's id is at most %d", len(id), switchyard.MaxInboundIDLen)
	}
	if err := cloudevents.Check(cloudevents.AttrID, id); err != nil {
		return fmt.Errorf("the id: %s", switchyard.ErrorMessage(err))
	}
	return nil
}

func cmpHeader(a, b switchyard.Header) int { return strings.Compare(a.Name, b.Name) }

// decodeEvent decodes an event envelope (the guest's side; the tests use
// it to check appendEvent). Strings alias b.
func decodeEvent(b []byte) (ev switchyard.Event, key string, err error) {
	r := reader{b: b}
	if v := r.u8("the version"); r.err == nil && v != EventVersion {
		return ev, "", fmt.Errorf("version %d, want %d", v, EventVersion)
	}
	ev.ID = r.str("the id")
	ev.Type = r.str("the type")
	ev.Source = r.str("the source")
	ev.Subject = r.str("the subject")
	key = r.str("the key")
	n := r.u32("the header count")
	if r.err == nil && n > (len(b)-r.off)/8 {
		r.fail("%d headers cannot fit", n)
	}
	if r.err == nil && n > 0 {
		ev.Extensions = make([]switchyard.Header, n)
		for i := range ev.Extensions {
			ev.Extensions[i].Name = r.str("a header name")
			ev.Extensions[i].Value = r.str("a header value")
		}
	}
	ev.Data = r.bytes("the data")
	if r.err == nil && r.off != len(b) {
		r.fail("%d bytes follow the data", len(b)-r.off)
	}
	return ev, key, r.err
}
