package cloudevents_test

import (
	"fmt"
	"math/rand/v2"
	"mime"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/cloudevents"
)

// runes the generator builds attribute values from: ASCII, the characters
// the header bindings must percent-encode, escape look-alikes and
// non-ASCII up to four UTF-8 bytes.
var runes = []rune("aZ09-_./:;=+,?#@!~*'()[]{}<>& %\"\\$éü€😀ñ漢\u00a0\u2028")

func randString(r *rand.Rand, max int) string {
	n := r.IntN(max + 1)
	var b strings.Builder
	for range n {
		switch r.IntN(8) {
		case 0:
			b.WriteString([]string{"%41", "%20", "%", "%zz", "%C0%A0", "\"q\""}[r.IntN(6)])
		default:
			b.WriteRune(runes[r.IntN(len(runes))])
		}
	}
	return b.String()
}

// genEvent makes an event with every attribute kind, each present or not:
// strings with spaces, percent signs, quotes and non-ASCII, a time with
// nanoseconds, extensions (trace context included), and data that is
// absent, JSON, text or arbitrary bytes under a content type that fits it
// or not.
func genEvent(r *rand.Rand) switchyard.Event {
	opt := func(s string) string {
		if r.IntN(3) == 0 {
			return ""
		}
		return s
	}
	ev := switchyard.Event{
		SpecVersion: cloudevents.SpecVersion,
		ID:          randString(r, 12) + "x",
		Source:      "/" + randString(r, 20),
		Type:        "t." + randString(r, 10),
		Subject:     opt(randString(r, 20)),
		DataSchema:  opt("https://example.com/" + randString(r, 8)),
	}
	if r.IntN(4) != 0 {
		ev.Time = time.Unix(r.Int64N(4e9), r.Int64N(1e9)).UTC()
	}
	names := map[string]bool{}
	for range r.IntN(5) {
		name := []string{"partitionkey", "traceparent", "tracestate", "dataref", "x1", "sequence", "comexampleextension"}[r.IntN(7)]
		if names[name] {
			continue
		}
		names[name] = true
		v := randString(r, 16) + "v"
		if cloudevents.IsPassThrough(name) {
			v = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		}
		ev.Extensions = append(ev.Extensions, switchyard.Header{Name: name, Value: v})
	}
	cloudevents.SortExtensions(&ev)
	genData(r, &ev)
	return ev
}

func genData(r *rand.Rand, ev *switchyard.Event) {
	ct := []string{"", "application/json", "application/cloudevents-ish+json", "text/plain; charset=utf-8", "application/octet-stream",
		"application/cloudevents+json"}[r.IntN(6)]
	ev.DataContentType = ct
	switch r.IntN(6) {
	case 0: // no data
	case 1:
		ev.Data = []byte(fmt.Sprintf(`{"n":%d,"s":%q,"a":[1, 2 ,{"x":null}]}`, r.IntN(100), randString(r, 10)))
	case 2:
		ev.Data = []byte(fmt.Sprintf("%q", randString(r, 10))) // a JSON string
	case 3:
		ev.Data = []byte(randString(r, 40) + "t") // text
	case 4:
		ev.Data = make([]byte, 1+r.IntN(64)) // bytes, often not UTF-8
		for i := range ev.Data {
			ev.Data[i] = byte(r.UintN(256))
		}
	case 5:
		ev.Data = []byte(" null ")
	}
}

// sameEvent fails t unless got is want: every attribute, extension and
// data byte, and the time as the same instant.
func sameEvent(t *testing.T, where string, got, want switchyard.Event) {
	t.Helper()
	if !got.Time.Equal(want.Time) {
		t.Fatalf("%s: time %v, want %v", where, got.Time, want.Time)
	}
	got.Time, want.Time = time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %#v\nwant %#v", where, got, want)
	}
}

