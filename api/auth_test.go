package api_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-router/switchyard/api"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/internal/testkit"
	"github.com/switchyard-router/switchyard/storage/storagetest"
)

const (
	tokAcme  = "acme-token-0123456789"
	tokBeta  = "beta-token-0123456789"
	tokAdmin = "admin-token-0123456789"
	// tokLocal is a tenant's token, not an admin's, whose tenant is called
	// "default", as the socket's is.
	tokLocal = "local-token-0123456789"
)

// tcpRouter is an API server with the TCP listener on, over a real data
// file, with four tokens: tenants acme, beta and default, and an admin;
// extra is more of the configuration.
type tcpRouter struct {
	*router
	eng    *engine.Engine
	cfg    *config.Config // what eng was made with
	addr   string
	reg    *prometheus.Registry
	http   *http.Client
	tokens string // the tokens_file's path
}

func newTCPRouter(t *testing.T, extra ...string) *tcpRouter {
	t.Helper()
	return newTCPRouterWith(t, nil, extra...)
}

// newTCPRouterWith is newTCPRouter with listen adjusting the listen block.
func newTCPRouterWith(t *testing.T, listen func(*config.Listen), extra ...string) *tcpRouter {
	t.Helper()
	return newTCPRouterOpts(t, listen, nil, extra...)
}

// newTCPRouterOpts is newTCPRouterWith with opts adjusting the server's
// options.
func newTCPRouterOpts(t *testing.T, listen func(*config.Listen), opts func(*api.Options), extra ...string) *tcpRouter {
	t.Helper()
	dir, err := os.MkdirTemp("", "sy")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	adminSum := sha256.Sum256([]byte(tokAdmin))
	tokens := fmt.Sprintf(`{"tokens": [
	  {"token": %q, "tenant": "acme"},
	  {"token": %q, "tenant": "beta"},
	  {"token": %q, "tenant": "default"},
	  {"sha256": %q, "admin": true}
	]}`, tokAcme, tokBeta, tokLocal, hex.EncodeToString(adminSum[:]))
	tokensPath := filepath.Join(dir, "tokens.json")
	if err := os.WriteFile(tokensPath, []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(`
listen {
  http        = "127.0.0.1:0"
  tokens_file = "`+tokensPath+`"
  max_body    = "4KiB"
  max_batch   = 10
}
event "order.created" {}
`+strings.Join(extra, "\n")), "test.hcl")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen.Socket = filepath.Join(dir, "r.sock")
	if listen != nil {
		listen(&cfg.Listen)
	}
	db := storagetest.Open(t)
	reg := prometheus.NewRegistry()
	eng, err := engine.New(db, cfg, nil, engine.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	o := api.Options{Registerer: reg, Gatherer: reg}
	if opts != nil {
		opts(&o)
	}
	srv := api.New(eng, cfg.Listen, o)
	if err := srv.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) })
	r := &router{t: t, db: db, srv: srv, sock: cfg.Listen.Socket, client: testkit.UnixClient(cfg.Listen.Socket, 0, 128)}
	return &tcpRouter{router: r, eng: eng, cfg: cfg, addr: srv.TCPAddr(), reg: reg, tokens: tokensPath, http: &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// tcp sends a request over TCP with token ("" = none); path is sent as is
// (no cleaning, no re-escaping).
func (r *tcpRouter) tcp(method, path, token string, header map[string]string, body string) reply {
	r.t.Helper()
	req, err := http.NewRequest(method, "http://"+r.addr+"/", strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	req.URL.Opaque = "//" + r.addr + path
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := r.http.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, b}
}

func problemCode(t *testing.T, rep reply) string {
	t.Helper()
	if ct := rep.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("%d with content type %q: %s", rep.status, ct, rep.body)
	}
	return decode[struct{ Code string }](t, rep.body).Code
}

