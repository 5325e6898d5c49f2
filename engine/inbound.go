package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/switchyard-router/switchyard"
)

// Attribute prefixes of the CloudEvents binary-mode bindings.
const (
	// KafkaPrefix is the Kafka binding's header prefix. Its header values
	// are plain UTF-8: no percent-encoding.
	KafkaPrefix = "ce_"
	// HeaderPrefix is the prefix of the HTTP and NATS bindings. Values may
	// be percent-encoded (HTTP binding §3.1.3.2); DecodeInbound decodes them.
	HeaderPrefix = "ce-"
)

// DerivedIDPrefix starts every id DecodeInbound derives from a message's
// content, so a derived id can never be mistaken for a sender's.
const DerivedIDPrefix = "sha256-"

// DecodeInbound turns one consumed message (its headers and value) into an
// Inbound by the CloudEvents binary-mode binding whose attribute prefix is
// prefix: KafkaPrefix ("ce_") for Kafka, HeaderPrefix ("ce-") for NATS and
// HTTP.
//
//   - <prefix><attr> headers are the context attributes (specversion, source,
//     type, subject, dataschema, time) and, for any other name, extensions
//     (lower-cased). With the "ce-" prefix a value containing '%' is
//     percent-decoded.
//   - content-type is datacontenttype; traceparent and tracestate pass
//     through as extensions, as ingest stores them.
//   - The value is the data.
//   - Event.ID comes from the header idHeader ("" = <prefix>id) and only from
//     it: a message without it (or with an empty value) gets an id derived
//     from its content, DerivedIDPrefix + the hex SHA-256 of its source, type,
//     subject, every header (sorted) and its data, and IDDerived is set. The
//     same content always yields the same id; the offset or sequence never
//     enters it, so a redelivery is recognised.
//   - Header names match case-insensitively; of a repeated header the first
//     value counts.
//
// DecodeInbound never fails: an inbox must neither wedge on a message it
// cannot fully parse nor drop it. What it had to work around is returned as
// warnings for the source to log: a value that is not valid UTF-8 (invalid
// bytes replaced by U+FFFD), a bad percent-encoding (the raw value is kept),
// a time that is not RFC 3339 (left zero). Missing attributes are left
// empty: a message that is no CloudEvent at all (no ce headers) becomes an
// event with only data and a derived id.
func DecodeInbound(headers []switchyard.Header, value []byte, prefix, idHeader, origin string) (in switchyard.Inbound, warnings []string) {
	prefix = strings.ToLower(prefix)
	if idHeader == "" {
		idHeader = prefix + "id"
	}
	idHeader = strings.ToLower(idHeader)
	percent := prefix == HeaderPrefix

	ev := &in.Event
	seen := make(map[string]bool, len(headers))
	var id string
	var ceContentType string
	for _, h := range headers {
		name := strings.ToLower(h.Name)
		if seen[name] {
			continue
		}
		seen[name] = true
		attr, isAttr := strings.CutPrefix(name, prefix)
		isAttr = isAttr && attr != ""
		v := h.Value
		if !utf8.ValidString(v) {
			warnings = append(warnings, fmt.Sprintf("header %s: value is not valid UTF-8; invalid bytes replaced", h.Name))
			v = strings.ToValidUTF8(v, "\uFFFD")
		}
		if isAttr && percent && strings.IndexByte(v, '%') >= 0 {
			dec, err := url.PathUnescape(v)
			switch {
			case err != nil:
				warnings = append(warnings, fmt.Sprintf("header %s: bad percent-encoding; raw value kept", h.Name))
			case !utf8.ValidString(dec):
				warnings = append(warnings, fmt.Sprintf("header %s: percent-encoding is not UTF-8; raw value kept", h.Name))
			default:
				v = dec
			}
		}
		if name == idHeader {
			id = v
			continue
		}
		switch {
		case name == "content-type":
			ev.DataContentType = v
		case passThrough[name]:
			ev.Extensions = append(ev.Extensions, switchyard.Header{Name: name, Value: v})
		case !isAttr:
			// Not part of the event (broker or application metadata).
		default:
			switch attr {
			case "id":
				// Only the configured id header names the id.
			case "specversion":
				ev.SpecVersion = v
			case "source":
				ev.Source = v
			case "type":
				ev.Type = v
			case "subject":
				ev.Subject = v
			case "dataschema":
				ev.DataSchema = v
			case "datacontenttype":
				// Not in the binding (content-type carries it); accepted
				// when content-type is absent.
				ceContentType = v
			case "time":
				t, err := time.Parse(time.RFC3339Nano, v)
				if err != nil {
					warnings = append(warnings, fmt.Sprintf("header %s: %q is not an RFC 3339 time; ignored", h.Name, v))
					break
				}
				ev.Time = t
			default:
				ev.Extensions = append(ev.Extensions, switchyard.Header{Name: attr, Value: v})
			}
		}
	}
	if ev.DataContentType == "" {
		ev.DataContentType = ceContentType
	}
	sort.SliceStable(ev.Extensions, func(i, j int) bool { return ev.Extensions[i].Name < ev.Extensions[j].Name })
	if len(value) > 0 {
		ev.Data = value
	}
	if id == "" {
		id = DeriveInboundID(ev.Source, ev.Type, ev.Subject, headers, value)
		in.IDDerived = true
	}
	ev.ID = id
	in.Origin = origin
	return in, warnings
}

// DeriveInboundID is the id DecodeInbound gives a message without an id
// header: DerivedIDPrefix + the hex SHA-256 of source, type, subject, the
// headers (names lower-cased, sorted by name then value) and the data, each
// length-prefixed so no two different messages can encode alike.
func DeriveInboundID(source, typ, subject string, headers []switchyard.Header, data []byte) string {
	hs := make([]switchyard.Header, len(headers))
	for i, h := range headers {
		hs[i] = switchyard.Header{Name: strings.ToLower(h.Name), Value: h.Value}
	}
	sort.Slice(hs, func(i, j int) bool {
		if hs[i].Name != hs[j].Name {
			return hs[i].Name < hs[j].Name
		}
		return hs[i].Value < hs[j].Value
	})
	sum := sha256.New()
	var n [8]byte
	field := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		sum.Write(n[:])
		sum.Write(b)
	}
	field([]byte("switchyard inbound id v1"))
	field([]byte(source))
	field([]byte(typ))
	field([]byte(subject))
	binary.BigEndian.PutUint64(n[:], uint64(len(hs)))
	sum.Write(n[:])
	for _, h := range hs {
		field([]byte(h.Name))
		field([]byte(h.Value))
	}
	field(data)
	return DerivedIDPrefix + hex.EncodeToString(sum.Sum(nil))
}
