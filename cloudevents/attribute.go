// Package cloudevents is the one place the router maps a switchyard.Event
// to and from the CloudEvents formats and protocol bindings it speaks: the
// JSON event format (structured and batch mode, over HTTP and in pull
// messages, the DLQ view and `router plugin test`) and the binary mode of
// the HTTP, NATS and Kafka bindings, each with its own header rules.
//
// Everything that reads or writes an event goes through it, so the same
// event looks the same in every binding, and encode → decode returns it
// unchanged (the round-trip property test in this package). Why each rule
// is what it is, with the spec sections: docs/decisions/cloudevents-codec.md.
package cloudevents

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/switchyard-router/switchyard"
)

// SpecVersion is the only CloudEvents version the router speaks.
const SpecVersion = "1.0"

// The context attributes of CloudEvents 1.0, by their names.
const (
	AttrSpecVersion     = "specversion"
	AttrID              = "id"
	AttrSource          = "source"
	AttrType            = "type"
	AttrSubject         = "subject"
	AttrTime            = "time"
	AttrDataContentType = "datacontenttype"
	AttrDataSchema      = "dataschema"
)

// MaxExtensionNameLen bounds an extension attribute's name. The spec asks
// for at most 20 characters (SHOULD); the router accepts up to 64.
const MaxExtensionNameLen = 64

// MaxExtensions bounds the extension attributes of one event. The spec sets
// no limit; without one, a request under the body limit could carry a
// hundred thousand of them and cost the decoder, every sink's headers and
// every consumer far more than its size (a review measured 37 s of CPU for
// one 1 MiB body). 256 is far above what tracing, partitioning and
// routing extensions use.
const MaxExtensions = 256

// passThrough are extensions that travel under their own header names in
// every binding, not as ce- attributes: W3C trace context, whose headers
// tracing middleware reads as they are.
var passThrough = map[string]bool{"traceparent": true, "tracestate": true}

// IsPassThrough reports whether the extension name travels under its own
// header name (traceparent, tracestate).
func IsPassThrough(name string) bool { return passThrough[name] }

// Each calls fn for every attribute of e that has a value, in the canonical
// order: the context attributes as the spec lists them, then the
// extensions (sorted by name, as events are stored). time is in its
// canonical form, RFC 3339 in UTC.
func Each(e *switchyard.Event, fn func(name, value string)) {
	attr := func(name, value string) {
		if value != "" {
			fn(name, value)
		}
	}
	attr(AttrSpecVersion, e.SpecVersion)
	attr(AttrID, e.ID)
	attr(AttrSource, e.Source)
	attr(AttrType, e.Type)
	attr(AttrSubject, e.Subject)
	if !e.Time.IsZero() {
		fn(AttrTime, FormatTime(e.Time))
	}
	attr(AttrDataContentType, e.DataContentType)
	attr(AttrDataSchema, e.DataSchema)
	for _, x := range e.Extensions {
		attr(x.Name, x.Value)
	}
}

// Get is the value of e's attribute name in its canonical string form, or
// "" when e has none.
func Get(e *switchyard.Event, name string) (value string) {
	Each(e, func(n, v string) {
		if n == name && value == "" {
			value = v
		}
	})
	return value
}

// IsContextAttribute reports one of the spec's context attributes, as
// opposed to an extension.
func IsContextAttribute(name string) bool { return isContextAttribute(name) }

// FormatTime is the canonical string of a Timestamp attribute.
func FormatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// Set sets the attribute name of e to value after checking both against
// the spec (Check). An unknown name is an extension.
func Set(e *switchyard.Event, name, value string) error {
	if err := Check(name, value); err != nil {
		return err
	}
	return set(e, name, value)
}

// Check reports why value cannot be the value of the attribute name, or
// why name cannot name an extension: strings are UTF-8 without the control
// characters the String type excludes (a header binding could not carry
// them as sent), and extension names are lower-case letters and digits.
func Check(name, value string) error {
	if !utf8.ValidString(value) {
		return invalid("attribute %q is not valid UTF-8", name)
	}
	if i := strings.IndexFunc(value, isControl); i >= 0 {
		r, _ := utf8.DecodeRuneInString(value[i:])
		return invalid("attribute %q has the control character %U at byte %d: CloudEvents attribute strings exclude U+0000-U+001F and U+007F-U+009F", name, r, i)
	}
	if name == AttrID && value == "" {
		// Read as "no id", it would have the router assign one, and each
		// retry of the event would be stored again.
		return invalid("id must not be empty: CloudEvents requires a non-empty id (one left out is assigned at ingest, and derived by an inbox)")
	}
	if !isContextAttribute(name) && !ValidExtensionName(name) {
		return invalid("extension attribute %q: names are 1 to %d lower-case letters and digits", name, MaxExtensionNameLen)
	}
	return nil
}