// Over TCP, a request with no token, an unknown one, a Basic one, an empty
// one or a prefix of a real one is a 401 with a Bearer challenge
// (invalid_token for a wrong one) and stores nothing; /healthz needs no
// token, /readyz does.
func TestAuthTCPNeedsAToken(t *testing.T) {
	r := newTCPRouter(t)
	for _, c := range []struct {
		name, auth, wantChallenge string
	}{
		{"none", "", `Bearer realm="switchyard"`},
		{"wrong", "Bearer not-a-known-token-at-all", `Bearer realm="switchyard", error="invalid_token"`},
		{"basic", "Basic YWRtaW46YWRtaW4=", `Bearer realm="switchyard"`},
		{"empty bearer", "Bearer ", `Bearer realm="switchyard"`},
		{"prefix of a token", "Bearer " + tokAdmin[:10], `Bearer realm="switchyard", error="invalid_token"`},
	} {
		for _, path := range []string{"/v1/events/x", "/v1/dlq", "/metrics", "/readyz", "/nothing"} {
			h := map[string]string{}
			if c.auth != "" {
				h["Authorization"] = c.auth
			}
			rep := r.tcp("GET", path, "", h, "")
			if rep.status != 401 || problemCode(t, rep) != "unauthorized" || rep.header.Get("WWW-Authenticate") != c.wantChallenge {
				t.Errorf("%s token on %s: %d %q %s", c.name, path, rep.status, rep.header.Get("WWW-Authenticate"), rep.body)
			}
		}
	}
	// Nothing is stored by an unauthenticated ingest.
	rep := r.tcp("POST", "/v1/events", "", structured(), orderJSON)
	if rep.status != 401 || r.stored() != 0 {
		t.Fatalf("unauthenticated ingest: %d, stored %d", rep.status, r.stored())
	}
	// Liveness needs no token; readiness does.
	if rep := r.tcp("GET", "/healthz", "", nil, ""); rep.status != 200 {
		t.Fatalf("healthz: %d", rep.status)
	}
	if rep := r.tcp("GET", "/readyz", tokBeta, nil, ""); rep.status != 200 {
		t.Fatalf("readyz with a token: %d", rep.status)
	}
}

// On TCP the tenant is the token's: another tenant's token cannot read the
// event, find it by its key, or replay its idempotency record, whatever
// X-Tenant it sends.
func TestAuthTenantIsolationOverTCP(t *testing.T) {
	r := newTCPRouter(t)
	hdr := structured("Idempotency-Key", "k-1")
	rep := r.tcp("POST", "/v1/events", tokAcme, hdr, orderJSON)
	if rep.status != 202 {
		t.Fatalf("acme post: %d %s", rep.status, rep.body)
	}
	id := decode[struct{ ID string }](t, rep.body).ID
	first := string(rep.body)

	asAcme := map[string]string{"X-Tenant": "acme"}
	if rep := r.tcp("GET", "/v1/events/"+id, tokBeta, asAcme, ""); rep.status != 404 || problemCode(t, rep) != "not_found" {
		t.Fatalf("beta reads acme's event: %d %s", rep.status, rep.body)
	}
	if rep := r.tcp("GET", "/v1/events?idempotency_key=k-1", tokBeta, asAcme, ""); rep.status != 404 {
		t.Fatalf("beta finds acme's key: %d %s", rep.status, rep.body)
	}
	if rep := r.tcp("GET", "/v1/events/"+id, tokAcme, nil, ""); rep.status != 200 {
		t.Fatalf("acme reads its event: %d", rep.status)
	}
	// The same key and body from beta is beta's own request: a new event,
	// not acme's stored response.
	hdrAsAcme := structured("Idempotency-Key", "k-1", "X-Tenant", "acme")
	rep = r.tcp("POST", "/v1/events", tokBeta, hdrAsAcme, orderJSON)
	if rep.status != 202 || rep.header.Get("Idempotent-Replayed") != "" || string(rep.body) == first {
		t.Fatalf("beta got acme's replay: %d %q %s", rep.status, rep.header.Get("Idempotent-Replayed"), rep.body)
	}
	betaID := decode[struct{ ID string }](t, rep.body).ID
	// Another body under the same key is no 422 for beta against acme's
	// record either: scopes do not meet.
	rep = r.tcp("POST", "/v1/events", tokAcme, hdr, orderJSON)
	if rep.status != 202 || rep.header.Get("Idempotent-Replayed") != "true" || string(rep.body) != first {
		t.Fatalf("acme replay: %d %s", rep.status, rep.body)
	}
	// Over the socket X-Tenant still decides.
	if rep := r.do("GET", "/v1/events/"+betaID, map[string]string{"X-Tenant": "beta"}, ""); rep.status != 200 {
		t.Fatalf("socket with X-Tenant beta: %d", rep.status)
	}
	if rep := r.do("GET", "/v1/events/"+betaID, map[string]string{"X-Tenant": "acme"}, ""); rep.status != 404 {
		t.Fatalf("socket with X-Tenant acme reads beta's: %d", rep.status)
	}
}

