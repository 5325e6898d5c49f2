package api

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/cloudevents"
	"github.com/switchyard-router/switchyard/engine"
)

func fixedNow() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

// checkDecoded holds for anything the decoders accept: the invariants the
// rest of the router relies on.
func checkDecoded(t *testing.T, events []engine.IngestEvent, err error) {
	if err != nil {
		if _, ok := err.(*switchyard.Error); !ok {
			t.Fatalf("decode error is not a coded error: %T %v", err, err)
		}
		return
	}
	for _, ev := range events {
		e := ev.Event
		if e.ID == "" || e.Source == "" || e.Type == "" || e.SpecVersion != "1.0" || e.Time.IsZero() {
			t.Fatalf("accepted an incomplete event: %+v", e)
		}
		if ev.ClientID && len(ev.Digest) == 0 {
			t.Fatal("client id without a digest")
		}
	}
}

func FuzzDecodeStructured(f *testing.F) {
	f.Add([]byte(`{"specversion":"1.0","type":"t","source":"/s","id":"1","data":{"a":1}}`))
	f.Add([]byte(`{"specversion":"1.0","type":"t","source":"/s","data_base64":"AAEC","datacontenttype":"application/octet-stream"}`))
	f.Add([]byte(`{"specversion":"1.0","type":"t","source":"/s","time":"2026-01-02T03:04:05Z","partitionkey":"k","n":3,"b":true}`))
	f.Add([]byte(`{"specversion":"1.0","type":"t","source":"/s","data":"text","datacontenttype":"text/plain"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		h := http.Header{"Content-Type": {cloudevents.MediaStructured}}
		events, _, err := decodeRequest(h, body, 10, fixedNow)
		checkDecoded(t, events, err)
	})
}

func FuzzDecodeBatch(f *testing.F) {
	f.Add([]byte(`[{"specversion":"1.0","type":"t","source":"/s","id":"1"},{"specversion":"1.0","type":"t","source":"/s"}]`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`[{"specversion":"1.0","type":"t","source":"/s","id":"1"},{"specversion":"1.0","type":"t","source":"/s","id":"1"}]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		h := http.Header{"Content-Type": {cloudevents.MediaBatch}}
		events, batch, err := decodeRequest(h, body, 10, fixedNow)
		checkDecoded(t, events, err)
		if err == nil && (!batch || len(events) > 10) { // 0: an empty batch is allowed
			t.Fatalf("batch of %d accepted (batch=%v)", len(events), batch)
		}
	})
}

func FuzzDecodeBinary(f *testing.F) {
	f.Add("1.0", "t", "/s", "id-1", "text/plain", "k%20v", []byte("hello"))
	f.Add("1.0", "t", "/s", "", "application/json", "%zz", []byte(`{"a":1}`))
	f.Fuzz(func(t *testing.T, spec, typ, source, id, ct, ext string, body []byte) {
		h := http.Header{}
		for k, v := range map[string]string{"Ce-Specversion": spec, "Ce-Type": typ, "Ce-Source": source, "Ce-Id": id, "Content-Type": ct, "Ce-Partitionkey": ext} {
			if v != "" {
				h.Set(k, v)
			}
		}
		if h.Get("Ce-Specversion") == "" {
			h.Set("Ce-Specversion", "1.0")
		}
		events, _, err := decodeRequest(h, body, 10, fixedNow)
		checkDecoded(t, events, err)
	})
}

// repeatedID names the first event whose (source, id) an earlier event of
// the batch has, as a map of the ids seen so far would, and ignores
// router-assigned (empty) ids.
func TestRepeatedID(t *testing.T) {
	ev := func(src, id string) switchyard.Event { return switchyard.Event{Source: src, ID: id} }
	byMap := func(evs []switchyard.Event) int {
		seen := map[[2]string]bool{}
		for i, e := range evs {
			if e.ID == "" {
				continue
			}
			k := [2]string{e.Source, e.ID}
			if seen[k] {
				return i
			}
			seen[k] = true
		}
		return -1
	}
	cases := [][]switchyard.Event{
		nil,
		{ev("/s", "1")},
		{ev("/s", "1"), ev("/s", "2")},
		{ev("/s", "1"), ev("/t", "1")},
		{ev("/s", ""), ev("/s", "")},
		{ev("/s", "1"), ev("/s", "1")},
		{ev("/s", "b"), ev("/s", "a"), ev("/s", "c"), ev("/s", "a"), ev("/s", "b")},
		{ev("/s", "z"), ev("/s", "y"), ev("/s", "z"), ev("/s", "y"), ev("/s", "z")},
		{ev("/a", "x"), ev("/b", "x"), ev("/a", "y"), ev("/b", "x")},
	}
	for i, c := range cases {
		if got, want := repeatedID(c), byMap(c); got != want {
			t.Errorf("case %d: repeatedID = %d, want %d", i, got, want)
		}
	}
}

