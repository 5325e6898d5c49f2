package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/cloudevents"
	"github.com/switchyard-router/switchyard/internal/logthrottle"
)

// DerivedIDPrefix starts every id DecodeInbound derives from a message's
// content, so a derived id can never be mistaken for a sender's.
const DerivedIDPrefix = "sha256-"

// DecodeInbound turns one consumed message (its headers and value) into an
// Inbound by the binding it came through (cloudevents.NATS or
// cloudevents.Kafka), leniently (Binding.DecodeLenient): it never fails, so
// an inbox neither wedges on a message it cannot fully read nor drops it;
// what it worked around is returned as warnings for the source to log.
//
// Event.ID comes from the header idHeader ("" = the binding's id
// attribute) and only from it: a message without it (or with an empty
// value) gets an id derived from its content, DerivedIDPrefix + the hex
// SHA-256 of its source, type, subject, every header (sorted) and its
// data, and IDDerived is set. The same content always yields the same id;
// the offset or sequence never enters it, so a redelivery is recognised.
// An id longer than switchyard.MaxInboundIDLen is replaced in the same way, and a
// partition key longer than MaxAttrLen left out, each with a warning.
func DecodeInbound(b cloudevents.Binding, headers []switchyard.Header, value []byte, idHeader, origin string) (in switchyard.Inbound, warnings []DecodeWarning) {
	var lenient []string
	in.Event, lenient = b.DecodeLenient(headers, value)
	for _, w := range lenient {
		warnings = append(warnings, DecodeWarning{WarnLenient, w})
	}
	if missing := missingRequired(&in.Event); len(missing) > 0 {
		warnings = append(warnings, DecodeWarning{WarnNotACloudEvent, fmt.Sprintf("not a CloudEvent: no %s; passed on without, as the message came", strings.Join(missing, ", "))})
	}
	id := inboundID(b, &in.Event, headers, idHeader)
	if len(id) > switchyard.MaxInboundIDLen {
		warnings = append(warnings, DecodeWarning{WarnIDTooLong, fmt.Sprintf("the id is %d bytes, longer than the %d an inbox keeps: an id derived from the content takes its place (with missing_id = \"reject\" the message is dropped)", len(id), switchyard.MaxInboundIDLen)})
		id, in.IDTooLong = "", true
	}
	if k := in.Event.PartitionKey(); len(k) > MaxAttrLen {
		warnings = append(warnings, DecodeWarning{WarnPartitionKeyTooLong, fmt.Sprintf("the partitionkey is %d bytes, longer than the %d an inbox keeps: left out", len(k), MaxAttrLen)})
		in.Event.Extensions = slices.DeleteFunc(in.Event.Extensions, func(h switchyard.Header) bool { return h.Name == "partitionkey" })
	}
	if id == "" {
		id = DeriveInboundID(in.Event.Source, in.Event.Type, in.Event.Subject, headers, value)
		in.IDDerived = true
	}
	in.Event.ID = id
	in.Origin = origin
	return in, warnings
}

// DecodeWarning is one thing DecodeInbound worked around, of a Kind an
// inbox can log by (one the producer does by design is said once).
type DecodeWarning struct {
	Kind DecodeWarningKind
	Text string
}

func (w DecodeWarning) String() string { return w.Text }

// DecodeWarningKind is what a DecodeWarning is about.
type DecodeWarningKind uint8

const (
	WarnLenient             DecodeWarningKind = iota // the binding read a part leniently (cloudevents.Binding.DecodeLenient)
	WarnNotACloudEvent                               // an attribute CloudEvents requires is missing (missingRequired)
	WarnIDTooLong                                    // the id is longer than switchyard.MaxInboundIDLen: one is derived
	WarnPartitionKeyTooLong                          // the partitionkey is longer than MaxAttrLen: left out
)

// missingRequired names the attributes CloudEvents requires (but the id,
// which an inbox derives) that ev lacks. A message a producer sent as
// plain bytes has none: the inbox takes it and hands it on as it came,
// with a warning (a new-user trial found it passed on in silence).
func missingRequired(ev *switchyard.Event) []string {
	var missing []string
	for _, a := range []struct{ name, value string }{{cloudevents.AttrSpecVersion, ev.SpecVersion}, {cloudevents.AttrType, ev.Type}, {cloudevents.AttrSource, ev.Source}} {
		if a.value == "" {
			missing = append(missing, a.name)
		}
	}
	return missing
}

// InboundDecoder is one inbox source's DecodeInbound, with the log of
// what it worked around: at most one line a second, like_it_since_last
// counting those held back (a producer's quirk comes in each of its
// messages), and each derived id at Debug.
type InboundDecoder struct {
	Binding  cloudevents.Binding
	IDHeader string
	Log      hclog.Logger
	Noun     string // how the log names one: "message", "record"

	lenient logthrottle.Throttle
	notCE   atomic.Bool // a message that is not a CloudEvent was logged
}

// Decode is DecodeInbound, logged. That a message is not a CloudEvent is
// said once, and then at Debug: a producer that sends plain bytes does so
// by design, and its every message would say it again.
func (d *InboundDecoder) Decode(headers []switchyard.Header, value []byte, origin string) switchyard.Inbound {
	in, warnings := DecodeInbound(d.Binding, headers, value, d.IDHeader, origin)
	for _, w := range warnings {
		if w.Kind == WarnNotACloudEvent {
			if d.notCE.Swap(true) {
				d.Log.Debug(d.Noun+" decoded leniently", "origin", origin, "problem", w.Text)
			} else {
				d.Log.Warn(d.Noun+" decoded leniently (said once: the next ones are logged at debug)", "origin", origin, "problem", w.Text)
			}
			continue
		}
		if n, ok := d.lenient.Take("decoded leniently", time.Now()); ok {
			d.Log.Warn(d.Noun+" decoded leniently", "origin", origin, "problem", w.Text, "like_it_since_last", n)
		}
	}
	if in.IDDerived {
		d.Log.Debug(d.Noun+" without id header; id derived from its content", "origin", origin, "id_header", d.IDHeader, "id", in.Event.ID)
	}
	return in
}

// inboundID is the message's id by the inbox's id header: the binding's id
// attribute; another attribute, which then leaves the extensions; or a
// header outside the event, read as it is (UTF-8 repaired).
func inboundID(b cloudevents.Binding, ev *switchyard.Event, headers []switchyard.Header, idHeader string) string {
	idHeader = strings.ToLower(idHeader)
	attr, isAttr := strings.CutPrefix(idHeader, b.Prefix())
	switch {
	case idHeader == "" || attr == cloudevents.AttrID:
		return ev.ID
	case isAttr && cloudevents.IsContextAttribute(attr):
		return cloudevents.Get(ev, attr)
	case isAttr:
		id := ev.Extension(attr)
		ev.Extensions = slices.DeleteFunc(ev.Extensions, func(h switchyard.Header) bool { return h.Name == attr })
		return id
	}
	for _, h := range headers {
		if strings.EqualFold(h.Name, idHeader) {
			return strings.ToValidUTF8(h.Value, "\uFFFD")
		}
	}
	return ""
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