// An admin reads any tenant's event by id or key with ?tenant= (the
// console follows a dead letter of any tenant to its event); a tenant's
// token naming another tenant is refused with 403, and naming its own
// changes nothing.
func TestReadAnotherTenantsEvent(t *testing.T) {
	r := newTCPRouter(t)
	rep := r.tcp("POST", "/v1/events", tokAcme, structured("Idempotency-Key", "k-7"), orderJSON)
	if rep.status != 202 {
		t.Fatalf("acme post: %d %s", rep.status, rep.body)
	}
	id := decode[struct{ ID string }](t, rep.body).ID
	for _, path := range []string{"/v1/events/" + id, "/v1/events?idempotency_key=k-7"} {
		if rep := r.tcp("GET", path, tokAdmin, nil, ""); rep.status != 404 {
			t.Errorf("admin, %s without ?tenant= (the default tenant's): %d %s", path, rep.status, rep.body)
		}
		if rep := r.tcp("GET", path+sep(path)+"tenant=acme", tokAdmin, nil, ""); rep.status != 200 || !strings.Contains(string(rep.body), id) {
			t.Errorf("admin, %s of acme: %d %s", path, rep.status, rep.body)
		}
		if rep := r.do("GET", path+sep(path)+"tenant=acme", nil, ""); rep.status != 200 {
			t.Errorf("the socket, %s of acme: %d %s", path, rep.status, rep.body)
		}
		if rep := r.tcp("GET", path+sep(path)+"tenant=acme", tokBeta, nil, ""); rep.status != 403 || problemCode(t, rep) != "forbidden" {
			t.Errorf("beta, %s of acme: %d %s", path, rep.status, rep.body)
		}
		if rep := r.tcp("GET", path+sep(path)+"tenant=acme", tokAcme, nil, ""); rep.status != 200 {
			t.Errorf("acme naming itself, %s: %d %s", path, rep.status, rep.body)
		}
	}
	if rep := r.tcp("GET", "/v1/events/"+id+"?tenant=a%0Ab", tokAdmin, nil, ""); rep.status != 400 {
		t.Errorf("a tenant with a newline: %d %s", rep.status, rep.body)
	}
}

// sep is what joins a query parameter to path.
func sep(path string) string {
	if strings.Contains(path, "?") {
		return "&"
	}
	return "?"
}

// One tenant cannot use up the catch-all for the others: a tenant's token
// (even one whose tenant is called default) adds at most
// max_types_per_tenant types (the error names the tenant), a
// type another tenant added costs nothing, and the operator's clients (an
// admin token, the socket whatever X-Tenant says) are bounded by max_types
// alone.
func TestCatchAllTypesPerTenant(t *testing.T) {
	r := newTCPRouter(t, `event "*" {
  max_types            = 16
  max_types_per_tenant = 4
}`)
	post := func(token, tenant, typ string) reply {
		t.Helper()
		ev := `{"specversion":"1.0","type":"` + typ + `","source":"/flood"}`
		hdr := map[string]string{"Content-Type": "application/cloudevents+json"}
		if token == "" {
			hdr["X-Tenant"] = tenant
			return r.do("POST", "/v1/events", hdr, ev)
		}
		return r.tcp("POST", "/v1/events", token, hdr, ev)
	}
	refused := func(rep reply, want string) bool {
		return rep.status == 422 && strings.Contains(string(rep.body), `"code":"too_many_event_types"`) && strings.Contains(string(rep.body), want)
	}
	for i := range 5 {
		rep := post(tokAcme, "", fmt.Sprintf("acme.%d", i))
		if ok := rep.status == 202; i < 4 && !ok || i == 4 && !refused(rep, `tenant \"acme\" has already added 4 types`) {
			t.Fatalf("acme's type %d: %d %s", i, rep.status, rep.body)
		}
	}
	for _, c := range []struct{ token, typ string }{{tokAcme, "acme.1"}, {tokBeta, "acme.1"}} {
		if rep := post(c.token, "", c.typ); rep.status != 202 {
			t.Errorf("a type acme added, again: %d %s", rep.status, rep.body)
		}
	}
	for i := range 4 {
		if rep := post(tokBeta, "", fmt.Sprintf("beta.%d", i)); rep.status != 202 {
			t.Fatalf("beta's type %d, after acme's: %d %s", i, rep.status, rep.body)
		}
	}
	// A tenant's token whose tenant is called default is still a tenant's:
	// the bound follows who calls, not the name.
	for i := range 5 {
		rep := post(tokLocal, "", fmt.Sprintf("local-token.%d", i))
		if ok := rep.status == 202; i < 4 && !ok || i == 4 && !refused(rep, `tenant \"default\" has already added 4 types`) {
			t.Fatalf("the default tenant's token, type %d: %d %s", i, rep.status, rep.body)
		}
	}
	// The socket acts as any tenant it names: the operator's, not bounded
	// by acme's share.
	if rep := post("", "acme", "local.0"); rep.status != 202 {
		t.Errorf("the socket as acme: %d %s", rep.status, rep.body)
	}
	for i := range 4 {
		rep := post(tokAdmin, "", fmt.Sprintf("admin.%d", i))
		if ok := rep.status == 202; i < 3 && !ok || i == 3 && !refused(rep, "already holds 16 types (its max_types)") {
			t.Fatalf("the admin's type %d: %d %s", i, rep.status, rep.body)
		}
	}
	// /v1/stats says who holds what.
	stats := decode[struct {
		CatchAll struct {
			Types             int            `json:"types"`
			MaxTypes          int            `json:"max_types"`
			MaxTypesPerTenant int            `json:"max_types_per_tenant"`
			AddedByTenant     map[string]int `json:"added_by_tenant"`
		} `json:"catch_all"`
	}](t, r.tcp("GET", "/v1/stats", tokAdmin, nil, "").body).CatchAll
	if stats.Types != 16 || stats.MaxTypes != 16 || stats.MaxTypesPerTenant != 4 ||
		!maps.Equal(stats.AddedByTenant, map[string]int{"acme": 4, "beta": 4, "default": 4}) {
		t.Errorf("/v1/stats catch_all: %+v", stats)
	}
}

