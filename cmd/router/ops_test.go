package main

// Operating the router, end to end: the DLQ and stats commands, /metrics,
// and the TCP listener, against a router started in process by Main.Run.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-router/switchyard/internal/testkit"
	"github.com/switchyard-router/switchyard/plugins/wasm"
)

const (
	opsAdminToken = "ops-admin-token-0123456789"
	opsAcmeToken  = "ops-acme-token-0123456789"
)

// opsRouter is a router run in process with an embedded NATS server on a
// known port, the unix socket and a TCP listener.
type opsRouter struct {
	t       *testing.T
	dir     string
	config  string
	sock    string
	addr    string // TCP listener
	natsURL string
	client  *http.Client
	logs    *testkit.Buffer
	cancel  context.CancelFunc
	done    chan error
}

// opsTypes: t.order is delivered (the "events" stream captures t.>);
// t.fail publishes to late.fail, which no stream captures until a test
// creates one, and with no retries it is dead on its first failure.
const opsTypes = `
event "t.fail" {
  max_retries = 0
  backoff { enabled = false }
  polling {
    min = "10ms"
    max = "100ms"
  }
  route {
    to      = "nats.local"
    subject = "late.fail"
  }
}
`

func startOpsRouter(t *testing.T, extra string) *opsRouter {
	t.Helper()
	dir, err := os.MkdirTemp("", "sy")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	natsPort, httpPort := testkit.FreePort(t), testkit.FreePort(t)
	r := &opsRouter{t: t, dir: dir, sock: filepath.Join(dir, "r.sock"), addr: "127.0.0.1:" + strconv.Itoa(httpPort),
		natsURL: "nats://127.0.0.1:" + strconv.Itoa(natsPort)}
	tokens := fmt.Sprintf(`{"tokens":[{"token":%q,"admin":true},{"token":%q,"tenant":"acme"}]}`, opsAdminToken, opsAcmeToken)
	if err := os.WriteFile(filepath.Join(dir, "tokens.json"), []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	src := `
listen {
  socket      = "` + r.sock + `"
  http        = "` + r.addr + `"
  tokens_file = "` + filepath.Join(dir, "tokens.json") + `"
}
storage { path = "` + filepath.Join(dir, "r.db") + `" }
dlq { ttl = "1h" }
nats "local" {
  embedded = true
  port     = ` + strconv.Itoa(natsPort) + `
  stream "events" { subjects = ["t.>"] }
}
event "t.order" {
  route {
    to      = "nats.local"
    subject = "t.orders"
  }
  polling { min = "10ms" }
}
` + opsTypes + extra
	r.config = filepath.Join(dir, "policies.hcl")
	if err := os.WriteFile(r.config, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *opsRouter) start() {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done, r.logs = cancel, make(chan error, 1), new(testkit.Buffer)
	m := NewMain(nil, io.Discard, r.logs)
	go func() { r.done <- m.Run(ctx, []string{"run", "-config", r.config, "-log-level", "info"}) }()
	r.client = testkit.UnixClient(r.sock, 10*time.Second)
	waitHealthy(r.t, r.client)
}

func (r *opsRouter) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			r.t.Errorf("router: %v", err)
		}
	case <-time.After(30 * time.Second):
		r.t.Error("router did not stop")
	}
}

// cli runs a router subcommand against this router's socket.
func (r *opsRouter) cli(args ...string) (string, error) {
	r.t.Helper()
	return r.cliRaw(append(args, "-socket", r.sock)...)
}

func (r *opsRouter) cliRaw(args ...string) (string, error) {
	r.t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := NewMain(nil, &out, &errOut).Run(ctx, args)
	if err != nil {
		err = fmt.Errorf("%w (stderr: %s)", err, errOut.String())
	}
	return out.String(), err
}

