package api_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/internal/testkit"
)

// tenantBatch is a batch of n order.created events with ids from first on.
func tenantBatch(prefix string, first, n int) string {
	evs := make([]string, n)
	for i := range evs {
		evs[i] = fmt.Sprintf(`{"specversion":"1.0","type":"order.created","source":"/rate","id":"%s-%d"}`, prefix, first+i)
	}
	return "[" + strings.Join(evs, ",") + "]"
}

var batchHeader = map[string]string{"Content-Type": "application/cloudevents-batch+json"}

// A tenant block bounds how fast a tenant's tokens store events: past its
// bucket a request is refused whole (429 rate_limited, Retry-After, the
// block named) and nothing of it is stored: with an empty bucket before
// its body is read (the wait for one event), else with the wait for its
// events; a batch larger than the bucket is 413; each tenant under "*" has a bucket of its own; the
// operator's clients (the socket, whatever X-Tenant says, and admin
// tokens) are not held to it; stats and metrics count the refusals; and a
// reload changes a bucket's rate at once.
func TestTenantRate(t *testing.T) {
	r := newTCPRouter(t, `tenant "acme" {
  rate  = 1
  burst = 5
}
tenant "*" {
  rate  = 1
  burst = 5
}`)
	if rep := r.tcp("POST", "/v1/events", tokAcme, batchHeader, tenantBatch("a", 0, 5)); rep.status != 202 {
		t.Fatalf("acme's first five: %d %s", rep.status, rep.body)
	}
	rep := r.tcp("POST", "/v1/events", tokAcme, batchHeader, tenantBatch("a", 5, 5))
	if code := problemCode(t, rep); rep.status != 429 || code != "rate_limited" ||
		!strings.Contains(string(rep.body), `tenant \"acme\" may store events and claims at 1 a second (the rate of its tenant block): the bucket holds a first event in `) ||
		rep.header.Get("Retry-After") != "1" {
		t.Fatalf("acme's next five, at once (the bucket empty): %d %s %q", rep.status, rep.body, rep.header.Get("Retry-After"))
	}
	time.Sleep(1100 * time.Millisecond) // one event in the bucket
	rep = r.tcp("POST", "/v1/events", tokAcme, batchHeader, tenantBatch("a", 5, 5))
	if code := problemCode(t, rep); rep.status != 429 || code != "rate_limited" ||
		!strings.Contains(string(rep.body), `the bucket holds this request's 5 events in `) {
		t.Fatalf("acme's next five, a second later: %d %s", rep.status, rep.body)
	}
	if after, err := strconv.Atoi(rep.header.Get("Retry-After")); err != nil || after < 1 || after > 4 {
		t.Errorf("Retry-After %q: want the wait for four more events at one a second", rep.header.Get("Retry-After"))
	}
	if got := r.tcp("GET", "/v1/events/a-5", tokAcme, nil, ""); got.status != 404 {
		t.Errorf("an event of the refused batch: %d %s", got.status, got.body)
	}
	rep = r.tcp("POST", "/v1/events", tokAcme, batchHeader, tenantBatch("big", 0, 6))
	if code := problemCode(t, rep); rep.status != 413 || code != "payload_too_large" || !strings.Contains(string(rep.body), "at most 5 events and claims at once") {
		t.Errorf("a batch over acme's burst: %d %s", rep.status, rep.body)
	}
	// beta, under "*": a bucket of its own, full while acme's is empty.
	if rep := r.tcp("POST", "/v1/events", tokBeta, batchHeader, tenantBatch("b", 0, 5)); rep.status != 202 {
		t.Fatalf("beta's first five: %d %s", rep.status, rep.body)
	}
	if rep := r.tcp("POST", "/v1/events", tokBeta, batchHeader, tenantBatch("b", 5, 1)); rep.status != 429 || !strings.Contains(string(rep.body), `the rate of the tenant \"*\" block`) {
		t.Errorf("beta's sixth: %d %s", rep.status, rep.body)
	}
	// The operator's clients store as acme with acme's bucket empty.
	socketAsAcme := map[string]string{"Content-Type": batchHeader["Content-Type"], "X-Tenant": "acme"}
	if rep := r.do("POST", "/v1/events", socketAsAcme, tenantBatch("sock", 0, 10)); rep.status != 202 {
		t.Errorf("the socket as acme: %d %s", rep.status, rep.body)
	}
	if rep := r.tcp("POST", "/v1/events", tokAdmin, batchHeader, tenantBatch("admin", 0, 10)); rep.status != 202 {
		t.Errorf("an admin token: %d %s", rep.status, rep.body)
	}
	var stats struct {
		TenantRates map[string]struct {
			Rate, Burst, Available, Refused int
			RefusedRequests                 int `json:"refused_requests"`
		} `json:"tenant_rates"`
	}
	if err := json.Unmarshal(r.tcp("GET", "/v1/stats", tokAdmin, nil, "").body, &stats); err != nil {
		t.Fatal(err)
	}
	// acme: the five and the six refused once read (events), three
	// requests; beta: one request refused before its body was read.
	if a, b := stats.TenantRates["acme"], stats.TenantRates["beta"]; a.Rate != 1 || a.Burst != 5 || a.Refused != 11 || a.RefusedRequests != 3 || a.Available > 3 ||
		b.Refused != 0 || b.RefusedRequests != 1 || len(stats.TenantRates) != 2 {
		t.Errorf("stats' tenant_rates: %+v", stats.TenantRates)
	}
	if got := testkit.MetricSum(t, r.reg, "switchyard_tenant_rate_limited_events_total", map[string]string{"tenant": "acme"}); got != 11 {
		t.Errorf("switchyard_tenant_rate_limited_events_total{tenant=acme} = %v, want 11", got)
	}
	if got := testkit.MetricSum(t, r.reg, "switchyard_tenant_rate_limited_requests_total", map[string]string{"tenant": "acme"}); got != 3 {
		t.Errorf("switchyard_tenant_rate_limited_requests_total{tenant=acme} = %v, want 3", got)
	}
	// A reload to a larger bucket keeps what the bucket holds (it does not
	// hand acme a full one): ten at once are refused.
	cfg := *r.cfg
	cfg.TenantLimits = map[string]config.TenantLimit{"acme": {Rate: 1, Burst: 10, Block: "acme", At: "test.hcl:1:1"}}
	if err := r.eng.Reload(&cfg, nil); err != nil {
		t.Fatal(err)
	}
	if rep := r.tcp("POST", "/v1/events", tokAcme, batchHeader, tenantBatch("a", 5, 10)); rep.status != 429 {
		t.Errorf("acme's ten right after a reload to a bucket of ten: %d %s", rep.status, rep.body)
	}
	// A reload to a thousand a second: the bucket fills again within
	// milliseconds, not at the old rate.
	cfg.TenantLimits = map[string]config.TenantLimit{"acme": {Rate: 1000, Burst: 5, Block: "acme", At: "test.hcl:1:1"}}
	if err := r.eng.Reload(&cfg, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if rep := r.tcp("POST", "/v1/events", tokAcme, batchHeader, tenantBatch("a", 5, 5)); rep.status != 202 {
		t.Errorf("acme's five after the reload: %d %s", rep.status, rep.body)
	}
	// beta has no block now: no bound.
	if rep := r.tcp("POST", "/v1/events", tokBeta, batchHeader, tenantBatch("b", 5, 10)); rep.status != 202 {
		t.Errorf("beta after the reload took \"*\" away: %d %s", rep.status, rep.body)
	}
}

// A request its tenant's bucket let through and that then fails (here for
// a type no block takes) gives its events back: only requests answered
// count against the rate.
func TestTenantRateGivesBackWhatARefusedRequestTook(t *testing.T) {
	r := newTCPRouter(t, `tenant "acme" {
  rate  = 1
  burst = 5
}`)
	bad := strings.ReplaceAll(tenantBatch("x", 0, 5), "order.created", "no.such.type")
	for i := range 3 {
		if rep := r.tcp("POST", "/v1/events", tokAcme, batchHeader, bad); rep.status != 422 {
			t.Fatalf("a batch of an unknown type, %d: %d %s", i, rep.status, rep.body)
		}
	}
	if rep := r.tcp("POST", "/v1/events", tokAcme, batchHeader, tenantBatch("a", 0, 5)); rep.status != 202 {
		t.Errorf("five after three refused batches of five: %d %s", rep.status, rep.body)
	}
}

// Every event of a request answered 202 counts, a resend's too: a resend
// under the same Idempotency-Key is refused, not replayed, while the
// bucket is empty, and replayed once it holds its events.
func TestTenantRateCountsResends(t *testing.T) {
	r := newTCPRouter(t, `tenant "acme" {
  rate  = 10
  burst = 5
}`)
	hdr := map[string]string{"Content-Type": batchHeader["Content-Type"], "Idempotency-Key": "k-1"}
	if rep := r.tcp("POST", "/v1/events", tokAcme, hdr, tenantBatch("k", 0, 5)); rep.status != 202 {
		t.Fatalf("the first send: %d %s", rep.status, rep.body)
	}
	if rep := r.tcp("POST", "/v1/events", tokAcme, hdr, tenantBatch("k", 0, 5)); rep.status != 429 {
		t.Errorf("a resend with the bucket empty: %d %s, want 429", rep.status, rep.body)
	}
	time.Sleep(600 * time.Millisecond) // 6 events' worth at 10 a second (at 1,000 a second a request slowed by -race found the bucket full again)
	rep := r.tcp("POST", "/v1/events", tokAcme, hdr, tenantBatch("k", 0, 5))
	if rep.status != 202 || rep.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the resend once the bucket holds it: %d (replayed %q) %s", rep.status, rep.header.Get("Idempotent-Replayed"), rep.body)
	}
}

