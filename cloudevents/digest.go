package cloudevents

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/switchyard-router/switchyard"
)

// Digest fingerprints an event as one event, whichever binding carried it:
// the SHA-256 of its encoding/json form (switchyard.Event's JSON tags)
// without the trace context. A retry carries a new traceparent (tracing
// middleware makes one per attempt), so two sends of one event differ
// there and nowhere else.
//
// It is the one definition of "the same event" the router has: the
// idempotency records store it for a client-chosen id (api), and a resend
// after its window is compared by it with the event still stored (engine).
// Digests are stored, so a resend across an upgrade must still match: the
// bytes are what json.Marshal made before appendDigestJSON wrote them by
// hand (FuzzDigestJSONIsMarshal).
func Digest(ev *switchyard.Event) []byte {
	buf := digestBuffers.Get().(*[]byte)
	b := appendDigestJSON((*buf)[:0], ev)
	sum := sha256.Sum256(b)
	*buf = b
	digestBuffers.Put(buf)
	return sum[:]
}

// digestBuffers hold the bytes an event digest is taken of.
var digestBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// appendDigestJSON appends what json.Marshal makes of ev without its
// pass-through headers (the trace context): the same bytes, written
// without reflection (it was a tenth of the router's CPU on batches with
// client ids; docs/decisions/ingest-cost.md). A time json.Marshal refuses
// (a year outside 0–9999) goes through json.Marshal itself.
func appendDigestJSON(b []byte, ev *switchyard.Event) []byte {
	if y := ev.Time.Year(); y < 0 || y > 9999 {
		e := *ev
		e.Extensions = slices.DeleteFunc(slices.Clone(e.Extensions), func(h switchyard.Header) bool { return IsPassThrough(h.Name) })
		j, _ := json.Marshal(&e)
		return append(b, j...)
	}
	b = appendMember(b, `{"id":`, ev.ID)
	b = appendMember(b, `,"source":`, ev.Source)
	b = appendMember(b, `,"type":`, ev.Type)
	b = appendMember(b, `,"specversion":`, ev.SpecVersion)
	if ev.Subject != "" {
		b = appendMember(b, `,"subject":`, ev.Subject)
	}
	b = append(b, `,"time":"`...)
	b = ev.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if ev.DataContentType != "" {
		b = appendMember(b, `,"datacontenttype":`, ev.DataContentType)
	}
	if ev.DataSchema != "" {
		b = appendMember(b, `,"dataschema":`, ev.DataSchema)
	}
	first := true
	for _, h := range ev.Extensions {
		if IsPassThrough(h.Name) {
			continue
		}
		if first {
			b = append(b, `,"extensions":[`...)
			first = false
		} else {
			b = append(b, ',')
		}
		b = appendMember(b, `{"name":`, h.Name)
		b = appendMember(b, `,"value":`, h.Value)
		b = append(b, '}')
	}
	if !first {
		b = append(b, ']')
	}
	if len(ev.Data) > 0 {
		b = append(b, `,"data":"`...)
		b = base64.StdEncoding.AppendEncode(b, ev.Data)
		b = append(b, '"')
	}
	return append(b, '}')
}

func appendMember(b []byte, name, s string) []byte {
	return AppendJSONString(append(b, name...), s)
}

// AppendJSONString appends s quoted as json.Marshal quotes a string:
// HTML-safe ('<', '>' and '&' escaped). The router's own JSON that must
// keep the bytes encoding/json once made (the digest, the 202 body) uses
// it.
func AppendJSONString(b []byte, s string) []byte { return appendJSONString(b, s, true) }

// appendJSONString quotes s as encoding/json does: the short escapes it
// uses, other control characters as \u00XX, invalid UTF-8 as U+FFFD, the
// line and paragraph separators escaped, and '<', '>' and '&' escaped when
// html (json.Encoder's SetEscapeHTML). FuzzJSONStringIsEncodingJSON holds
// both forms to encoding/json.
func appendJSONString(b []byte, s string, html bool) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && (!html || c != '<' && c != '>' && c != '&') {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