func (r *opsRouter) mustCLI(args ...string) string {
	r.t.Helper()
	out, err := r.cli(args...)
	if err != nil {
		r.t.Fatalf("router %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// post sends one structured event over the socket; it returns the id.
func (r *opsRouter) post(typ string, header map[string]string, data string) (int, http.Header, string) {
	r.t.Helper()
	body := `{"specversion":"1.0","type":"` + typ + `","source":"/ops","data":` + data + `}`
	req, _ := http.NewRequest("POST", "http://r/v1/events", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/cloudevents+json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v struct{ ID string }
	json.Unmarshal(b, &v)
	return resp.StatusCode, resp.Header, v.ID
}

func (r *opsRouter) postOK(typ, data string) string {
	r.t.Helper()
	status, _, id := r.post(typ, nil, data)
	if status != 202 {
		r.t.Fatalf("post %s: %d", typ, status)
	}
	return id
}

func (r *opsRouter) state(id string) string {
	r.t.Helper()
	var v struct{ State string }
	json.Unmarshal([]byte(get(r.t, r.client, "/v1/events/"+id)), &v)
	return v.State
}

// waitState waits until every id is in state.
func (r *opsRouter) waitState(state string, ids ...string) {
	r.t.Helper()
	next := 0
	testkit.EventuallyWith(r.t, 20*time.Second, func() bool {
		for ; next < len(ids); next++ {
			if r.state(ids[next]) != state {
				return false
			}
		}
		return true
	}, func() string {
		return fmt.Sprintf("%s is %s, not %s\n%s", ids[next], r.state(ids[next]), state, r.logs)
	})
}

// createStream makes late.fail deliverable.
func (r *opsRouter) createStream(name, subjects string) {
	r.t.Helper()
	js := routerJetStream(r.t, filepath.Join(r.dir, "policies.hcl"), "local", r.natsURL)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: name, Subjects: []string{subjects}}); err != nil {
		r.t.Fatal(err)
	}
}

type cliList struct {
	Items []struct {
		ID, Type, State, Reason string
		Attempts                int
	}
	NextCursor string `json:"next_cursor"`
}

func ids(l cliList) []string {
	var out []string
	for _, it := range l.Items {
		out = append(out, it.ID)
	}
	return out
}

func decodeJSON[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return v
}

// The hint under a page of `router dlq list` lists the page after it, run
// as printed: with the page's filters, not the cursor alone; and the API
// refuses a cursor given with other filters than its page's, rather than
// listing from an unrelated place (a new-user trial: the hint after
// `-status resolved -limit 1` listed the unresolved dead letters).
func TestDLQListHintListsTheNextPage(t *testing.T) {
	r := startOpsRouter(t, "")
	var dead []string
	for i := range 4 {
		dead = append(dead, r.postOK("t.fail", strconv.Itoa(10+i)))
		time.Sleep(2 * time.Millisecond) // distinct moved_at order
	}
	r.waitState("dlq", dead...)
	r.mustCLI("dlq", "resolve", dead[0], dead[1])
	run := func(args ...string) (stdout, stderr string) {
		var out, errOut bytes.Buffer
		if err := NewMain(nil, &out, &errOut).Run(context.Background(), args); err != nil {
			t.Fatalf("router %s: %v (stderr: %s)", strings.Join(args, " "), err, errOut.String())
		}
		return out.String(), errOut.String()
	}
	page1, hint := run("dlq", "list", "-status", "resolved", "-limit", "1", "-socket", r.sock)
	if !strings.Contains(page1, dead[1]) || strings.Contains(page1, dead[0]) {
		t.Fatalf("page 1 of the resolved:\n%s", page1)
	}
	cmd, ok := strings.CutPrefix(strings.TrimSpace(hint), "more: router ")
	cmd, ok2 := strings.CutSuffix(cmd, " (or -all-pages)")
	if !ok || !ok2 {
		t.Fatalf("hint %q, want more: router dlq list ... (or -all-pages)", hint)
	}
	page2, _ := run(strings.Fields(cmd)...)
	if !strings.Contains(page2, dead[0]) || strings.Contains(page2, dead[2]) || strings.Contains(page2, dead[3]) {
		t.Fatalf("the hint %q listed:\n%s\nwant the resolved %s only", cmd, page2, dead[0])
	}
	cursor := cmd[strings.LastIndex(cmd, " ")+1:]
	if body := get(t, r.client, "/v1/dlq?cursor="+cursor); !strings.Contains(body, "invalid_request") || !strings.Contains(body, "other filters") {
		t.Fatalf("a resolved listing's cursor given without its status: %s", body)
	}
}

// Every dlq subcommand and stats, over the socket and over TCP.
func TestDLQCommands(t *testing.T) {
	r := startOpsRouter(t, "")
	var dead []string
	for i := range 6 {
		dead = append(dead, r.postOK("t.fail", strconv.Itoa(i)))
		time.Sleep(2 * time.Millisecond) // distinct moved_at order
	}
	r.waitState("dlq", dead...)

	// list: a table, newest first; pages with a cursor; all pages.
	out := r.mustCLI("dlq", "list")
	if !strings.HasPrefix(out, "ID ") || !strings.Contains(out, "REASON") || strings.Count(out, "t.fail") != 6 ||
		strings.Index(out, dead[5]) > strings.Index(out, dead[0]) {
		t.Fatalf("list table:\n%s", out)
	}
	page1 := decodeJSON[cliList](t, r.mustCLI("dlq", "list", "-limit", "4", "-o", "json"))
	if len(page1.Items) != 4 || page1.NextCursor == "" || page1.Items[0].ID != dead[5] {
		t.Fatalf("page 1: %+v", page1)
	}
	page2 := decodeJSON[cliList](t, r.mustCLI("dlq", "list", "-limit", "4", "-cursor", page1.NextCursor, "-o", "json"))
	if fmt.Sprint(ids(page2)) != fmt.Sprint([]string{dead[1], dead[0]}) || page2.NextCursor != "" {
		t.Fatalf("page 2: %+v", page2)
	}
	all := decodeJSON[cliList](t, r.mustCLI("dlq", "list", "-limit", "2", "-all-pages", "-o", "json", "-type", "t.fail"))
	if len(all.Items) != 6 || all.Items[0].Attempts != 1 || all.Items[0].Reason == "" {
		t.Fatalf("all pages: %+v", all)
	}
	if out := r.mustCLI("dlq", "list", "-type", "t.order"); !strings.Contains(out, "no dead letters") {
		t.Fatalf("empty list: %s", out)
	}

	// show: the event, every attempt, the reason.
	out = r.mustCLI("dlq", "show", dead[0])
	for _, want := range []string{"ID:", dead[0], "State:", "dlq", "Reason:", "gave up after 1 attempt:", "Attempts:", "History (1 attempt, retries included):", "late.fail", `"data": 0`} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	show := decodeJSON[struct {
		History []struct{ At, Error string }
		Event   map[string]any
	}](t, r.mustCLI("dlq", "show", dead[0], "-o", "json"))
	if len(show.History) != 1 || show.History[0].At == "" || show.Event["id"] != dead[0] {
		t.Fatalf("show json: %+v", show)
	}
	if _, err := r.cli("dlq", "show", "no-such-event"); err == nil || !strings.Contains(err.Error(), "not_found") {
		t.Fatalf("show of nothing: %v", err)
	}
	// An id "stats" is the counts' path: refused, where it printed an
	// empty dead letter and exited 0 (a console trial).
	if out, err := r.cli("dlq", "show", "stats"); err == nil || !strings.Contains(out+err.Error(), "dlq list") {
		t.Fatalf("show stats: %v\n%s", err, out)
	}

	// The cause is fixed: a stream now captures late.>.
	r.createStream("late", "late.>")
	if out := r.mustCLI("dlq", "retry", dead[0]); !strings.Contains(out, "retried "+dead[0]+": pending") {
		t.Fatalf("retry: %s", out)
	}
	r.waitState("delivered", dead[0])
	if _, err := r.cli("dlq", "retry", dead[0]); err == nil || !strings.Contains(err.Error(), "not_in_dlq") {
		t.Fatalf("retry of a delivered event: %v", err)
	}
	if out := r.mustCLI("dlq", "resolve", dead[1]); !strings.Contains(out, "resolved "+dead[1]) {
		t.Fatalf("resolve: %s", out)
	}
	if out := r.mustCLI("dlq", "delete", dead[2]); !strings.Contains(out, "deleted "+dead[2]) {
		t.Fatalf("delete: %s", out)
	}
	if status := get(t, r.client, "/v1/events/"+dead[2]); !strings.Contains(status, "not_found") {
		t.Fatalf("deleted event: %s", status)
	}
	resolved := decodeJSON[cliList](t, r.mustCLI("dlq", "list", "-status", "resolved", "-o", "json"))
	if fmt.Sprint(ids(resolved)) != fmt.Sprint([]string{dead[1]}) || resolved.Items[0].State != "resolved" {
		t.Fatalf("resolved: %+v", resolved)
	}

	// stats: per type, with the DLQ and resolved counts; the data file
	// against its budget, and the reserve (a quarter of the default
	// min_free, 64 MiB; the space loop makes it after the start: a CI run
	// asked before it was written); the sink that failed (late.> had no
	// stream).
	testkit.EventuallyWith(t, 10*time.Second, func() bool {
		out = r.mustCLI("stats")
		return strings.Contains(out, ", reserve 16.0 MiB")
	}, func() string { return "stats with the reserve made:\n" + out })
	if !strings.Contains(out, "TYPE") || !strings.Contains(out, "RESOLVED") || !strings.Contains(out, "t.fail") ||
		!strings.Contains(out, "storage: ") || !strings.Contains(out, "no max_size") || !strings.Contains(out, ", reserve 16.0 MiB") ||
		!strings.Contains(out, "last publish error per sink:") || !strings.Contains(out, "type t.fail: ") {
		t.Fatalf("stats:\n%s", out)
	}
	stats := decodeJSON[struct {
		Types []struct {
			Type          string
			DLQ, Resolved int
		}
		Storage struct {
			Used int64 `json:"used_bytes"`
			File int64 `json:"file_bytes"`
		}
		Sinks map[string]struct {
			Err string `json:"last_error"`
		}
	}](t, r.mustCLI("stats", "-o", "json"))
	if stats.Storage.Used <= 0 || stats.Storage.File < stats.Storage.Used || len(stats.Sinks) == 0 {
		t.Fatalf("stats json: the API's storage and sinks sections: %+v", stats)
	}
	found := false
	for _, s := range stats.Types {
		if s.Type == "t.fail" {
			found = s.DLQ == 3 && s.Resolved == 1
		}
	}
	if !found {
		t.Fatalf("stats json: %+v", stats)
	}

	// Many by filter: the rest of t.fail, then the resolved one by status.
	if out := r.mustCLI("dlq", "retry", "-type", "t.fail"); !strings.Contains(out, "retried 3 of 3 matched") {
		t.Fatalf("retry by type: %s", out)
	}
	r.waitState("delivered", dead[3], dead[4], dead[5])
	out, err := r.cli("dlq", "resolve", dead[3], "nope")
	if err == nil || !strings.Contains(out, "resolved 0 of 1 matched") || !strings.Contains(out, "not found (1): nope") || !strings.Contains(out, "not_in_dlq") {
		t.Fatalf("resolve of a delivered and a missing event: %v\n%s", err, out)
	}
	if out := r.mustCLI("dlq", "delete", "-all", "-status", "resolved"); !strings.Contains(out, "deleted 1 of 1 matched") {
		t.Fatalf("delete resolved: %s", out)
	}
	if _, err := r.cli("dlq", "retry"); err == nil || exitCode(err) != 2 {
		t.Fatalf("retry without ids or filter: %v", err)
	}

	// Over TCP: an admin token works, a tenant token is forbidden, no token
	// is unauthorized.
	if out, err := r.cliRaw("dlq", "list", "-addr", r.addr, "-token", opsAdminToken); err != nil || !strings.Contains(out, "no dead letters") {
		t.Fatalf("tcp admin: %v %s", err, out)
	}
	if _, err := r.cliRaw("stats", "-addr", "http://"+r.addr, "-token", opsAcmeToken); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("tcp tenant token on stats: %v", err)
	}
	t.Setenv("SWITCHYARD_TOKEN", "")
	if _, err := r.cliRaw("dlq", "list", "-addr", r.addr); err == nil || !strings.Contains(err.Error(), "unauthorized") {
		t.Fatalf("tcp without a token: %v", err)
	}
	tokenFile := filepath.Join(r.dir, "admin.token")
	os.WriteFile(tokenFile, []byte(opsAdminToken+"\n"), 0o600)
	if _, err := r.cliRaw("stats", "-addr", r.addr, "-token-file", tokenFile); err != nil {
		t.Fatalf("tcp with -token-file: %v", err)
	}
	if _, err := r.cliRaw("dlq", "list", "-socket", filepath.Join(r.dir, "nope.sock")); err == nil || !strings.Contains(err.Error(), "is it running") {
		t.Fatalf("no router: %v", err)
	}
}

// scrape reads /metrics into series → value ("name{a=\"x\"}" as written).
func scrape(t *testing.T, c *http.Client) map[string]float64 {
	t.Helper()
	out := make(map[string]float64)
	sc := bufio.NewScanner(strings.NewReader(get(t, c, "/metrics")))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// After a scripted run the scraped values match what was done.
func TestMetricsAfterScriptedRun(t *testing.T) {
	r := startOpsRouter(t, "")
	const delivered, dead, replays = 5, 3, 2
	var okIDs, deadIDs []string
	posts := 0
	for i := range delivered - 1 {
		okIDs = append(okIDs, r.postOK("t.order", strconv.Itoa(i)))
		posts++
	}
	key := map[string]string{"Idempotency-Key": "order-42"}
	status, _, id := r.post("t.order", key, `{"n":42}`)
	posts++
	if status != 202 {
		t.Fatalf("keyed post: %d", status)
	}
	okIDs = append(okIDs, id)
	for range replays {
		status, h, again := r.post("t.order", key, `{"n":42}`)
		posts++
		if status != 202 || again != id || h.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay: %d %s %v", status, again, h)
		}
	}
	if status, _, _ := r.post("t.order", key, `{"n":43}`); status != 422 {
		t.Fatalf("key reuse: %d", status)
	}
	posts++
	if status, _, _ := r.post("t.unknown", nil, `1`); status != 422 {
		t.Fatalf("unknown type: %d", status)
	}
	posts++
	for i := range dead {
		deadIDs = append(deadIDs, r.postOK("t.fail", strconv.Itoa(i)))
		posts++
	}
	get(t, r.client, "/v1/events/nope") // 404 not_found
	r.waitState("delivered", okIDs...)
	r.waitState("dlq", deadIDs...)
	if out := r.mustCLI("dlq", "resolve", deadIDs[0]); !strings.Contains(out, "resolved") {
		t.Fatal(out)
	}

	m := scrape(t, r.client)
	for series, want := range map[string]float64{
		`switchyard_events_ingested_total{type="t.order"}`:                 delivered,
		`switchyard_events_ingested_total{type="t.fail"}`:                  dead,
		`switchyard_published_total{sink="nats.local",type="t.order"}`:     delivered,
		`switchyard_dead_lettered_total{type="t.fail"}`:                    dead,
		`switchyard_publish_errors_total{sink="nats.local",type="t.fail"}`: dead,
		`switchyard_idempotent_replays_total`:                              replays,
		`switchyard_http_problems_total{code="idempotency_key_reuse"}`:     1,
		`switchyard_http_problems_total{code="unknown_event_type"}`:        1,
		`switchyard_http_problems_total{code="not_found"}`:                 1,
		`switchyard_ingest_duration_seconds_count`:                         float64(posts),
		`switchyard_events{state="delivered"}`:                             delivered,
		`switchyard_events{state="dlq"}`:                                   dead - 1,
		`switchyard_events{state="resolved"}`:                              1,
		`switchyard_events{state="pending"}`:                               0,
		`switchyard_events{state="in_process"}`:                            0,
		`switchyard_dlq_events{type="t.fail"}`:                             dead - 1,
		`switchyard_pending_events{type="t.order"}`:                        0,
		`switchyard_dlq_actions_total{action="resolve"}`:                   1,
	} {
		if got, ok := m[series]; !ok || got != want {
			t.Errorf("%s = %v (present %t), want %v", series, got, ok, want)
		}
	}
	if n := m[`switchyard_publish_duration_seconds_count{sink="nats.local"}`]; n < 2 {
		t.Errorf("publish latency observed %v times", n)
	}
	for _, s := range []string{`switchyard_polls_total{outcome="empty",type="t.order"}`, `switchyard_oldest_pending_age_seconds{type="t.order"}`, `switchyard_poll_delay_seconds{type="t.order"}`, `switchyard_in_process_events{type="t.order"}`} {
		if _, ok := m[s]; !ok {
			t.Errorf("no series %s", s)
		}
	}
}

// Before any event, the counters an alert watches exist at 0: each
// configured type's (with each sink its routes name), each DLQ action's
// and each problem code's. A series that appears at 1 shows no increase()
// (the first dead letter would raise no alert), and absent() cannot tell
// a quiet router from a broken scrape. A new-user trial found them absent
// until first counted.
func TestCountersExistBeforeTheirFirstCount(t *testing.T) {
	r := startOpsRouter(t, "")
	m := scrape(t, r.client)
	for _, series := range []string{
		`switchyard_events_ingested_total{type="t.order"}`,
		`switchyard_published_total{sink="nats.local",type="t.order"}`,
		`switchyard_publish_errors_total{sink="nats.local",type="t.order"}`,
		`switchyard_publish_duration_seconds_count{sink="nats.local"}`,
		`switchyard_retried_total{type="t.order"}`,
		`switchyard_dead_lettered_total{type="t.order"}`,
		`switchyard_requeued_total{type="t.order"}`,
		`switchyard_filtered_total{type="t.order"}`,
		`switchyard_unrouted_outputs_total{type="t.order"}`,
		`switchyard_delivery_yield_seconds_total{type="t.order"}`,
		`switchyard_polls_total{outcome="full",type="t.order"}`,
		`switchyard_dlq_actions_total{action="retry"}`,
		`switchyard_dlq_actions_total{action="resolve"}`,
		`switchyard_dlq_actions_total{action="delete"}`,
		`switchyard_http_problems_total{code="idempotency_key_reuse"}`,
		`switchyard_http_problems_total{code="unauthorized"}`,
	} {
		wantZero(t, m, series, "before any event")
	}
}

// A WebAssembly plugin's failure counters exist, at 0, for each kind of
// failure from the first scrape, as its verdicts' do: an alert on
// increase() sees its first trap or timeout. They appeared at the first
// failure of each kind.
func TestPluginFailureCountersExistBeforeTheFirstFailure(t *testing.T) {
	pass, _ := filepath.Abs(filepath.Join("..", "..", "examples", "plugins", "passthrough-wat", "passthrough.wasm"))
	r := startOpsRouter(t, fmt.Sprintf(`
plugin "pass" { wasm = %q }
event "t.passed" {
  plugins = ["pass"]
  route {
    to      = "nats.local"
    subject = "t.passed"
  }
}
`, pass))
	m := scrape(t, r.client)
	for _, kind := range wasm.Failures {
		wantZero(t, m, fmt.Sprintf(`switchyard_plugin_failures_total{kind=%q,plugin="pass"}`, kind), "before any event")
	}
	wantZero(t, m, `switchyard_plugin_events_total{plugin="pass",verdict="retry"}`, "before any event")
}

// wantZero fails t unless the scrape m has series, at 0.
func wantZero(t *testing.T, m map[string]float64, series, when string) {
	t.Helper()
	if got, ok := m[series]; !ok || got != 0 {
		t.Errorf("%s = %v (present %t), want 0 %s", series, got, ok, when)
	}
}

// The TCP listener serves the same API; the token decides the tenant.
func TestTCPListenerServesTheAPI(t *testing.T) {
	r := startOpsRouter(t, "")
	do := func(method, path, token, body string, header map[string]string) (int, string) {
		return send(t, method, "http://"+r.addr+path, token, body, header)
	}
	status, body := do("POST", "/v1/events", opsAcmeToken, `{"specversion":"1.0","type":"t.order","source":"/tcp","id":"tcp-1"}`,
		map[string]string{"Content-Type": "application/cloudevents+json", "X-Tenant": "default"})
	if status != 202 {
		t.Fatalf("tcp post: %d %s", status, body)
	}
	if status, _ := do("GET", "/v1/events/tcp-1", opsAcmeToken, "", nil); status != 200 {
		t.Fatalf("acme reads its event: %d", status)
	}
	// Over the socket, tenant default (what X-Tenant claimed on TCP) does
	// not see it; acme does.
	if s := get(t, r.client, "/v1/events/tcp-1"); !strings.Contains(s, "not_found") {
		t.Fatalf("default tenant sees acme's event: %s", s)
	}
	if status, _ := do("GET", "/v1/events/tcp-1", "", "", nil); status != 401 {
		t.Fatalf("no token: %d", status)
	}
	if status, _ := do("GET", "/metrics", opsAcmeToken, "", nil); status != 403 {
		t.Fatalf("tenant token on /metrics: %d", status)
	}
	if status, body := do("GET", "/metrics", opsAdminToken, "", nil); status != 200 || !strings.Contains(body, "switchyard_http_problems_total") {
		t.Fatalf("admin /metrics: %d", status)
	}
}

// A word the command does not take is an error that names it (exit 2),
// before anything is asked of a router: `router stats extra` printed the
// stats, `router tail extra` tailed for ever, `router backup x.db extra`
// said no file was named (an adversarial trial). An empty event id too.
func TestStrayArgumentsAreRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"stats", "extra"}, `router stats takes no arguments, only flags: ["extra"]`},
		{[]string{"dlq", "list", "extra"}, `router dlq list takes no arguments, only flags: ["extra"]`},
		{[]string{"tail", "extra", "-type", "x"}, `router tail takes no arguments, only flags: ["extra"]`},
		{[]string{"ui", "extra"}, `router ui takes no arguments, only flags: ["extra"]`},
		{[]string{"version", "extra"}, `router version takes no arguments, only flags: ["extra"]`},
		{[]string{"backup", "x.db", "extra"}, `backup: one file to write, not 2: ["x.db" "extra"]`},
		{[]string{"db", "frob", "x"}, `db: unknown subcommand "frob": check, compact, rollback, clock`},
		{[]string{"db", "check", "a", "b"}, `db check: name one data file (given 2: ["a" "b"])`},
		{[]string{"run", "extra", "-config", "x.hcl"}, `router run takes no arguments, only flags: "extra"`},
		// An empty id asked for a route that does not exist (not_found: no route).
		{[]string{"dlq", "show", ""}, `dlq show: give one event id`},
		{[]string{"dlq", "retry", "a", ""}, `dlq retry: an event id is never empty`},
		// -all was dropped without a word beside an id (a new user's trial).
		{[]string{"dlq", "retry", "a", "-all"}, `dlq retry: -all takes every dead letter and comes alone`},
		{[]string{"dlq", "delete", "-all", "-type", "t"}, `dlq delete: -all takes every dead letter and comes alone`},
		{[]string{"dlq", "resolve", "-queue", "inbox:x"}, `dlq resolve: give event ids, or a filter`},
	} {
		var out bytes.Buffer
		err := NewMain(nil, &out, &out).Run(context.Background(), c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("router %v: %v, want %q", c.args, err, c.want)
		}
		if c.args[0] != "run" && exitCode(err) != 2 {
			t.Errorf("router %v: exit %d, want 2", c.args, exitCode(err))
		}
	}
}

// A table cell of the CLI shows an id's bidirectional override, a
// zero-width space and a terminal's escape as their code points, as the
// console does (`router dlq list` printed "abc\u202egpj.exe" reversed: a
// console trial); plain text and other scripts stay as they are.
func TestTableCellsShowWhatATerminalHides(t *testing.T) {
	for in, want := range map[string]string{
		"abc\u202egpj.exe":   "abc⟨U+202E⟩gpj.exe",
		"a\u200bb":           "a⟨U+200B⟩b",
		"a\u061cb":           "a⟨U+061C⟩b",
		"\x1b[31mred\x1b[0m": "⟨U+001B⟩[31mred⟨U+001B⟩[0m",
		"order-42 café 注文":   "order-42 café 注文",
	} {
		if got := tableCell(in, 100); got != want {
			t.Errorf("tableCell(%q) = %q, want %q", in, got, want)
		}
	}
}
