package api_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/storage"
)

// deadLetter ingests an event over the socket and moves it to the DLQ
// directly in the data file (this router's engine is not running).
func (r *router) deadLetter(body string) string {
	r.t.Helper()
	rep := r.post(structured(), body)
	if rep.status != 202 {
		r.t.Fatalf("post: %d %s", rep.status, rep.body)
	}
	id := decode[struct{ ID string }](r.t, rep.body).ID
	err := r.db.Update(context.Background(), func(tx *storage.Tx) error {
		rec, err := tx.Record(id)
		if err != nil {
			return err
		}
		now := time.Now()
		rec.Attempts++
		rec.History = append(rec.History, storage.Attempt{At: now, Error: "nats.local:x: no responders"})
		return tx.MoveToDLQ(rec, now, "gave up after 1 attempt: no responders")
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return id
}

type dlqList struct {
	Items []struct {
		ID, State, Reason string
		Attempts          int
	}
	NextCursor string `json:"next_cursor"`
}

// The DLQ lists newest first, page by page, refuses a bad or repeated
// query parameter, filters by type and time (far dates not wrapped), shows
// an event with its attempts, and retries, resolves, deletes and counts one
// or many; acting again on an event no longer there is a 409 or a 404.
func TestDLQRoutes(t *testing.T) {
	r := newRouter(t)
	var ids []string
	for i := range 5 {
		ids = append(ids, r.deadLetter(fmt.Sprintf(`{"specversion":"1.0","type":"order.created","source":"/s","data":{"n":%d}}`, i)))
	}
	// Paging: newest first, a cursor until the end.
	var seen []string
	path := "/v1/dlq?limit=2"
	for range 5 {
		rep := r.do("GET", path, nil, "")
		if rep.status != 200 {
			t.Fatalf("list: %d %s", rep.status, rep.body)
		}
		page := decode[dlqList](t, rep.body)
		for _, it := range page.Items {
			seen = append(seen, it.ID)
			if it.State != "dlq" || it.Attempts != 1 || it.Reason == "" {
				t.Fatalf("item %+v", it)
			}
		}
		if page.NextCursor == "" {
			break
		}
		path = "/v1/dlq?limit=2&cursor=" + url.QueryEscape(page.NextCursor)
	}
	if fmt.Sprint(seen) != fmt.Sprint([]string{ids[4], ids[3], ids[2], ids[1], ids[0]}) {
		t.Fatalf("paged %v, want newest first of %v", seen, ids)
	}
	for q, code := range map[string]string{
		"limit=0": "invalid_request", "limit=x": "invalid_request", "cursor=zzz": "invalid_request",
		"since=yesterday": "invalid_request", "status=pending": "invalid_request",
		"limit=5&limit=6": "invalid_request", // which would count is a guess
	} {
		if rep := r.do("GET", "/v1/dlq?"+q, nil, ""); rep.status != 400 || decode[struct{ Code string }](t, rep.body).Code != code {
			t.Errorf("%s: %d %s", q, rep.status, rep.body)
		}
	}
	if rep := r.do("GET", "/v1/dlq?type=order.paid", nil, ""); len(decode[dlqList](t, rep.body).Items) != 0 {
		t.Errorf("type filter: %s", rep.body)
	}
	if rep := r.do("GET", "/v1/dlq?since=1h", nil, ""); len(decode[dlqList](t, rep.body).Items) != 5 {
		t.Errorf("since 1h: %s", rep.body)
	}
	// Times whose nanoseconds an int64 cannot hold bound the range as
	// they read, not wrapped (the year 2600 read as 2015 selected all).
	for since, want := range map[string]int{"2600-01-01T00:00:00Z": 0, "2262-01-01T00:00:00Z": 0, "1600-01-01T00:00:00Z": 5, "1960-01-01T00:00:00Z": 5} {
		if rep := r.do("GET", "/v1/dlq?since="+since, nil, ""); rep.status != 200 || len(decode[dlqList](t, rep.body).Items) != want {
			t.Errorf("since %s: want %d, got %d %s", since, want, rep.status, rep.body)
		}
	}
	if rep := r.do("POST", "/v1/dlq/delete", nil, `{"since":"2600-01-01T00:00:00Z"}`); rep.status != 200 || decode[struct{ Done int }](t, rep.body).Done != 0 {
		t.Fatalf("bulk delete since 2600 deleted: %d %s", rep.status, rep.body)
	}

	// One: the event, every attempt, the reason.
	rep := r.do("GET", "/v1/dlq/"+ids[0], nil, "")
	detail := decode[struct {
		ID, State, Reason string
		History           []struct{ At, Error string }
		Event             map[string]any
	}](t, rep.body)
	if rep.status != 200 || detail.State != "dlq" || len(detail.History) != 1 || detail.History[0].Error == "" ||
		fmt.Sprint(detail.Event["data"]) != "map[n:0]" || detail.Event["partitionkey"] != nil {
		t.Fatalf("show: %d %s", rep.status, rep.body)
	}

	// Retry → pending; again → 409; resolve → resolved; again → 409.
	if rep := r.do("POST", "/v1/dlq/"+ids[0]+"/retry", nil, ""); rep.status != 200 || decode[struct{ State string }](t, rep.body).State != "pending" {
		t.Fatalf("retry: %d %s", rep.status, rep.body)
	}
	for _, c := range []struct{ method, path string }{
		{"POST", "/v1/dlq/" + ids[0] + "/retry"},
		{"POST", "/v1/dlq/" + ids[0] + "/resolve"},
		{"DELETE", "/v1/dlq/" + ids[0]},
	} {
		if rep := r.do(c.method, c.path, nil, ""); rep.status != 409 || decode[struct{ Code string }](t, rep.body).Code != "not_in_dlq" {
			t.Errorf("%s %s of a pending event: %d %s", c.method, c.path, rep.status, rep.body)
		}
	}
	if rep := r.do("GET", "/v1/dlq/"+ids[0], nil, ""); rep.status != 404 {
		t.Errorf("show of a pending event: %d", rep.status)
	}
	if rep := r.do("POST", "/v1/dlq/"+ids[1]+"/resolve", nil, ""); rep.status != 200 || decode[struct{ State string }](t, rep.body).State != "resolved" {
		t.Fatalf("resolve: %d %s", rep.status, rep.body)
	}
	if rep := r.do("POST", "/v1/dlq/"+ids[1]+"/resolve", nil, ""); rep.status != 409 {
		t.Errorf("resolve twice: %d %s", rep.status, rep.body)
	}
	if rep := r.do("GET", "/v1/dlq?status=resolved", nil, ""); len(decode[dlqList](t, rep.body).Items) != 1 {
		t.Errorf("resolved list: %s", rep.body)
	}
	if rep := r.do("DELETE", "/v1/dlq/"+ids[2], nil, ""); rep.status != 204 {
		t.Fatalf("delete: %d %s", rep.status, rep.body)
	}
	if rep := r.do("DELETE", "/v1/dlq/"+ids[2], nil, ""); rep.status != 404 {
		t.Errorf("delete twice: %d %s", rep.status, rep.body)
	}
	rep = r.do("GET", "/v1/dlq/stats", nil, "")
	stats := decode[struct {
		Types []struct {
			Type          string
			DLQ, Resolved int
		}
		Total struct{ DLQ, Resolved int }
	}](t, rep.body)
	if len(stats.Types) != 1 || stats.Types[0].DLQ != 2 || stats.Types[0].Resolved != 1 || stats.Total.DLQ != 2 {
		t.Fatalf("stats: %s", rep.body)
	}

	// Many: a filter is required and strict.
	for body, code := range map[string]string{
		``: "invalid_request", `{}`: "invalid_request", `{"typ":"order.created"}`: "invalid_request",
		`{"since":"soon"}`: "invalid_request", `{"all":true}{"all":true}`: "invalid_request", `{"ids":[""]}`: "invalid_request",
	} {
		if rep := r.do("POST", "/v1/dlq/delete", nil, body); rep.status != 400 || decode[struct{ Code string }](t, rep.body).Code != code {
			t.Errorf("bulk %q: %d %s", body, rep.status, rep.body)
		}
	}
	rep = r.do("POST", "/v1/dlq/retry", nil, `{"ids":["`+ids[3]+`","`+ids[0]+`","nope"]}`)
	res := decode[struct {
		Matched, Done int
		NotFound      []string `json:"not_found"`
		Skipped       []struct{ ID, Code string }
	}](t, rep.body)
	if rep.status != 200 || res.Done != 1 || len(res.NotFound) != 1 || len(res.Skipped) != 1 || res.Skipped[0].Code != "not_in_dlq" {
		t.Fatalf("bulk retry: %d %s", rep.status, rep.body)
	}
	rep = r.do("POST", "/v1/dlq/resolve", nil, `{"type":"order.created"}`)
	if res := decode[struct{ Done int }](t, rep.body); rep.status != 200 || res.Done != 1 {
		t.Fatalf("bulk resolve: %d %s", rep.status, rep.body)
	}
	rep = r.do("POST", "/v1/dlq/delete", nil, `{"all":true,"status":"resolved"}`)
	if res := decode[struct{ Done int }](t, rep.body); rep.status != 200 || res.Done != 2 {
		t.Fatalf("bulk delete of resolved: %d %s", rep.status, rep.body)
	}
	if rep := r.do("GET", "/v1/dlq/stats", nil, ""); string(rep.body) != "{\n  \"total\": {\n    \"dlq\": 0,\n    \"resolved\": 0\n  },\n  \"types\": []\n}\n" {
		t.Fatalf("stats after: %s", rep.body)
	}
}

// A dead letter is named by any source an inbox stores: one over 4 KiB
// (an inbox keeps it whole) was refused as "longer than 4096 bytes", so
// the console's row of such an event could not be retried, resolved or
// deleted. The request's own limits bound it (here the query's; a bulk
// action's body is bounded by listen.max_body).
func TestDLQTakesASourceOfAnyLength(t *testing.T) {
	r := newRouter(t)
	source := "/" + strings.Repeat("s", 5000)
	// Taken, and looked for: not found (an inbox record is the engine's
	// test: TestInboxStoresAnEventWithAHugeSource).
	if rep := r.do("GET", "/v1/dlq/x?queue=inbox:pay&source="+url.QueryEscape(source), nil, ""); rep.status != 404 {
		t.Errorf("show by a long source: %d %s, want 404", rep.status, rep.body)
	}
}