// Every generated event comes back identical through every binding:
// encode → decode in the JSON format, in a batch, and in the binary mode of
// HTTP, NATS and Kafka, strictly and leniently.
func TestRoundTripEveryBinding(t *testing.T) {
	r := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	for i := range 5000 {
		ev := genEvent(r)
		where := func(b string) string { return fmt.Sprintf("event %d, %s", i, b) }

		got, err := cloudevents.DecodeJSON(cloudevents.EncodeJSON(&ev))
		if err != nil {
			t.Fatalf("%s: %v\n%s", where("JSON"), err, cloudevents.EncodeJSON(&ev))
		}
		sameEvent(t, where("JSON"), got, ev)

		batch, err := cloudevents.DecodeBatch([]byte("["+string(cloudevents.EncodeJSON(&ev))+","+string(cloudevents.EncodeJSON(&ev))+"]"), 2)
		if err != nil || len(batch) != 2 {
			t.Fatalf("%s: %v", where("batch"), err)
		}
		sameEvent(t, where("batch"), batch[1], ev)

		for _, b := range []cloudevents.Binding{cloudevents.HTTP, cloudevents.NATS, cloudevents.Kafka} {
			hs := b.Headers(&ev)
			got, err := b.Decode(hs, ev.Data)
			if err != nil {
				t.Fatalf("%s: %v\n%v", where(b.String()), err, hs)
			}
			sameEvent(t, where(b.String()), got, ev)
			lenient, warnings := b.DecodeLenient(hs, ev.Data)
			if len(warnings) > 0 {
				t.Fatalf("%s: warnings %v", where(b.String()), warnings)
			}
			sameEvent(t, where(b.String()+" lenient"), lenient, ev)
			n, k := b.Size(&ev)
			if k != len(hs) || n != headerBytes(hs) {
				t.Fatalf("%s: Size = %d bytes in %d headers, Headers has %d in %d", where(b.String()), n, k, headerBytes(hs), len(hs))
			}
			// SizeBound never says less than Size: a sink that trusts it
			// to fit never passes an event that does not.
			if bn, bk := b.SizeBound(&ev); bn < n || bk < k {
				t.Fatalf("%s: SizeBound = %d bytes in %d headers, under Size's %d in %d", where(b.String()), bn, bk, n, k)
			}
		}
	}
}

func headerBytes(hs []switchyard.Header) int {
	n := 0
	for _, h := range hs {
		n += len(h.Name) + len(h.Value)
	}
	return n
}

// The header bindings write values by their own rule: HTTP and NATS
// percent-encode space, '"', '%' and non-ASCII (upper-case hex), Kafka
// writes UTF-8 as it is; NATS carries datacontenttype as
// ce-datacontenttype, HTTP and Kafka as content-type.
func TestBindingHeaderRules(t *testing.T) {
	ev := switchyard.Event{SpecVersion: "1.0", ID: "1", Source: "/bar/ünï%20code", Type: "t", Subject: `a%41b c/é"`, DataContentType: "text/plain"}
	header := func(b cloudevents.Binding, name string) string {
		for _, h := range b.Headers(&ev) {
			if h.Name == name {
				return h.Value
			}
		}
		return "<absent>"
	}
	for _, c := range []struct {
		b            cloudevents.Binding
		name, want   string
		ceType, ctyp string
	}{
		{cloudevents.HTTP, "ce-subject", "a%2541b%20c/%C3%A9%22", "<absent>", "text/plain"},
		{cloudevents.NATS, "ce-subject", "a%2541b%20c/%C3%A9%22", "text/plain", "text/plain"},
		{cloudevents.Kafka, "ce_subject", `a%41b c/é"`, "<absent>", "text/plain"},
	} {
		if got := header(c.b, c.name); got != c.want {
			t.Errorf("%s %s = %q, want %q", c.b, c.name, got, c.want)
		}
		if got := header(c.b, c.b.Prefix()+"datacontenttype"); got != c.ceType {
			t.Errorf("%s %sdatacontenttype = %q, want %q", c.b, c.b.Prefix(), got, c.ceType)
		}
		if got := header(c.b, "content-type"); got != c.ctyp {
			t.Errorf("%s content-type = %q, want %q", c.b, got, c.ctyp)
		}
	}
}