// set assigns without Check: it fails only where the value cannot be held
// at all (a time that is no RFC 3339 timestamp, a name the JSON format
// reserves).
func set(e *switchyard.Event, name, value string) error {
	switch name {
	case AttrSpecVersion:
		e.SpecVersion = value
	case AttrID:
		e.ID = value
	case AttrSource:
		e.Source = value
	case AttrType:
		e.Type = value
	case AttrSubject:
		e.Subject = value
	case AttrDataContentType:
		e.DataContentType = value
	case AttrDataSchema:
		e.DataSchema = value
	case AttrTime:
		// RFC 3339 §5.6 lets "T" and "Z" be lower case; Go's parser does not.
		t, err := time.Parse(time.RFC3339Nano, strings.ToUpper(value))
		if err != nil && isLeapSecond(value) {
			return invalid("time %q is a leap second (second 60), which RFC 3339 allows but the router cannot hold (Go's time has no leap seconds): send the second after it", value)
		}
		if err != nil {
			return invalid("time %q is not an RFC 3339 timestamp", value)
		}
		if t.IsZero() {
			// Go's zero time, which Event.Time holds for "no time": taken,
			// it would be replaced by the time of ingest. (The years a
			// router stores are storage.CheckTime's.)
			return invalid("time %q is the first instant of year 1, which reads as no time at all: an event time is a real one", value)
		}
		e.Time = t
	case "data", "data_base64":
		return invalid("%q is not an attribute: the JSON format reserves it for the data", name)
	default:
		// An empty value is an absent attribute, as it is for the
		// context attributes' fields.
		if value != "" {
			if len(e.Extensions) >= MaxExtensions {
				// Not "the 257th": headers come in no order.
				return invalid("an event has at most %d extension attributes, and this one has more (%q among them)", MaxExtensions, name)
			}
			e.Extensions = append(e.Extensions, switchyard.Header{Name: name, Value: value})
		}
	}
	return nil
}

// isLeapSecond reports an RFC 3339 timestamp of a leap second (§5.7): its
// seconds are 60, at 23:59 UTC (a local time is offset from it); with 59
// in their place it parses.
func isLeapSecond(value string) bool {
	if len(value) < 20 || value[17:19] != "60" {
		return false
	}
	t, err := time.Parse(time.RFC3339Nano, strings.ToUpper(value[:17]+"59"+value[19:]))
	t = t.UTC()
	return err == nil && t.Hour() == 23 && t.Minute() == 59
}

// contextAttributes are the names of the context attributes, in the
// spec's order.
var contextAttributes = [...]string{AttrSpecVersion, AttrID, AttrSource, AttrType, AttrSubject, AttrTime, AttrDataContentType, AttrDataSchema}

func isContextAttribute(name string) bool { return slices.Contains(contextAttributes[:], name) }

// isControl reports the characters CloudEvents' String type excludes.
func isControl(r rune) bool { return r <= 0x1f || (r >= 0x7f && r <= 0x9f) }

// ValidExtensionName reports a name the router takes for an extension
// attribute: 1 to MaxExtensionNameLen lower-case letters and digits.
func ValidExtensionName(s string) bool {
	if s == "" || len(s) > MaxExtensionNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// SortExtensions puts e's extensions in name order, the order events are
// stored and compared in.
func SortExtensions(e *switchyard.Event) {
	x := e.Extensions
	for i := 1; i < len(x); i++ { // insertion sort: a handful, mostly sorted
		for j := i; j > 0 && x[j].Name < x[j-1].Name; j-- {
			x[j], x[j-1] = x[j-1], x[j]
		}
	}
}

func invalid(format string, args ...any) error {
	return switchyard.Errorf(switchyard.EINVALID, format, args...)
}

// warn formats a lenient decoder's note about a header it worked around.
func warn(header, format string, args ...any) string {
	return "header " + header + ": " + fmt.Sprintf(format, args...)
}