// The event digest is taken of exactly the bytes json.Marshal made of the
// event (without its trace context) before digest.go wrote them by hand:
// a digest stored by an older router must still match a resend.
func FuzzDigestJSONIsMarshal(f *testing.F) {
	f.Add("id-1", "/s", "t", "sub", "application/json", "", "partitionkey", "k", "traceparent", "00-x", []byte(`{"a":1}`), int64(1764500000123456789), 0)
	f.Add("<&>", "\u2028\u2029", "\x00\x1f\"\\", "\b\f\n\r\t", "\xff\xfe", "é", "tracestate", "x", "z", "", []byte{}, int64(-62135596800000000), 3600)
	f.Add("", "", "", "", "", "", "", "", "", "", []byte(nil), int64(0), -45*60)
	f.Fuzz(func(t *testing.T, id, src, typ, subject, dct, schema, n1, v1, n2, v2 string, data []byte, nanos int64, offset int) {
		ev := switchyard.Event{ID: id, Source: src, Type: typ, SpecVersion: "1.0", Subject: subject,
			Time: time.Unix(0, nanos).In(time.FixedZone("", offset%(24*3600)/60*60)), DataContentType: dct, DataSchema: schema, Data: data}
		for _, h := range []switchyard.Header{{Name: n1, Value: v1}, {Name: n2, Value: v2}} {
			if h.Name != "" {
				ev.Extensions = append(ev.Extensions, h)
			}
		}
		e := ev
		e.Extensions = slices.DeleteFunc(slices.Clone(e.Extensions), func(h switchyard.Header) bool { return cloudevents.IsPassThrough(h.Name) })
		want, err := json.Marshal(&e)
		if err != nil {
			return // json.Marshal refuses it; appendDigestJSON then uses json.Marshal too
		}
		if got := appendDigestJSON(nil, &ev); string(got) != string(want) {
			t.Fatalf("digest bytes differ:\n got %s\nwant %s", got, want)
		}
	})
}

// A time json.Marshal refuses (a year outside 0–9999, which the fuzz target's
// nanoseconds since 1970 cannot reach) takes json.Marshal's own path: the
// digest is of what it made before, nothing, so such events keep matching
// a digest stored by an older router. (No CloudEvents time in RFC 3339 has
// such a year; the API never decodes one.)
func TestDigestJSONOutOfRangeYear(t *testing.T) {
	for _, year := range []int{-1, 10000} {
		ev := switchyard.Event{ID: "a", Source: "/s", Type: "t", SpecVersion: "1.0",
			Time: time.Date(year, 1, 2, 3, 4, 5, 0, time.UTC)}
		want, err := json.Marshal(&ev)
		if err == nil {
			t.Fatalf("year %d: json.Marshal accepted it (%s); the fallback is not needed", year, want)
		}
		if got := appendDigestJSON([]byte("prefix"), &ev); string(got) != "prefix"+string(want) {
			t.Errorf("year %d: appendDigestJSON = %q, want %q", year, got, "prefix"+string(want))
		}
	}
}

// The 202 body is what json.Marshal made of the accepted list before it
// was written by hand: clients, and stored idempotency replays, see the
// same bytes.
func TestRenderAcceptedIsMarshal(t *testing.T) {
	type accepted struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	cases := [][]engine.Outcome{
		{{ID: "a"}},
		{{ID: "0193b2b4-6a1e-7c3a-9d2f-4c1e2a3b4c5d"}, {ID: "x<&>\\\"\u2028é", Duplicate: true}, {ID: "\x01\t"}},
		{{ID: "", Duplicate: true}},
	}
	for _, outcomes := range cases {
		list := make([]accepted, len(outcomes))
		for i, o := range outcomes {
			list[i] = accepted{ID: o.ID, Status: "accepted"}
			if o.Duplicate {
				list[i].Status = "duplicate"
			}
		}
		batch, _ := json.Marshal(list)
		one, _ := json.Marshal(list[0])
		if got := renderAccepted(true)(outcomes).Body; string(got) != string(batch)+"\n" {
			t.Errorf("batch body %s, json.Marshal %s", got, batch)
		}
		if got := renderAccepted(false)(outcomes[:1]).Body; string(got) != string(one)+"\n" {
			t.Errorf("single body %s, json.Marshal %s", got, one)
		}
	}
}

// A batch is refused for its first problem in order: a repeated id before
// a later invalid event is what the client hears about, and the other way.
func TestBatchFirstProblemInOrder(t *testing.T) {
	ok := switchyard.Event{SpecVersion: "1.0", Type: "t", Source: "/s", ID: "a"}
	bad := switchyard.Event{SpecVersion: "0.3", Type: "t", Source: "/s", ID: "b"}
	if _, err := admitEvents([]switchyard.Event{ok, ok, bad}, true); err == nil || !strings.Contains(err.Error(), "event 1: id \"a\" from source \"/s\" appears twice") {
		t.Errorf("repeat first: %v", err)
	}
	if _, err := admitEvents([]switchyard.Event{ok, bad, ok}, true); err == nil || !strings.Contains(err.Error(), "event 1: specversion") {
		t.Errorf("invalid first: %v", err)
	}
}