// Decoding follows §3.1.3.2 of the HTTP and NATS bindings: lower-case hex
// and needless escapes are accepted, a double-quoted value is unquoted, an
// escape that is not UTF-8 is refused (strict) or kept raw with a warning
// (lenient); Kafka values are never percent-decoded.
func TestBindingDecodeRules(t *testing.T) {
	hs := func(subject string) []switchyard.Header {
		return []switchyard.Header{{Name: "Ce-Specversion", Value: "1.0"}, {Name: "ce-subject", Value: subject}, {Name: "CE_SUBJECT", Value: subject}}
	}
	for _, c := range []struct {
		in, http string
		bad      bool
	}{
		{"a%c3%a9%41", "aéA", false},
		{`"a b\"c"`, `a b"c`, false},
		{"%C0%A0", "%C0%A0", true},
		{"100%", "100%", true},
	} {
		ev, warnings := cloudevents.HTTP.DecodeLenient(hs(c.in), nil)
		if ev.Subject != c.http || (len(warnings) > 0) != c.bad {
			t.Errorf("HTTP lenient %q = %q %v, want %q (warning %v)", c.in, ev.Subject, warnings, c.http, c.bad)
		}
		if _, err := cloudevents.NATS.Decode(hs(c.in), nil); (err != nil) != c.bad {
			t.Errorf("NATS strict %q: err %v, want error %v", c.in, err, c.bad)
		}
		if ev, _ := cloudevents.Kafka.DecodeLenient(hs(c.in), nil); ev.Subject != c.in {
			t.Errorf("Kafka %q = %q, want it unchanged", c.in, ev.Subject)
		}
	}
}

// An optional attribute or extension with an empty value is absent, in
// the JSON format and in a binding; an empty id is refused instead (read
// as absent, the router would assign one and store each retry again), and
// a header that is a binding's prefix alone names nothing: refused, or
// dropped with a warning (docs/contract.md §3).
func TestEmptyValues(t *testing.T) {
	ev, err := cloudevents.DecodeJSON([]byte(`{"specversion":"1.0","id":"x","type":"t","source":"/s","subject":"","partitionkey":""}`))
	if err != nil || ev.Subject != "" || len(ev.Extensions) != 0 {
		t.Errorf("JSON: %+v, %v; want no subject and no extension", ev, err)
	}
	for _, b := range []cloudevents.Binding{cloudevents.HTTP, cloudevents.NATS, cloudevents.Kafka} {
		p := b.Prefix()
		base := []switchyard.Header{{Name: p + "specversion", Value: "1.0"}, {Name: p + "id", Value: "x"}, {Name: p + "type", Value: "t"}, {Name: p + "source", Value: "/s"}}
		ev, err := b.Decode(append(base, switchyard.Header{Name: p + "partitionkey"}), nil)
		if err != nil || len(ev.Extensions) != 0 {
			t.Errorf("%s: an empty %spartitionkey: %+v, %v; want none", p, p, ev, err)
		}
		if _, err := b.Decode(append(base[:1:1], switchyard.Header{Name: p + "id"}, base[2], base[3]), nil); err == nil || !strings.Contains(err.Error(), "id must not be empty") {
			t.Errorf("%s: an empty %sid: %v, want refused", p, p, err)
		}
		if _, err := b.Decode(append(base, switchyard.Header{Name: p, Value: "v"}), nil); err == nil || !strings.Contains(err.Error(), "names no attribute") {
			t.Errorf("%s: a header %q: %v, want refused", p, p, err)
		}
		if _, warnings := b.DecodeLenient(append(base, switchyard.Header{Name: p, Value: "v"}, switchyard.Header{Name: p, Value: "w"}), nil); len(warnings) != 1 {
			t.Errorf("%s: a header %q, twice, read leniently: warnings %q, want one", p, p, warnings)
		}
	}
}

// A time with RFC 3339's lower-case "t" and "z" (§5.6) is the same time as
// with upper-case ones.
func TestLowerCaseTime(t *testing.T) {
	ev, err := cloudevents.DecodeJSON([]byte(`{"specversion":"1.0","id":"x","type":"t","source":"/s","time":"2018-04-05t17:31:00.5z"}`))
	if want := time.Date(2018, 4, 5, 17, 31, 0, 5e8, time.UTC); err != nil || !ev.Time.Equal(want) {
		t.Fatalf("time %v, %v; want %v", ev.Time, err, want)
	}
}

