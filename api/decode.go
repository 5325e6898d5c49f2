package api

import (
	"crypto/sha256"
	"errors"
	"mime"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/cloudevents"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/storage"
)

// decodeRequest turns a POST /v1/events body into events, in whichever
// CloudEvents mode the request uses (cloudevents decodes each). batch
// reports the batch mode, whose response is a list.
func decodeRequest(h http.Header, body []byte, maxBatch int, now func() time.Time) (events []engine.IngestEvent, batch bool, err error) {
	ct := h.Get("Content-Type")
	media := cloudevents.Media(ct)
	var evs []switchyard.Event
	if err := jsonCharset(ct, media); err != nil {
		return nil, media == cloudevents.MediaBatch, err
	}
	switch {
	case media == cloudevents.MediaStructured:
		ev, err := cloudevents.DecodeJSON(body)
		if err != nil {
			return nil, false, err
		}
		evs = []switchyard.Event{ev}
	case media == cloudevents.MediaBatch:
		if evs, err = cloudevents.DecodeBatch(body, maxBatch); err != nil {
			return nil, true, err
		}
		batch = true
	case h.Get(specVersionHeader) != "":
		ev, err := cloudevents.HTTP.Decode(cloudevents.FromHTTP(h), body)
		if err != nil {
			return nil, false, err
		}
		evs = []switchyard.Event{ev}
	case hasCEHeader(h):
		return nil, false, switchyard.Errorf(switchyard.EINVALID, "binary mode: ce-specversion is required (the request has other ce-* headers but not it)")
	default:
		return nil, false, switchyard.Errorf(switchyard.EMEDIATYPE,
			"content type %q is not a CloudEvent: send %s (structured), %s (batch), or ce-* headers with the data as body (binary)",
			ct, cloudevents.MediaStructured, cloudevents.MediaBatch)
	}
	if events, err = admitEvents(evs, batch); err != nil {
		return nil, batch, err
	}
	trace := traceContextOf(h)
	for i := range events {
		passTraceContext(trace, &events[i].Event)
		finish(&events[i], now)
	}
	return events, batch, nil
}

// jsonCharset refuses a structured or batch body declared in a charset
// other than UTF-8 (or US-ASCII, a part of it): JSON exchanged between systems is UTF-8 (RFC 8259 §8.1),
// and decoding Latin-1 bytes as UTF-8 would store other text than sent.
func jsonCharset(ct, media string) error {
	if ct == media || media != cloudevents.MediaStructured && media != cloudevents.MediaBatch {
		return nil // no parameters, or not the JSON format
	}
	_, params, _ := mime.ParseMediaType(ct)
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") && !strings.EqualFold(cs, "us-ascii") {
		return switchyard.Errorf(switchyard.EMEDIATYPE, "charset %q: the CloudEvents JSON format is UTF-8 (RFC 8259); send the body in UTF-8", cs)
	}
	return nil
}

// specVersionHeader is the HTTP binding's ce-specversion as net/http keys
// it, made once: a binary-mode event has it.
var specVersionHeader = http.CanonicalHeaderKey(cloudevents.HTTP.Prefix() + cloudevents.AttrSpecVersion)

// hasCEHeader reports whether h has a ce-* header: a binary-mode event
// without its ce-specversion, not a body of some other media type.
func hasCEHeader(h http.Header) bool {
	prefix := cloudevents.HTTP.Prefix()
	for name := range h {
		if len(name) > len(prefix) && strings.EqualFold(name[:len(prefix)], prefix) {
			return true
		}
	}
	return false
}

// admitEvents checks each decoded event as ingest requires (validate) and,
// in a batch, that no client-chosen id appears twice.
func admitEvents(evs []switchyard.Event, batch bool) ([]engine.IngestEvent, error) {
	events := make([]engine.IngestEvent, len(evs))
	repeated, earlier := repeatedID(evs)
	for i, ev := range evs {
		events[i].Event = ev
		if err := validate(&events[i]); err != nil {
			var e *switchyard.Error
			if batch && errors.As(err, &e) {
				e.Message = cloudevents.BatchItem(i) + ": " + e.Message
			}
			return nil, err
		}
		if i != repeated { // the first problem in the batch's order, as before
			continue
		}
		if other := evs[earlier].Source; other != ev.Source {
			return nil, switchyard.Errorf(switchyard.EINVALID, "%s: id %q appears twice in the batch, from sources %q and %q: events are stored by id, so each needs one of its own", cloudevents.BatchItem(i), ev.ID, other, ev.Source)
		}
		return nil, switchyard.Errorf(switchyard.EINVALID, "%s: id %q from source %q appears twice in the batch", cloudevents.BatchItem(i), ev.ID, ev.Source)
	}
	return events, nil
}