// A tenant's new claims count against its tenant block as its events do:
// each is a record the data file keeps for a day (a consumer that is no
// inbox), and a tenant held to 500 events a second made a thousand claims
// a second, unheld, and filled the storage budget for every tenant (a
// trial). Past the bucket a claim is 429 rate_limited and makes nothing; a
// claim of an id already stored (completed) is answered and not charged,
// the bucket empty or not; the operator's clients are not held.
func TestTenantRateBoundsClaims(t *testing.T) {
	r := newTCPRouter(t, `tenant "acme" {
  rate  = 1
  burst = 5
}`)
	jsonHeader := map[string]string{"Content-Type": "application/json"}
	claim := func(id string) reply {
		return r.tcp("POST", "/v1/inbox/anything/claims", tokAcme, jsonHeader, fmt.Sprintf(`{"id":%q,"mode":"at_most_once"}`, id))
	}
	created, start := 0, time.Now()
	for i := range 4 {
		if rep := claim(fmt.Sprintf("c-%d", i)); rep.status == 201 {
			created++
		}
	}
	for i := 4; i < 20; i++ {
		rep := claim(fmt.Sprintf("c-%d", i))
		switch {
		case rep.status == 201:
			created++
		case rep.status != 429 || problemCode(t, rep) != "rate_limited" || !strings.Contains(string(rep.body), "this request's 1 claim in") || rep.header.Get("Retry-After") == "":
			t.Fatalf("claim %d past acme's bucket: %d %s", i, rep.status, rep.body)
		}
	}
	// The burst, and one a second for the time the claims took (a
	// slow run: -race).
	if most := 5 + int(time.Since(start).Seconds()); created < 5 || created > most {
		t.Errorf("acme (rate 1, burst 5) made %d new claims at once, want 5 (to %d)", created, most)
	}
	// c-0 again, the bucket empty: completed, it makes no record, and is
	// answered with its result (it was refused 429: a review).
	for range 3 {
		if rep := claim("c-0"); rep.status != 200 {
			t.Fatalf("c-0 again, the bucket empty: %d %s", rep.status, rep.body)
		}
	}
	socketAsAcme := map[string]string{"Content-Type": "application/json", "X-Tenant": "acme"}
	for i := range 10 {
		if rep := r.do("POST", "/v1/inbox/anything/claims", socketAsAcme, fmt.Sprintf(`{"id":"sock-%d"}`, i)); rep.status != 201 {
			t.Fatalf("the socket as acme, claim %d: %d %s", i, rep.status, rep.body)
		}
	}
	// What is stored: acme's, and the socket's ten.
	if stored := strings.Count(string(r.tcp("GET", "/v1/claims?consumer=anything", tokAdmin, nil, "").body), `"tenant": "acme"`); stored != created+10 {
		t.Errorf("%d claims stored, want %d", stored, created+10)
	}
}