// An event carries at most MaxExtensions extension attributes, in the JSON
// format and in binary mode: one more is refused by name (strict), dropped
// with a warning (lenient); a body of 100,000 members is refused too,
// without first reading every member against every other.
func TestExtensionsAreBounded(t *testing.T) {
	object := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"specversion":"1.0","id":"x","type":"t","source":"/s"`)
		for i := range n {
			fmt.Fprintf(&b, `,"x%x":1`, i)
		}
		return b.String() + "}"
	}
	headers := func(n int) []switchyard.Header {
		hs := []switchyard.Header{{Name: "ce-specversion", Value: "1.0"}, {Name: "ce-id", Value: "x"}, {Name: "ce-type", Value: "t"}, {Name: "ce-source", Value: "/s"}}
		for i := range n {
			hs = append(hs, switchyard.Header{Name: fmt.Sprintf("ce-x%x", i), Value: "1"})
		}
		return hs
	}
	max := cloudevents.MaxExtensions
	if ev, err := cloudevents.DecodeJSON([]byte(object(max))); err != nil || len(ev.Extensions) != max {
		t.Fatalf("%d extensions in JSON: %d kept, %v", max, len(ev.Extensions), err)
	}
	for _, n := range []int{max + 1, 100_000} {
		if _, err := cloudevents.DecodeJSON([]byte(object(n))); err == nil || !strings.Contains(err.Error(), "at most 256 extension attributes") {
			t.Errorf("%d extensions in JSON: %v", n, err)
		}
	}
	if ev, err := cloudevents.HTTP.Decode(headers(max), nil); err != nil || len(ev.Extensions) != max {
		t.Fatalf("%d extension headers: %d kept, %v", max, len(ev.Extensions), err)
	}
	if _, err := cloudevents.HTTP.Decode(headers(max+1), nil); err == nil || !strings.Contains(err.Error(), "at most 256 extension attributes") {
		t.Errorf("%d extension headers: %v", max+1, err)
	}
	if ev, warnings := cloudevents.HTTP.DecodeLenient(headers(max+1), nil); len(ev.Extensions) != max || len(warnings) != 1 {
		t.Errorf("%d extension headers, lenient: %d kept, warnings %v", max+1, len(ev.Extensions), warnings)
	}
	structured := []switchyard.Header{{Name: "content-type", Value: cloudevents.MediaStructured}}
	if ev, warnings := cloudevents.Kafka.DecodeLenient(structured, []byte(object(max+2))); ev.ID != "x" || len(ev.Extensions) != max || len(warnings) != 2 {
		t.Errorf("a structured message of %d extensions, lenient: id %q, %d kept, warnings %v", max+2, ev.ID, len(ev.Extensions), warnings)
	}
}

// A consumer reads a structured message that breaks the JSON format's types
// as it was sent, with a warning, rather than as a binary message of
// nothing (the producer was not this router: ingest refuses such events).
func TestLenientStructuredTypes(t *testing.T) {
	structured := []switchyard.Header{{Name: "content-type", Value: cloudevents.MediaStructured}}
	body := `{"specversion":"1.0","id":"a1","type":"t","source":"/s","amount":1.5,"data":{"n":1}}`
	ev, warnings := cloudevents.Kafka.DecodeLenient(structured, []byte(body))
	if ev.ID != "a1" || ev.Type != "t" || ev.Extension("amount") != "1.5" || string(ev.Data) != `{"n":1}` ||
		len(warnings) != 1 || !strings.Contains(warnings[0], `"amount": 1.5 is not a CloudEvents Integer`) || !strings.Contains(warnings[0], "kept as its JSON text") {
		t.Errorf("lenient: %+v, warnings %q", ev, warnings)
	}
	if _, err := cloudevents.DecodeJSON([]byte(body)); err == nil {
		t.Error("strict decoding took 1.5 as an extension")
	}
	// Members that cannot be attributes are left out, each with a
	// warning; the event keeps the rest.
	for member, want := range map[string]string{
		`"time":1700000000`:                  `time "1700000000" is not an RFC 3339 timestamp`,
		`"time":"yesterday"`:                 `time "yesterday" is not an RFC 3339 timestamp`,
		`"time":"2016-12-31T23:59:60Z"`:      `time "2016-12-31T23:59:60Z" is a leap second (second 60)`,
		`"time":"2016-12-31T23:59:61Z"`:      `time "2016-12-31T23:59:61Z" is not an RFC 3339 timestamp`,
		`"time":"2016-12-31T18:59:60-05:00"`: `time "2016-12-31T18:59:60-05:00" is a leap second (second 60)`,
		`"time":"2016-12-31T10:20:60Z"`:      `time "2016-12-31T10:20:60Z" is not an RFC 3339 timestamp`,
		`"traceId":"x"`:                      `extension attribute "traceId"`,
		`"ext":{"a":1}`:                      `attribute "ext" must be a string, number or boolean`,
	} {
		ev, warnings := cloudevents.Kafka.DecodeLenient(structured, []byte(`{"specversion":"1.0","id":"a2","type":"t","source":"/s",`+member+`}`))
		if last := len(warnings) - 1; ev.ID != "a2" || ev.Type != "t" || last < 0 || !strings.Contains(warnings[last], want) || !strings.Contains(warnings[last], "left out") {
			t.Errorf("lenient %s: %+v, warnings %q", member, ev, warnings)
		}
	}
}

// A NATS or Kafka message whose content type is the JSON event format is
// read in structured mode: its body is the event.
func TestStructuredMessage(t *testing.T) {
	body := `{"specversion":"1.0","id":"s1","source":"/s","type":"t","subject":"a b","data":{"k":1}}`
	for _, b := range []cloudevents.Binding{cloudevents.NATS, cloudevents.Kafka} {
		ev, warnings := b.DecodeLenient([]switchyard.Header{{Name: "Content-Type", Value: "application/cloudevents+json; charset=utf-8"}}, []byte(body))
		if ev.ID != "s1" || ev.Subject != "a b" || string(ev.Data) != `{"k":1}` || len(warnings) > 0 {
			t.Errorf("%s: %+v %v", b, ev, warnings)
		}
	}
}

// PercentEncode escapes exactly what §3.1.3.2 names, in upper-case hex.
func TestPercentEncode(t *testing.T) {
	for in, want := range map[string]string{
		"plain-id_1.2~": "plain-id_1.2~",
		"a b":           "a%20b",
		`"q"`:           "%22q%22",
		"50%":           "50%25",
		"é":             "%C3%A9",
		"tab\tnl\n\x7f": "tab%09nl%0A%7F",
	} {
		if got := cloudevents.PercentEncode(in); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}

// Found in review, each a case the generator missed: JSON data that is
// not UTF-8 or holds a lone surrogate escape is written as data_base64 and
// comes back; a content type with a control character is refused by the
// strict decoder; an extension name no binding could carry on is dropped
// by the lenient one, with a warning.
func TestReviewCases(t *testing.T) {
	for _, data := range []string{"\"\xff\"", `"\ud800"`, `{"a":1,"a":2}`} {
		ev := switchyard.Event{SpecVersion: "1.0", ID: "1", Source: "/s", Type: "t", DataContentType: "application/json", Data: []byte(data)}
		got, err := cloudevents.DecodeJSON(cloudevents.EncodeJSON(&ev))
		if err != nil {
			t.Fatalf("data %q: %v\n%s", data, err, cloudevents.EncodeJSON(&ev))
		}
		sameEvent(t, "data "+data, got, ev)
	}
	hs := []switchyard.Header{{Name: "ce-specversion", Value: "1.0"}, {Name: "Content-Type", Value: "text/plain;\tcharset=utf-8"}}
	if _, err := cloudevents.HTTP.Decode(hs, nil); err == nil {
		t.Error("a content type with a tab was accepted")
	}
	ev, warnings := cloudevents.Kafka.DecodeLenient([]switchyard.Header{{Name: "ce_specversion", Value: "1.0"}, {Name: "ce_a b:c", Value: "x"}}, nil)
	if len(ev.Extensions) != 0 || len(warnings) != 1 {
		t.Errorf("extension %v kept, warnings %v", ev.Extensions, warnings)
	}
}

// Media gives what mime.ParseMediaType gives, with or without its fast path.
func TestMedia(t *testing.T) {
	for _, ct := range []string{cloudevents.MediaStructured, cloudevents.MediaBatch, "application/json", "Application/JSON",
		"application/cloudevents+json; charset=utf-8", "text/plain;charset=x", "", "not a type", "application/json;"} {
		want, _, _ := mime.ParseMediaType(ct)
		if got := cloudevents.Media(ct); got != want {
			t.Errorf("Media(%q) = %q, want %q", ct, got, want)
		}
	}
}

// data_base64 without its padding is refused with the reason, not with
// Go's "illegal base64 data at input byte 0" (an adversarial trial).
func TestUnpaddedBase64SaysWhy(t *testing.T) {
	_, err := cloudevents.DecodeJSON([]byte(`{"specversion":"1.0","id":"1","source":"/s","type":"t","data_base64":"AA"}`))
	if err == nil || !strings.Contains(err.Error(), "2 characters, not a multiple of 4") {
		t.Errorf("unpadded data_base64: %v", err)
	}
}

// A body that is not JSON is refused with the fault and the byte it is at,
// in the API's words: not the parser's package name ("jsontext: ...", a
// new-user trial), nor its "offset".
func TestMalformedJSONSaysWhere(t *testing.T) {
	for body, want := range map[string]string{
		`{"specversion":"1.0","id":"1",`:    "the body is not a JSON object: unexpected EOF after byte 30",
		`{"specversion":"1.0" "id":"1"}`:    `the body is not a JSON object: invalid character '"' after object value (expecting ',' or '}') after byte 21`,
		`[{"specversion":"1.0","id":"1"},]`: "batch[1]: the body is not a JSON object: invalid character ',' at start of value after byte 31",
	} {
		_, err := cloudevents.DecodeJSON([]byte(body))
		if strings.HasPrefix(body, "[") {
			_, err = cloudevents.DecodeBatch([]byte(body), 10)
		}
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "jsontext") {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}

// A header value the lenient decoder lets pass but no binding can carry on
// (a content type, an extension of control characters) is left out, with a
// warning: before, it was kept, and every delivery of the event to a
// service failed in net/http until it was dead-lettered (a broker trial).
func TestLenientLeavesOutWhatCannotGoOn(t *testing.T) {
	hs := []switchyard.Header{
		{Name: "ce-specversion", Value: "1.0"}, {Name: "ce-id", Value: "a"}, {Name: "ce-source", Value: "/s"}, {Name: "ce-type", Value: "t"},
		{Name: "Content-Type", Value: "\x01\x02"}, {Name: "ce-region", Value: "eu\x01"},
	}
	ev, warnings := cloudevents.NATS.DecodeLenient(hs, []byte("x"))
	if ev.DataContentType != "" || ev.Extension("region") != "" || ev.ID != "a" {
		t.Fatalf("kept: datacontenttype %q, region %q (id %q)", ev.DataContentType, ev.Extension("region"), ev.ID)
	}
	if len(warnings) != 2 || !strings.Contains(strings.Join(warnings, "|"), "left out") {
		t.Fatalf("warnings: %q", warnings)
	}
	if _, err := cloudevents.NATS.Decode(hs, []byte("x")); err == nil {
		t.Fatal("the strict decoder took them")
	}
}

// The lenient decoder keeps the producer's context attributes even when a
// value breaks a rule (an id with a TAB): the inbox deduplicates by the id,
// and left out, one would be derived from every header, so a redelivery
// with a retry count changed counted as new (a review of the change above).
func TestLenientKeepsContextAttributes(t *testing.T) {
	hs := []switchyard.Header{
		{Name: "ce_specversion", Value: "1.0"}, {Name: "ce_id", Value: "order-42\t"}, {Name: "ce_source", Value: "/shop"},
		{Name: "ce_type", Value: "order.created"},
	}
	ev, warnings := cloudevents.Kafka.DecodeLenient(hs, []byte("{}"))
	if ev.ID != "order-42\t" || ev.Type != "order.created" || len(warnings) != 1 {
		t.Fatalf("id %q, type %q, warnings %q", ev.ID, ev.Type, warnings)
	}
}