// The DLQ, stats, plugins, inboxes, claims and metrics routes are a 403 to
// a tenant's token and open to an admin's and on the socket; a path that
// cleans to one of them is never served to a non-admin.
func TestAuthAdminRoutesNeedAnAdminToken(t *testing.T) {
	r := newTCPRouter(t)
	routes := []struct{ method, path, body string }{
		{"GET", "/v1/dlq", ""},
		{"GET", "/v1/dlq/stats", ""},
		{"GET", "/v1/dlq/x", ""},
		{"POST", "/v1/dlq/x/retry", ""},
		{"POST", "/v1/dlq/x/resolve", ""},
		{"DELETE", "/v1/dlq/x", ""},
		{"POST", "/v1/dlq/retry", `{"all":true}`},
		{"POST", "/v1/dlq/resolve", `{"all":true}`},
		{"POST", "/v1/dlq/delete", `{"all":true}`},
		{"GET", "/v1/stats", ""},
		{"GET", "/v1/stats/history", ""},
		{"GET", "/v1/plugins", ""},
		{"GET", "/v1/inboxes", ""},
		{"GET", "/v1/claims", ""},
		{"GET", "/v1/inbox/x/dedup", ""},
		{"GET", "/metrics", ""},
	}
	for _, rt := range routes {
		rep := r.tcp(rt.method, rt.path, tokAcme, nil, rt.body)
		if rep.status != 403 || problemCode(t, rep) != "forbidden" {
			t.Errorf("non-admin %s %s: %d %s", rt.method, rt.path, rep.status, rep.body)
		}
		rep = r.tcp(rt.method, rt.path, tokAdmin, nil, rt.body)
		if rep.status == 401 || rep.status == 403 {
			t.Errorf("admin %s %s: %d %s", rt.method, rt.path, rep.status, rep.body)
		}
	}
	// The socket needs no token for them.
	for _, path := range []string{"/v1/dlq", "/v1/dlq/stats", "/v1/stats", "/v1/stats/history", "/v1/plugins", "/v1/inboxes", "/v1/claims", "/metrics"} {
		if rep := r.do("GET", path, nil, ""); rep.status != 200 {
			t.Errorf("socket %s: %d %s", path, rep.status, rep.body)
		}
	}
	// A path that cleans to an admin route is redirected, never served to a
	// non-admin.
	for _, path := range []string{"/v1/events/../dlq", "/v1/events/..%2Fdlq", "/v1//dlq", "/v1/%64lq"} {
		rep := r.tcp("GET", path, tokAcme, nil, "")
		switch rep.status {
		case 307: // the mux cleans the path: the client asks again, and gets 403
			if loc := rep.header.Get("Location"); r.tcp("GET", loc, tokAcme, nil, "").status != 403 {
				t.Errorf("non-admin %s → %s: not forbidden", path, loc)
			}
		case 403, 404:
		default:
			t.Errorf("non-admin %s: %d %s", path, rep.status, rep.body)
		}
	}
}