// repeatedID returns the index of the first event whose client-chosen id
// an earlier event of the batch already has (whatever its source: events
// are stored by id), and that earlier event's; -1 when none. It sorts
// indexes rather than filling a map: a batch of 100 was a map of 100
// entries per request (docs/decisions/ingest-cost.md).
func repeatedID(evs []switchyard.Event) (repeat, earlier int) {
	if len(evs) < 2 {
		return -1, -1
	}
	order := make([]int32, 0, len(evs))
	for i := range evs {
		if evs[i].ID != "" {
			order = append(order, int32(i))
		}
	}
	slices.SortFunc(order, func(a, b int32) int {
		if c := strings.Compare(evs[a].ID, evs[b].ID); c != 0 {
			return c
		}
		return int(a - b)
	})
	repeat, earlier = -1, -1
	for j := 1; j < len(order); j++ {
		a, b := order[j-1], order[j]
		if evs[a].ID == evs[b].ID && (repeat < 0 || int(b) < repeat) {
			repeat, earlier = int(b), int(a) // the later of the two: the one that repeats
		}
	}
	return repeat, earlier
}

// traceContext is the W3C trace context a request carries in its headers.
type traceContext [2]switchyard.Header

// traceContextOf reads the request's W3C trace headers once per request
// (by their canonical names: Header.Get canonicalizes, and allocates, for
// each lower-case name it is given), keeping the valid ones.
func traceContextOf(h http.Header) traceContext {
	var t traceContext
	for i, name := range [2][2]string{{"traceparent", "Traceparent"}, {"tracestate", "Tracestate"}} {
		vs := h[name[1]]
		if len(vs) == 0 || vs[0] == "" {
			continue
		}
		v := vs[0] // traceparent: the first counts
		if name[0] == "tracestate" && len(vs) > 1 {
			v = strings.Join(vs, ",") // a list, however many lines carry it
		}
		if cloudevents.Check(name[0], v) == nil {
			t[i] = switchyard.Header{Name: name[0], Value: v}
		}
	}
	return t
}

// passTraceContext copies the request's trace context onto an event that
// does not carry its own.
func passTraceContext(t traceContext, ev *switchyard.Event) {
	for _, h := range t {
		if h.Value != "" && ev.Extension(h.Name) == "" {
			ev.Extensions = append(ev.Extensions, h)
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
	case len(ev.Type) > engine.MaxTypeLen:
		return switchyard.Errorf(switchyard.EINVALID, "type is longer than %d bytes", engine.MaxTypeLen)
	case len(ev.ID) > switchyard.MaxIDLen:
		return switchyard.Errorf(switchyard.EINVALID, "id is longer than %d bytes", switchyard.MaxIDLen)
	}
	var long string
	cloudevents.Each(ev, func(name, value string) {
		if len(value) > engine.MaxAttrLen && long == "" {
			long = name
		}
	})
	if long != "" {
		return switchyard.Errorf(switchyard.EINVALID, "attribute %q is longer than %d bytes", long, engine.MaxAttrLen)
	}
	for _, r := range ev.ID {
		if r < 0x20 || r == 0x7f || r == '/' {
			return switchyard.Errorf(switchyard.EINVALID, "id must not contain control characters or '/'")
		}
	}
	if ev.ID == "." || ev.ID == ".." {
		// A path segment of the API's URLs (/v1/events/{id}, /v1/dlq/{id}),
		// which clients and browsers resolve away before sending.
		return switchyard.Errorf(switchyard.EINVALID, "id must not be %q: it is a path segment of the API's URLs, which HTTP clients resolve away", ev.ID)
	}
	if err := storage.CheckTime(ev.Time); err != nil {
		return switchyard.Errorf(switchyard.EINVALID, "%v", err)
	}
	if in.ClientID = ev.ID != ""; in.ClientID {
		in.Digest = cloudevents.Digest(ev) // as the client sent it, before finish fills anything in
	}
	return nil
}

// finish fills what the router assigns: a UUIDv7 id and the time.
func finish(in *engine.IngestEvent, now func() time.Time) {
	if in.Event.ID == "" {
		in.Event.ID = uuid.Must(uuid.NewV7()).String()
	}
	if in.Event.Time.IsZero() {
		in.Event.Time, in.RouterTime = now().UTC(), true
	}
	cloudevents.SortExtensions(&in.Event)
}

// requestDigest fingerprints a whole request for the Idempotency-Key: its
// content type, its ce-* headers and its body — what makes the event, not
// how this attempt was sent. Left out: the trace headers (a retry carries
// a new traceparent: tracing middleware makes one per attempt) and, in
// structured and batch mode, the content type's spelling and parameters
// (the body is the event either way). A request without them digests as
// it always did, so a retry across an upgrade still matches.
func requestDigest(h http.Header, body []byte) []byte {
	d := sha256.New()
	ct := h.Get("Content-Type")
	if media := cloudevents.Media(ct); media == cloudevents.MediaStructured || media == cloudevents.MediaBatch {
		ct = media
	}
	d.Write([]byte(ct))
	var names []string
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), cloudevents.HTTP.Prefix()) {
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
	ev, err := cloudevents.DecodeJSON(body)
	if err != nil {
		return switchyard.Event{}, err
	}
	in := engine.IngestEvent{Event: ev}
	if err := validate(&in); err != nil {
		return switchyard.Event{}, err
	}
	finish(&in, time.Now)
	return in.Event, nil
}
