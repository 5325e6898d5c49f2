package cloudevents_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/cloudevents"
)

// Whatever JSON a client sends, DecodeJSON returns an event or an error
// without panicking, and an event it accepts encodes to JSON that decodes
// to the same event.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`{"specversion":"1.0","id":"1","source":"/s","type":"t","data":{"a":1}}`,
		`{"specversion":"1.0","id":"1","source":"/s","type":"t","datacontenttype":"text/plain","data":"héllo"}`,
		`{"specversion":"1.0","id":"1","source":"/s","type":"t","data_base64":"AAEC","ext":7,"b":true}`,
		`{"specversion":"1.0","time":"2020-01-01T00:00:00+02:00","data":null,"subject":null}`,
		`{"data":"x","data_base64":"eA=="}`, `[]`, `{"a":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := cloudevents.DecodeJSON(body)
		if err != nil {
			return
		}
		again, err := cloudevents.DecodeJSON(cloudevents.EncodeJSON(&ev))
		if err != nil {
			t.Fatalf("re-decoding %s: %v", cloudevents.EncodeJSON(&ev), err)
		}
		sameEvent(t, "JSON", again, ev)
	})
}

// Whatever a batch body holds, DecodeBatch returns events or an error
// without panicking, never more than the limit.
func FuzzDecodeBatch(f *testing.F) {
	f.Add([]byte(`[{"specversion":"1.0","id":"1","source":"/s","type":"t"}]`))
	f.Add([]byte(`[{},{},{}]`))
	f.Add([]byte(`[1]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		evs, err := cloudevents.DecodeBatch(body, 2)
		if err == nil && (len(evs) == 0 || len(evs) > 2) {
			t.Fatalf("%d events from a batch limited to 2", len(evs))
		}
	})
}

// Whatever headers a message carries, each binding's decoders return
// without panicking; what the strict decoder accepts, the binding encodes
// to headers that decode to the same event; the lenient decoder reads
// what the strict one accepts alike, without warnings.
func FuzzBindingDecode(f *testing.F) {
	f.Add("ce-specversion: 1.0\nce-id: 1\nce-source: /a%20b\nce-type: t\ncontent-type: text/plain", []byte("x"))
	f.Add("ce_specversion: 1.0\nce_id: 1\nce_subject: a%41 é\nce_time: 2020-01-01T00:00:00Z\nce_x: \"q\"", []byte{0xff})
	f.Add("content-type: application/cloudevents+json\nce-datacontenttype: a/b", []byte(`{"specversion":"1.0"}`))
	f.Add("ce-traceparent: 00-x\ntraceparent: 00-y\nCE-ID: \"%C0%A0\"", []byte(nil))
	f.Fuzz(func(t *testing.T, headers string, data []byte) {
		var hs []switchyard.Header
		for _, line := range strings.Split(headers, "\n") {
			name, value, _ := strings.Cut(line, ": ")
			hs = append(hs, switchyard.Header{Name: name, Value: value})
		}
		for _, b := range []cloudevents.Binding{cloudevents.HTTP, cloudevents.NATS, cloudevents.Kafka} {
			b.DecodeLenient(hs, data)
			ev, err := b.Decode(hs, data)
			if err != nil {
				continue
			}
			again, err := b.Decode(b.Headers(&ev), ev.Data)
			if err != nil {
				t.Fatalf("%s: re-decoding %v: %v", b, b.Headers(&ev), err)
			}
			sameEvent(t, b.String(), again, ev)
			lenient, warnings := b.DecodeLenient(b.Headers(&ev), ev.Data)
			if len(warnings) > 0 {
				t.Fatalf("%s: warnings %v for what the strict decoder accepted", b, warnings)
			}
			sameEvent(t, b.String()+" lenient", lenient, ev)
		}
	})
}

// An event reads the same in a batch as alone: what the batch decoder
// remembers from one event to the next (interner) never leaks a value or
// a member name into another event.
func FuzzDecodeBatchMatchesEachEvent(f *testing.F) {
	f.Add([]byte(`{"specversion":"1.0","id":"1","source":"/s","type":"t","ext":"a"}`),
		[]byte(`{"specversion":"1.0","id":"2","source":"/s","type":"u","ext":"b","other":"a"}`),
		[]byte(`{"specversion":"1.0","id":"3","source":"/t","type":"t","oth":"a","ext":null}`))
	f.Add([]byte(`{"specversion":"1.0","id":"1","source":"/s","type":"t","subject":"x","datacontenttype":"text/plain","data":"a"}`),
		[]byte(`{"specversion":"1.0","id":"1","source":"/s","type":"t","subject":"x\u0041","datacontenttype":"application/json"}`),
		[]byte(`{"specversion":"1.0","id":"1","source":"/s","type":"t","sub\u006aect":"y","n":1,"b":true}`))
	f.Add([]byte(`{"specversion":"1.0","id":"a","source":"","type":"t"}`),
		[]byte(`{"specversion":"1.0","id":"b","source":"/s","type":"","e1":"1","e2":"2","e3":"3","e4":"4","e5":"5","e6":"6","e7":"7","e8":"8","e9":"9","e10":"10","e11":"11","e12":"12","e13":"13","e14":"14","e15":"15","e16":"16","e17":"17"}`),
		[]byte(`{"specversion":"1.0","id":"c","source":"/s","type":"t","e17":"x","e1":"y","e16":"16"}`))
	f.Fuzz(func(t *testing.T, a, b, c []byte) {
		var want []switchyard.Event
		for _, body := range [][]byte{a, b, c} {
			ev, err := cloudevents.DecodeJSON(body)
			if err != nil {
				return
			}
			want = append(want, ev)
		}
		got, err := cloudevents.DecodeBatch([]byte("["+string(a)+","+string(b)+","+string(c)+"]"), 3)
		if err != nil {
			t.Fatalf("the events decode alone but not as a batch: %v", err)
		}
		for i := range want {
			sameEvent(t, "batch event "+strconv.Itoa(i), got[i], want[i])
		}
	})
}
