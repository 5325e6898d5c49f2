package api

import (
	"encoding/json"
	"net/http"
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

// Whatever a structured-mode body holds, decoding either refuses it with a
// coded error or gives a complete event (id, source, type, specversion 1.0,
// time), with a digest for a client's id.
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

// Whatever a batch body holds, decoding either refuses it with a coded
// error or gives complete events, at most max_batch of them, as a batch.
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

// Whatever a binary-mode request's headers and body hold, decoding either
// refuses it with a coded error or gives a complete event, with a digest
// for a client's id.
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

// repeatedID names the first event whose id an earlier event of the batch
// has (whatever their sources: events are stored by id), and the first
// event with that id, as a map of the ids seen so far would, and ignores
// router-assigned (empty) ids.
func TestRepeatedID(t *testing.T) {
	ev := func(src, id string) switchyard.Event { return switchyard.Event{Source: src, ID: id} }
	byMap := func(evs []switchyard.Event) (int, int) {
		seen := map[string]int{}
		for i, e := range evs {
			if e.ID == "" {
				continue
			}
			if j, ok := seen[e.ID]; ok {
				return i, j
			}
			seen[e.ID] = i
		}
		return -1, -1
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
		{ev("/a", "x"), ev("/a", "y"), ev("/b", "y"), ev("/c", "x")},
	}
	for i, c := range cases {
		got, gotEarlier := repeatedID(c)
		want, wantEarlier := byMap(c)
		if got != want || gotEarlier != wantEarlier {
			t.Errorf("case %d: repeatedID = %d (of %d), want %d (of %d)", i, got, gotEarlier, want, wantEarlier)
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
	if _, err := admitEvents([]switchyard.Event{ok, ok, bad}, true); err == nil || !strings.Contains(err.Error(), "batch[1]: id \"a\" from source \"/s\" appears twice") {
		t.Errorf("repeat first: %v", err)
	}
	if _, err := admitEvents([]switchyard.Event{ok, bad, ok}, true); err == nil || !strings.Contains(err.Error(), "batch[1]: specversion") {
		t.Errorf("invalid first: %v", err)
	}
}