// An oversized ingest or bulk body is a 413 payload_too_large; an id with
// an encoded slash or dot-dot, a NUL or too many bytes, or a queue with a
// slash, is a problem+json 404 or 400; a path of megabytes is cut off by
// the header limit.
func TestAuthBodiesAndIDs(t *testing.T) {
	r := newTCPRouter(t)
	big := `{"specversion":"1.0","type":"order.created","source":"/s","data":"` + strings.Repeat("x", 8<<10) + `"}`
	if rep := r.tcp("POST", "/v1/events", tokAcme, structured(), big); rep.status != 413 || problemCode(t, rep) != "payload_too_large" {
		t.Fatalf("oversized ingest: %d %s", rep.status, rep.body)
	}
	ids := `{"ids":["` + strings.Repeat("a", 8<<10) + `"]}`
	if rep := r.tcp("POST", "/v1/dlq/retry", tokAdmin, nil, ids); rep.status != 413 || problemCode(t, rep) != "payload_too_large" {
		t.Fatalf("oversized bulk: %d %s", rep.status, rep.body)
	}
	for path, want := range map[string]int{
		"/v1/dlq/..%2F..%2Fetc%2Fpasswd":           404,
		"/v1/dlq/a%2Fb":                            404,
		"/v1/dlq/%2e%2e":                           404,
		"/v1/dlq/%00":                              400,
		"/v1/dlq/" + strings.Repeat("a", 2000):     400,
		"/v1/dlq/x?queue=..%2Fevents":              400,
		"/v1/dlq/x/retry":                          404,
		"/v1/events/" + strings.Repeat("%2F", 300): 404,
	} {
		method := "GET"
		if strings.HasSuffix(path, "/retry") {
			method = "POST"
		}
		rep := r.tcp(method, path, tokAdmin, nil, "")
		if rep.status != want {
			t.Errorf("%s: %d %s, want %d", path, rep.status, rep.body, want)
			continue
		}
		problemCode(t, rep)
	}
	// A very long path is cut off by the server's header limit, not served.
	rep := r.tcp("GET", "/v1/dlq/"+strings.Repeat("a", 2<<20), tokAdmin, nil, "")
	if rep.status != 431 && rep.status != 400 {
		t.Fatalf("2 MiB id: %d", rep.status)
	}
}