// A request of a tenant whose bucket is empty is refused before its body
// is read: the 429 comes while the client has sent a part of a large
// body, and an invalid one is refused for the rate, not decoded (a trial:
// 5.6 ms of CPU per refused 1 MiB batch, read and decoded only to be
// refused). The operator's clients are never held.
func TestTenantRateRefusesBeforeTheBody(t *testing.T) {
	r := newTCPRouterWith(t, func(l *config.Listen) { l.MaxBody = 1 << 20 }, `tenant "acme" {
  rate  = 1
  burst = 5
}`)
	if rep := r.tcp("POST", "/v1/events", tokAcme, batchHeader, tenantBatch("a", 0, 5)); rep.status != 202 {
		t.Fatalf("acme's first five: %d %s", rep.status, rep.body)
	}
	if rep := r.tcp("POST", "/v1/events", tokAcme, batchHeader, "not json"); rep.status != 429 {
		t.Errorf("an invalid body with the bucket empty: %d %s", rep.status, rep.body)
	}
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/cloudevents-batch+json\r\nContent-Length: 1000000\r\n\r\n[", tokAcme)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer while the body is unsent: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 {
		t.Errorf("a body of 1 MB, one byte sent: %d", resp.StatusCode)
	}
	socketAsAcme := map[string]string{"Content-Type": batchHeader["Content-Type"], "X-Tenant": "acme"}
	if rep := r.do("POST", "/v1/events", socketAsAcme, tenantBatch("sock", 0, 5)); rep.status != 202 {
		t.Errorf("the socket as acme: %d %s", rep.status, rep.body)
	}
}