// Every problem answer is counted by code.
func TestAuthProblemsMetrics(t *testing.T) {
	r := newTCPRouter(t)
	r.tcp("GET", "/v1/dlq", "", nil, "")
	r.tcp("GET", "/v1/dlq", "", nil, "")
	r.tcp("GET", "/v1/dlq", tokAcme, nil, "")
	hdr := structured("Idempotency-Key", "k")
	r.tcp("POST", "/v1/events", tokAcme, hdr, orderJSON)
	r.tcp("POST", "/v1/events", tokAcme, hdr, orderJSON)                                                    // replay
	r.tcp("POST", "/v1/events", tokAcme, hdr, strings.Replace(orderJSON, "12", "13", 1))                    // 422
	r.tcp("POST", "/v1/events", tokAcme, structured(), `{"specversion":"1.0","type":"nope","source":"/s"}`) // 422
	for code, want := range map[string]float64{"unauthorized": 2, "forbidden": 1, "idempotency_key_reuse": 1, "unknown_event_type": 1} {
		got := testkit.MetricSum(t, r.reg, "switchyard_http_problems_total", map[string]string{"code": code})
		if got != want {
			t.Errorf("problems{code=%s} = %v, want %v", code, got, want)
		}
	}
	if n := testkit.MetricSum(t, r.reg, "switchyard_idempotent_replays_total", nil); n != 1 {
		t.Fatalf("replays: %v", n)
	}
	body := r.tcp("GET", "/metrics", tokAdmin, nil, "").body
	for _, want := range []string{
		"switchyard_idempotent_replays_total 1",
		"switchyard_ingest_duration_seconds_count 4",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// Prometheus' own filter repeats its parameter: /metrics is not held
	// to one value per parameter as the API's routes are.
	rep := r.tcp("GET", "/metrics?name[]=switchyard_idempotent_replays_total&name[]=switchyard_ingest_duration_seconds", tokAdmin, nil, "")
	if rep.status != 200 || !strings.Contains(string(rep.body), "switchyard_idempotent_replays_total 1") || strings.Contains(string(rep.body), "switchyard_http_problems_total") {
		t.Errorf("metrics filtered by two names: %d %.300s", rep.status, rep.body)
	}
}

// A tokens_file is refused, naming why, when it is malformed or holds no
// token or a tenant with a control character, when others than its owner may read it, and when another user
// owns it.
func TestAuthTokensFile(t *testing.T) {
	sum := sha256.Sum256([]byte("x"))
	for name, c := range map[string]struct {
		src, err string
	}{
		"ok":    {`{"tokens":[{"token":"0123456789abcdef","tenant":"a"},{"sha256":"` + hex.EncodeToString(sum[:]) + `","admin":true}]}`, ""},
		"short": {`{"tokens":[{"token":"short","tenant":"a"}]}`, "shorter than 16"},
		// Characters, as the message says, not bytes (a review).
		"short in characters": {`{"tokens":[{"token":"öööööööö","tenant":"a"}]}`, "shorter than 16"},
		// A token that no Authorization header carries whole.
		"trailing space": {`{"tokens":[{"token":"0123456789abcdef ","tenant":"a"}]}`, "begins or ends with white space"},
		"a tab within":   {`{"tokens":[{"token":"01234567\t89abcdef","tenant":"a"}]}`, "control character"},
		// A space within and UTF-8 reach bearer() whole: they sign in.
		"space within and UTF-8": {`{"tokens":[{"token":"abcdefgh ijklmnöpq","tenant":"a"},{"token":"0123456789abcdef","tenant":"b"}]}`, ""},
		"duplicate":              {`{"tokens":[{"token":"0123456789abcdef","tenant":"a"},{"token":"0123456789abcdef","tenant":"b"}]}`, "tokens.json:1:54: token 2: the same token as at 1:12"},
		"typo":                   {"{\"tokens\":[\n {\"token\":\"0123456789abcdef\",\"tenant\":\"a\",\"admn\":true}]}", `tokens.json:2:2: token 1: unknown field "admn"`},
		"capital":                {`{"Tokens":[{"token":"0123456789abcdef","tenant":"a"},{"sha256":"` + hex.EncodeToString(sum[:]) + `","admin":true}]}`, ""},
		"a number":               {`{"tokens":[5]}`, `tokens.json:1:12: token 1: an object {"token": ..., "tenant": ...}, not a JSON number`},
		"cut short":              {`{"tokens":[{"token":"0123456789abcdef","tenant":"a"}`, "the file ends before its object does"},
		"no tenant":              {`{"tokens":[{"token":"0123456789abcdef"}]}`, "tenant is required"},
		"both":                   {`{"tokens":[{"token":"0123456789abcdef","sha256":"00","tenant":"a"}]}`, "not both"},
		"bad digest":             {`{"tokens":[{"sha256":"abc","tenant":"a"}]}`, "64 hex"},
		"empty":                  {`{"tokens":[]}`, "no tokens"},
		"bad tenant":             {`{"tokens":[{"token":"0123456789abcdef","tenant":"a\nb"}]}`, "tenant"},
		// A control character in a tenant could make its events' keys an
		// inbox's (the data file separates them by 0 and 1 bytes).
		"control in tenant": {`{"tokens":[{"token":"0123456789abcdef","tenant":"inbox:pay\u0001\u0001x"}]}`, "tenant"},
		"not json":          {`token=abc`, "tokens.json:1:3: invalid character 'o' in literal true"},
		// Each problem says where it is, as config's file:line:col do.
		"syntax, line 3":     {"{\"tokens\": [\n  {\"token\": \"0123456789abcdef\", \"tenant\": \"a\"}\n  {\"token\": \"x\"}]}", "tokens.json:3:3: expected comma after array element"},
		"second entry short": {"{\"tokens\": [\n  {\"token\": \"0123456789abcdef\", \"tenant\": \"a\"},\n  {\"token\": \"short\", \"tenant\": \"b\"}\n]}", "tokens.json:3:3: token 2: shorter than 16"},
		"duplicate, where":   {"{\"tokens\": [\n  {\"token\": \"0123456789abcdef\", \"tenant\": \"a\"},\n  {\"token\": \"0123456789abcdef\", \"tenant\": \"b\"}]}", "tokens.json:3:3: token 2: the same token as at 2:3"},
		"wrong type":         {"{\"tokens\": [\n  {\"token\": \"0123456789abcdef\", \"tenant\": \"a\", \"admin\": \"yes\"}]}", `tokens.json:2:3: token 1: "admin" is a bool, not a JSON string`},
		"a list":             {`[{"token":"0123456789abcdef","tenant":"a"}]`, `tokens.json:1:1: the file holds one object, {"tokens": [...]}`},
		"tokens not a list":  {`{"tokens": {"token":"0123456789abcdef"}}`, `tokens.json:1:12: "tokens" is a list`},
		"other field":        {`{"tokens": [], "users": []}`, `field "users": the file holds one object with one field, "tokens"`},
		"tokens twice":       {`{"tokens": [{"token":"0123456789abcdef","tenant":"a"}], "tokens": [{"token":"0123456789abcdeg","tenant":"a"}]}`, `"tokens" appears twice: put every token in one list`},
		"trailing":           {`{"tokens": [{"token":"0123456789abcdef","tenant":"a"}]} {}`, "more after the object"},
	} {
		tk, err := api.ParseTokens([]byte(c.src), "tokens.json")
		switch {
		case c.err == "" && (err != nil || tk.Len() != 2):
			t.Errorf("%s: %v", name, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want %q", name, err, c.err)
		}
	}
	// A router with a TCP listener does not start on a bad file.
	dir := t.TempDir()
	path := filepath.Join(dir, "t.json")
	os.WriteFile(path, []byte(`{"tokens":[]}`), 0o600)
	srv := api.New(nil, listenOn(filepath.Join(dir, "s"), "127.0.0.1:0", path), api.Options{})
	if err := srv.Open(); err == nil {
		srv.Close(context.Background())
		t.Fatal("opened with no tokens")
	}
	// Nor on a good file that others may read: it refuses, naming the mode
	// to set, as ssh does with a key.
	os.WriteFile(path, []byte(`{"tokens":[{"token":"0123456789abcdef","tenant":"a"}]}`), 0o644)
	os.Chmod(path, 0o644)
	srv = api.New(nil, listenOn(filepath.Join(dir, "s"), "127.0.0.1:0", path), api.Options{})
	if err := srv.Open(); err == nil || !strings.Contains(err.Error(), "(mode 0644): chmod 600 "+path) {
		srv.Close(context.Background())
		t.Fatalf("opened on a 0644 tokens_file: %v", err)
	}
	// Nor on a private file another user owns: its tokens are theirs to
	// choose (one planted in a directory they could write).
	os.Chmod(path, 0o600)
	if !testkit.GiveToStranger(t, path) {
		return
	}
	srv = api.New(nil, listenOn(filepath.Join(dir, "s"), "127.0.0.1:0", path), api.Options{})
	if err := srv.Open(); err == nil || !strings.Contains(err.Error(), "is owned by uid 4242, not by the router's user") {
		srv.Close(context.Background())
		t.Fatalf("opened on a tokens_file of uid 4242: %v", err)
	}
}

// Tenant B cannot squat tenant A's event ids: B stores "order-42" first,
// then A's own "order-42" (even with the same source) is accepted, each
// tenant finds only its own, and B's replay of its request stays B's.
func TestTenantCannotSquatIDs(t *testing.T) {
	r := newTCPRouter(t)
	ct := map[string]string{"Content-Type": "application/cloudevents+json"}
	ev := func(data string) string {
		return `{"specversion":"1.0","type":"order.created","source":"/shop","id":"order-42","data":` + data + `}`
	}
	if rep := r.tcp("POST", "/v1/events", tokBeta, ct, ev(`{"by":"beta"}`)); rep.status != 202 {
		t.Fatalf("beta: %d %s", rep.status, rep.body)
	}
	if rep := r.tcp("POST", "/v1/events", tokAcme, ct, ev(`{"by":"acme"}`)); rep.status != 202 {
		t.Fatalf("acme's own id after beta used it: %d %s", rep.status, rep.body)
	}
	// The same event again from beta replays beta's acceptance; other
	// content under that id is beta's own conflict, not acme's.
	if rep := r.tcp("POST", "/v1/events", tokBeta, ct, ev(`{"by":"beta"}`)); rep.status != 202 {
		t.Fatalf("beta's resend: %d %s", rep.status, rep.body)
	}
	if rep := r.tcp("POST", "/v1/events", tokBeta, ct, ev(`{"by":"beta, changed"}`)); rep.status != 422 {
		t.Fatalf("beta's changed resend: %d %s", rep.status, rep.body)
	}
	for tok, tenant := range map[string]string{tokAcme: "acme", tokBeta: "beta"} {
		rep := r.tcp("GET", "/v1/events/order-42", tok, nil, "")
		if rep.status != 200 {
			t.Fatalf("%s: %d %s", tenant, rep.status, rep.body)
		}
		if n := r.stored(); n != 2 {
			t.Fatalf("%d events stored, want 2", n)
		}
	}
	// The admin addresses a tenant's event by ?tenant=: found (pending,
	// so not a dead letter), where the default tenant has no such id.
	if rep := r.tcp("GET", "/v1/dlq/order-42?tenant=acme", tokAdmin, nil, ""); !strings.Contains(string(rep.body), "it is pending") {
		t.Errorf("admin lookup of acme's order-42: %d %s", rep.status, rep.body)
	}
	if rep := r.tcp("GET", "/v1/dlq/order-42", tokAdmin, nil, ""); !strings.Contains(string(rep.body), `no event with id \"order-42\" in the default tenant (another tenant's: ?tenant=T`) {
		t.Errorf("admin lookup of the default tenant's order-42: %d %s", rep.status, rep.body)
	}
	// A lookup under a tenant that has no such id says which tenant.
	if rep := r.tcp("GET", "/v1/dlq/order-42?tenant=nobody", tokAdmin, nil, ""); !strings.Contains(string(rep.body), `no event with id \"order-42\" in tenant \"nobody\"`) {
		t.Errorf("admin lookup of order-42 in tenant nobody: %d %s", rep.status, rep.body)
	}
}

// A request's headers on the TCP listener, read before its token is
// checked, are bounded at 64 KiB (431 past it), while the socket takes a
// binary-mode event with more: before, each client without a token could
// hold about 1.6 MiB with a megabyte of headers, and 400 of them had the
// router OOM-killed (a security trial).
func TestTCPHeadersAreBounded(t *testing.T) {
	r := newTCPRouterWith(t, func(l *config.Listen) { l.MaxBody = 1 << 20 })
	h := map[string]string{"ce-specversion": "1.0", "ce-type": "order.created", "ce-source": "/t", "Content-Type": "application/json"}
	for i := range 20 { // 20 extensions of 4,000 bytes: 80 KB of headers
		h[fmt.Sprintf("ce-ext%d", i)] = strings.Repeat("x", 4000)
	}
	if rep := r.tcp("POST", "/v1/events", "", h, `{}`); rep.status != 431 {
		t.Errorf("80 KB of headers over TCP, no token: %d %s", rep.status, rep.body)
	}
	if rep := r.tcp("POST", "/v1/events", tokAcme, h, `{}`); rep.status != 431 {
		t.Errorf("80 KB of headers over TCP, a token: %d %s", rep.status, rep.body)
	}
	if rep := r.do("POST", "/v1/events", h, `{}`); rep.status != 202 {
		t.Errorf("80 KB of headers over the socket: %d %s", rep.status, rep.body)
	}
}

// /readyz tells a tenant's token whether each check and sink is ok, and
// only an admin why not (the reasons hold paths and broker addresses: a
// security trial found a tenant reading them) and which inboxes there are
// (only an admin lists them; an inbox's delivery sink, "inbox.pay", names
// one, and a console trial read it with a tenant's token).
func TestReadyzReasonsAreTheOperators(t *testing.T) {
	r := newTCPRouterOpts(t, nil, func(o *api.Options) {
		o.Ready = func(context.Context) map[string]error {
			return map[string]error{"storage": errors.New("the data file /srv/secret/router.db was removed")}
		}
		o.Sinks = func(context.Context) map[string]error {
			return map[string]error{"kafka.k": errors.New("dial tcp 10.1.2.3:9092: connection refused"), "inbox.pay": nil}
		}
		o.Inboxes = func(context.Context) map[string]error {
			return map[string]error{"pay": errors.New("inbox \"pay\": kafka.k: no broker reachable: dial tcp 10.9.8.7:9092: i/o timeout")}
		}
	})
	tenant := r.tcp("GET", "/readyz", tokAcme, nil, "")
	if tenant.status != 503 || strings.Contains(string(tenant.body), "/srv/secret") || strings.Contains(string(tenant.body), "10.1.2.3") ||
		strings.Contains(string(tenant.body), "10.9.8.7") || !strings.Contains(string(tenant.body), `"storage": "not ok"`) ||
		!strings.Contains(string(tenant.body), `"kafka.k": "not ok"`) || strings.Contains(string(tenant.body), `"pay"`) ||
		strings.Contains(string(tenant.body), `"inboxes"`) || strings.Contains(string(tenant.body), `inbox.pay`) {
		t.Errorf("a tenant's /readyz: %d %s", tenant.status, tenant.body)
	}
	admin := r.tcp("GET", "/readyz", tokAdmin, nil, "")
	if admin.status != 503 || !strings.Contains(string(admin.body), "/srv/secret/router.db") || !strings.Contains(string(admin.body), "10.1.2.3") ||
		!strings.Contains(string(admin.body), "10.9.8.7") || !strings.Contains(string(admin.body), `"inbox.pay": "ok"`) {
		t.Errorf("an admin's /readyz: %d %s", admin.status, admin.body)
	}
	if local := r.do("GET", "/readyz", nil, ""); !strings.Contains(string(local.body), "10.1.2.3") || !strings.Contains(string(local.body), "10.9.8.7") {
		t.Errorf("the socket's /readyz: %d %s", local.status, local.body)
	}
}

// /readyz asks the sinks and the inboxes at once, so it answers within the
// second each takes at most, not their sum: here each waits until the
// other has been asked.
func TestReadyzAsksSinksAndInboxesAtOnce(t *testing.T) {
	sinksAsked, inboxesAsked := make(chan struct{}), make(chan struct{})
	meet := func(mine, other chan struct{}, what string) map[string]error {
		close(mine)
		select {
		case <-other:
			return map[string]error{what: nil}
		case <-time.After(5 * time.Second):
			return map[string]error{what: errors.New("asked one after the other")}
		}
	}
	r := newTCPRouterOpts(t, nil, func(o *api.Options) {
		o.Sinks = func(context.Context) map[string]error { return meet(sinksAsked, inboxesAsked, "kafka.k") }
		o.Inboxes = func(context.Context) map[string]error { return meet(inboxesAsked, sinksAsked, "pay") }
	})
	rep := r.tcp("GET", "/readyz", tokAdmin, nil, "")
	var body struct{ Sinks, Inboxes map[string]string }
	if err := json.Unmarshal(rep.body, &body); err != nil || rep.status != 200 || body.Sinks["kafka.k"] != "ok" || body.Inboxes["pay"] != "ok" {
		t.Fatalf("/readyz: %d %s (%v)", rep.status, rep.body, err)
	}
}
