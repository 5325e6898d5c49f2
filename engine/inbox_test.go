package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/internal/testkit"
	"github.com/switchyard-router/switchyard/storage"
)

const pullInbox = `
inbox "pay" {
  from    = "nats.local"
  subject = "t.pay"
  ttl     = "1h"
}
`

func inbound(ids ...string) []switchyard.Inbound {
	out := make([]switchyard.Inbound, len(ids))
	for i, id := range ids {
		out[i] = switchyard.Inbound{
			Event:  switchyard.Event{ID: id, Type: "payment", Source: "/bank", SpecVersion: "1.0", Data: []byte(`{}`)},
			Origin: fmt.Sprintf("nats.local:events#%d", i+1),
		}
	}
	return out
}

// An inbound event whose time the data file cannot hold (past 2261) is
// stored without it, not as another time, and a warning says which; one in
// range keeps its own.
func TestInboxLeavesOutAnUnstorableTime(t *testing.T) {
	var logs testkit.Buffer
	h := newHarness(t, pullInbox, true, harnessOption(func(o *engine.Options) {
		o.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})
	}))
	msgs := inbound("far", "near")
	msgs[0].Event.Time = time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
	near := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	msgs[1].Event.Time = near
	if _, err := h.eng.Receive(context.Background(), "pay", msgs); err != nil {
		t.Fatal(err)
	}
	h.db.View(func(tx *storage.Tx) error {
		for id, want := range map[string]time.Time{"far": {}, "near": near} {
			rec, err := tx.InboxRecord(config.InboxQueueName("pay"), "/bank", id)
			if err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			if !rec.Event.Time.Equal(want) {
				t.Errorf("%s: time %v, want %v", id, rec.Event.Time, want)
			}
		}
		return nil
	})
	if l := logs.String(); !strings.Contains(l, "an event's time is outside what the router stores; left out") || !strings.Contains(l, "id=far") || strings.Contains(l, "id=near") {
		t.Errorf("the warning:\n%s", l)
	}
}

// A replay of redeliveries, batch after batch, is told in a line at most
// every 10 s, with what it dropped since the last (it was a line per
// batch: a hundred in 0.4 s), and in full once it ends.
func TestRedeliveriesDroppedAreToldNowAndThen(t *testing.T) {
	var logs testkit.Buffer
	h := newHarness(t, pullInbox, true, harnessOption(func(o *engine.Options) {
		o.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	}))
	ctx := context.Background()
	if _, err := h.eng.Receive(ctx, "pay", inbound("a", "b")); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if _, err := h.eng.Receive(ctx, "pay", inbound("a", "b")); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), "inbox dropped redeliveries"); n != 1 || !strings.Contains(logs.String(), "dropped=2 ") {
		t.Fatalf("%d lines for 50 batches of redeliveries:\n%s", n, logs.String())
	}
	h.clock.Advance(10 * time.Second)
	if _, err := h.eng.Receive(ctx, "pay", inbound("a", "b")); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "inbox dropped redeliveries"); n != 2 || !strings.Contains(logs.String(), "dropped=100 ") {
		t.Fatalf("10 s on, %d lines; want a second with the 98 held back and this batch's 2:\n%s", n, logs.String())
	}
	// A replay that ends: what it held back is said with the next batch
	// once the throttle lets it, whether or not that batch holds a
	// redelivery (a trial's reset dropped 600 and the log said 50).
	for range 10 {
		if _, err := h.eng.Receive(ctx, "pay", inbound("a", "b")); err != nil {
			t.Fatal(err)
		}
	}
	h.clock.Advance(10 * time.Second)
	if _, err := h.eng.Receive(ctx, "pay", inbound("c")); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "inbox dropped redeliveries"); n != 3 || !strings.Contains(logs.String(), "dropped=20 stored=1") {
		t.Fatalf("after the replay ended, %d lines; want a third with the 20 held back:\n%s", n, logs.String())
	}
}

// An inbox that goes idle after a replay of redeliveries still tells what
// it dropped once the throttle lets it, though no batch comes to carry
// the line (a review: the count waited for a next batch that an idle
// inbox never gets).
func TestAnIdleInboxTellsTheRedeliveriesItDropped(t *testing.T) {
	engine.SetDropLogEvery(t, 100*time.Millisecond)
	var logs testkit.Buffer
	h := newHarness(t, pullInbox, true, harnessOption(func(o *engine.Options) {
		o.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	}))
	ctx := context.Background()
	for range 11 {
		if _, err := h.eng.Receive(ctx, "pay", inbound("a", "b")); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), "inbox dropped redeliveries"); n != 1 || !strings.Contains(logs.String(), "dropped=2 ") {
		t.Fatalf("%d lines for a replay in one moment, want the first:\n%s", n, logs.String())
	}
	h.clock.Advance(100 * time.Millisecond) // the engine's clock, which the throttle reads
	testkit.Eventually(t, "the 18 held back to be told with no batch after them", 5*time.Second, func() bool {
		return strings.Contains(logs.String(), "dropped=18 stored=0")
	})
}

// Redeliveries are dropped durably and audited, within the batch too; after
// the ttl an id is new again.
func TestReceiveDropsRedeliveries(t *testing.T) {
	h := newHarness(t, pullInbox, true)
	ctx := context.Background()
	res, err := h.eng.Receive(ctx, "pay", inbound("a", "b", "a"))
	if err != nil || res.Stored != 2 || res.Skipped != 1 {
		t.Fatalf("first batch: %+v %v", res, err)
	}
	res, err = h.eng.Receive(ctx, "pay", inbound("b", "c"))
	if err != nil || res.Stored != 1 || res.Skipped != 1 {
		t.Fatalf("second batch: %+v %v", res, err)
	}
	skips, err := h.eng.Skips("pay", time.Time{}, 10)
	if err != nil || len(skips) != 2 {
		t.Fatalf("audit: %+v %v", skips, err)
	}
	// A before bound past what an int64 of nanoseconds holds is later
	// than every entry, and one before 1970 earlier: not wrapped.
	for before, want := range map[string]int{"2600-01-01T00:00:00Z": 2, "1960-01-01T00:00:00Z": 0} {
		at, _ := time.Parse(time.RFC3339, before)
		if got, err := h.eng.Skips("pay", at, 10); err != nil || len(got) != want {
			t.Errorf("before %s: %d entries, want %d (%v)", before, len(got), want, err)
		}
	}
	reasons := map[storage.SkipReason]storage.Skip{}
	for _, s := range skips {
		reasons[s.Reason] = s
	}
	if s := reasons["duplicate"]; s.ID != "b" || s.FirstOrigin != "nats.local:events#2" || s.Origin != "nats.local:events#1" {
		t.Errorf("duplicate entry: %+v", s)
	}
	if s := reasons["duplicate_in_batch"]; s.ID != "a" || s.FirstOrigin != "nats.local:events#1" {
		t.Errorf("in-batch entry: %+v", s)
	}
	// The inbox's events are apart from the outbox: an outbound event may
	// carry the same id.
	if _, err := h.eng.EventStatus(storage.DefaultTenant, "a"); err == nil {
		t.Error("an inbox event is visible as an outbound event")
	}
	// Pull them, ack them; acked ones are not pulled again.
	msgs, err := h.eng.Pull(ctx, "pay", 10, 0, time.Minute)
	if err != nil || len(msgs) != 3 {
		t.Fatalf("pull: %d %v", len(msgs), err)
	}
	if again, _ := h.eng.Pull(ctx, "pay", 10, 0, time.Minute); len(again) != 0 {
		t.Fatalf("leased messages pulled again: %d", len(again))
	}
	if res, err := h.eng.Ack(ctx, "pay", engine.Acks{IDs: []string{"a", "b"}}); err != nil || res.Acked != 2 {
		t.Fatalf("ack: %+v %v", res, err)
	}
	h.clock.Advance(2 * time.Minute) // the lease of c ran out
	msgs, _ = h.eng.Pull(ctx, "pay", 10, 0, time.Minute)
	if len(msgs) != 1 || msgs[0].Event.ID != "c" {
		t.Fatalf("after the lease: %v", msgs)
	}
	// Past the ttl, ids are forgotten and cleaned up.
	h.clock.Advance(2 * time.Hour)
	if _, err := h.eng.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if skips, _ := h.eng.Skips("pay", time.Time{}, 10); len(skips) != 0 {
		t.Errorf("audit kept past the ttl: %d", len(skips))
	}
}

// A long poll of an empty inbox returns the event received while it
// waits, at once rather than at its timeout.
func TestPullLongPollWakesOnReceive(t *testing.T) {
	h := newHarness(t, pullInbox, false)
	ctx := context.Background()
	got := make(chan int, 1)
	start := time.Now()
	go func() {
		msgs, _ := h.eng.Pull(ctx, "pay", 10, 5*time.Second, time.Minute)
		got <- len(msgs)
	}()
	time.Sleep(50 * time.Millisecond)
	if _, err := h.eng.Receive(ctx, "pay", inbound("x")); err != nil {
		t.Fatal(err)
	}
	if n := <-got; n != 1 || time.Since(start) > 2*time.Second {
		t.Fatalf("long poll got %d after %v", n, time.Since(start))
	}
}

// A claim's consumer or id with a NUL (the separator of a claim's key) is
// refused: it would be listed as another consumer's claim. So is one too
// long for a key in the data file, on every claim route: it was a 503
// storage_unavailable that told the client to retry.
func TestClaimRefusesUnusableNames(t *testing.T) {
	h := newHarness(t, pullInbox, true)
	ctx := context.Background()
	for _, req := range []engine.ClaimRequest{
		{Tenant: "default", Consumer: "payments\x00x", ID: "pay-1"},
		{Tenant: "default", Consumer: "payments", ID: "pay\x00-1"},
		{Tenant: "default", Consumer: strings.Repeat("c", 40000), ID: "pay-1"},
		{Tenant: "default", Consumer: "payments", ID: strings.Repeat("i", 40000)},
		{Tenant: "default", Consumer: strings.Repeat("c", 257), ID: "pay-1"},
		{Tenant: "default", Consumer: "payments", ID: strings.Repeat("i", 1025)},
	} {
		name := fmt.Sprintf("%.20q (%d bytes) %.20q (%d bytes)", req.Consumer, len(req.Consumer), req.ID, len(req.ID))
		if _, _, err := h.eng.Claim(ctx, req); switchyard.ErrorCode(err) != switchyard.EINVALIDREQUEST {
			t.Errorf("claim %s: %v, want invalid", name, err)
		}
		if _, err := h.eng.Complete(ctx, req.Tenant, req.Consumer, req.ID, "t", nil); switchyard.ErrorCode(err) != switchyard.EINVALIDREQUEST {
			t.Errorf("complete %s: %v, want invalid", name, err)
		}
		if err := h.eng.Release(ctx, req.Tenant, req.Consumer, req.ID, "t"); switchyard.ErrorCode(err) != switchyard.EINVALIDREQUEST {
			t.Errorf("release %s: %v, want invalid", name, err)
		}
	}
	if _, ok, err := h.eng.Claim(ctx, engine.ClaimRequest{Tenant: "default", Consumer: strings.Repeat("c", 256), ID: strings.Repeat("i", 1024)}); err != nil || !ok {
		t.Errorf("a claim at the limits: %v %v", ok, err)
	}
}

// 100 concurrent claims of one id: exactly one lease; lease expiry lets
// another claim it; complete stores the result every later claim gets.
func TestClaims(t *testing.T) {
	h := newHarness(t, pullInbox, true)
	ctx := context.Background()
	req := engine.ClaimRequest{Tenant: "default", Consumer: "mailer", ID: "evt-1", Lease: 30 * time.Second}
	var created, busy int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, ok, err := h.eng.Claim(ctx, req)
			mu.Lock()
			defer mu.Unlock()
			var coded *switchyard.Error
			switch {
			case err == nil && ok:
				created++
			case errors.As(err, &coded) && coded.Code == switchyard.EINPROGRESS && coded.RetryAfter > 0:
				busy++
			default:
				t.Errorf("claim: %v", err)
			}
		}()
	}
	wg.Wait()
	if created != 1 || busy != 99 {
		t.Fatalf("created %d, busy %d", created, busy)
	}
	h.clock.Advance(31 * time.Second)
	held, ok, err := h.eng.Claim(ctx, req)
	if err != nil || !ok {
		t.Fatalf("reclaim after lease expiry: %v %v", ok, err)
	}
	if _, err := h.eng.Complete(ctx, "default", "mailer", "evt-1", held.Token(), json.RawMessage(`{"sent":true}`)); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Hour)
	c, ok, err := h.eng.Claim(ctx, req)
	if err != nil || ok || c.State != storage.ClaimCompleted || string(c.Result) != `{"sent":true}` {
		t.Fatalf("after complete: %+v %v %v", c, ok, err)
	}
	// Scoped by tenant and consumer.
	if _, ok, _ := h.eng.Claim(ctx, engine.ClaimRequest{Tenant: "other", Consumer: "mailer", ID: "evt-1"}); !ok {
		t.Error("another tenant's claim of the same id was refused")
	}
	// Release lets a redelivery run the effect again.
	r2 := engine.ClaimRequest{Tenant: "default", Consumer: "mailer", ID: "evt-2"}
	c2, _, _ := h.eng.Claim(ctx, r2)
	if err := h.eng.Release(ctx, "default", "mailer", "evt-2", c2.Token()); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := h.eng.Claim(ctx, r2); !ok {
		t.Error("released id could not be claimed again")
	}
	// At most once: completed at once, a redelivery is skipped.
	r3 := engine.ClaimRequest{Tenant: "default", Consumer: "mailer", ID: "evt-3", Mode: storage.ClaimAtMostOnce}
	if c, ok, _ := h.eng.Claim(ctx, r3); !ok || c.State != storage.ClaimCompleted {
		t.Fatalf("at most once: %+v %v", c, ok)
	}
	if _, ok, _ := h.eng.Claim(ctx, r3); ok {
		t.Error("at-most-once id claimed twice")
	}
}

// A message without an id, or with one too long to keep: stored under its
// derived id by default, dropped (and audited, each with its reason) with
// missing_id = "reject".
func TestReceiveMissingID(t *testing.T) {
	for _, c := range []struct {
		policy       string
		stored, skip int
	}{{"", 1, 0}, {`missing_id = "reject"`, 0, 1}} {
		h := newHarness(t, `
inbox "pay" {
  from    = "nats.local"
  subject = "t.pay"
  `+c.policy+`
}
`, true)
		// Without an id, and with one too long to keep (DecodeInbound
		// derives an id for both): each dropped for its own reason.
		msgs := inbound("sha256-abc", "sha256-def")
		msgs[0].IDDerived = true
		msgs[1].IDDerived, msgs[1].IDTooLong = true, true
		res, err := h.eng.Receive(context.Background(), "pay", msgs)
		if err != nil || res.Stored != 2*c.stored || res.Skipped != 2*c.skip {
			t.Fatalf("%q: %+v %v", c.policy, res, err)
		}
		if c.skip > 0 {
			skips, _ := h.eng.Skips("pay", time.Time{}, 10)
			reasons := map[string]storage.SkipReason{}
			for _, s := range skips {
				reasons[s.ID] = s.Reason
			}
			if len(skips) != 2 || reasons["sha256-abc"] != storage.SkipNoID || reasons["sha256-def"] != storage.SkipIDTooLong {
				t.Fatalf("audit: %+v", skips)
			}
		}
	}
}

// claimed is a harness on a fake clock whose mailer consumer claimed
// evt-1 with a 30 s lease: the request, and the claim it took.
func claimed(t *testing.T) (*harness, engine.ClaimRequest, *storage.Claim) {
	t.Helper()
	h := newHarness(t, pullInbox, true)
	req := engine.ClaimRequest{Tenant: "default", Consumer: "mailer", ID: "evt-1", Lease: 30 * time.Second}
	a, _, err := h.eng.Claim(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return h, req, a
}

// A holder whose lease ran out, its id claimed again since, can neither
// release nor complete it: its token is not the claim's (ECONFLICT), so
// the new holder's lease holds (a third worker still waits) and its
// result is the one kept; without a token neither is done. Before, the
// stale release deleted the new holder's claim and a third worker got the
// id while that lease held, and the stale complete stored its result over
// the new holder's, which then got it back without an error (a review).
func TestStaleHolderCannotActOnTheNextClaim(t *testing.T) {
	h, req, a := claimed(t)
	ctx := context.Background()
	h.clock.Advance(31 * time.Second) // A is slow: its lease ends
	b, ok, err := h.eng.Claim(ctx, req)
	if err != nil || !ok {
		t.Fatalf("B: %v %v", ok, err)
	}
	if a.Token() == b.Token() {
		t.Fatal("two claims of one id have one token")
	}
	h.clock.Advance(time.Second)
	if err := h.eng.Release(ctx, "default", "mailer", "evt-1", a.Token()); switchyard.ErrorCode(err) != switchyard.ECONFLICT {
		t.Errorf("A's release after B claimed: %v", err)
	}
	if _, err := h.eng.Complete(ctx, "default", "mailer", "evt-1", a.Token(), json.RawMessage(`{"by":"A"}`)); switchyard.ErrorCode(err) != switchyard.ECONFLICT {
		t.Errorf("A's complete after B claimed: %v", err)
	}
	for what, err := range map[string]error{
		"release": h.eng.Release(ctx, "default", "mailer", "evt-1", ""),
		"complete": func() error {
			_, err := h.eng.Complete(ctx, "default", "mailer", "evt-1", "", nil)
			return err
		}(),
	} {
		if switchyard.ErrorCode(err) != switchyard.EINVALIDREQUEST {
			t.Errorf("%s without a token: %v", what, err)
		}
	}
	if _, ok, err := h.eng.Claim(ctx, req); ok || switchyard.ErrorCode(err) != switchyard.EINPROGRESS {
		t.Fatalf("C claimed the id while B's lease held: %v %v", ok, err)
	}
	c, err := h.eng.Complete(ctx, "default", "mailer", "evt-1", b.Token(), json.RawMessage(`{"by":"B"}`))
	if err != nil || string(c.Result) != `{"by":"B"}` {
		t.Fatalf("B's complete: %+v %v", c, err)
	}
	if c, err := h.eng.Complete(ctx, "default", "mailer", "evt-1", b.Token(), json.RawMessage(`{"by":"B again"}`)); err != nil || string(c.Result) != `{"by":"B"}` {
		t.Errorf("B's complete again: %+v %v", c, err)
	}
	// An id no longer claimed is released already, token or not.
	if err := h.eng.Release(ctx, "default", "mailer", "never-claimed", ""); err != nil {
		t.Errorf("release of an id not claimed, no token: %v", err)
	}
}

// A token that was never this id's (a typo, another id's, one older than
// the claim) is refused as such, not as the token of an earlier claim
// whose lease ran out: the error names what happened, and the holder's own
// token still works. A stale holder's token is told the lease ran out. (An
// adversarial trial's older token of another claim was called stale.)
func TestWrongTokenIsNotCalledStale(t *testing.T) {
	h, req, a := claimed(t)
	ctx := context.Background()
	later := strconv.FormatInt(a.ClaimedAt.UnixNano()+1, 36)
	earlier := strconv.FormatInt(a.ClaimedAt.UnixNano()-1, 36)
	for _, token := range []string{"wrong", later, "-1", earlier} {
		_, err := h.eng.Complete(ctx, "default", "mailer", "evt-1", token, nil)
		if switchyard.ErrorCode(err) != switchyard.ECONFLICT || !strings.Contains(err.Error(), "is not the token of") {
			t.Errorf("complete with token %q: %v", token, err)
		}
	}
	h.clock.Advance(31 * time.Second)
	b, _, err := h.eng.Claim(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.eng.Release(ctx, "default", "mailer", "evt-1", a.Token()); !strings.Contains(fmt.Sprint(err), "claimed again after the lease of this token ran out") {
		t.Errorf("the stale holder's release: %v", err)
	}
	if err := h.eng.Release(ctx, "default", "mailer", "evt-1", earlier); !strings.Contains(fmt.Sprint(err), "is not the token of") {
		t.Errorf("a token older than both claims, never this id's: %v", err)
	}
	if _, err := h.eng.Complete(ctx, "default", "mailer", "evt-1", b.Token(), nil); err != nil {
		t.Errorf("the holder's complete: %v", err)
	}
}

// A lease longer than the consumer's claim TTL keeps the claim as long as
// it holds: before, the claim expired under the lease and a second worker
// got the id (a review).
func TestLeaseOutlivesClaimTTL(t *testing.T) {
	h := newHarness(t, pullInbox, true)
	ctx := context.Background()
	req := engine.ClaimRequest{Tenant: "default", Consumer: "pay", ID: "evt-1", Lease: 2 * time.Hour}
	if _, ok, err := h.eng.Claim(ctx, req); err != nil || !ok {
		t.Fatalf("first: %v %v", ok, err)
	}
	h.clock.Advance(61 * time.Minute) // past the inbox's ttl (1h), within the lease
	if _, ok, err := h.eng.Claim(ctx, req); ok || switchyard.ErrorCode(err) != switchyard.EINPROGRESS {
		t.Fatalf("a second worker's claim within the lease: %v %v", ok, err)
	}
	h.clock.Advance(time.Hour)
	if _, ok, err := h.eng.Claim(ctx, req); err != nil || !ok {
		t.Fatalf("a claim once the lease ran out: %v %v", ok, err)
	}
}

// A pull needs a lease that holds (0 would hand the same events to every
// puller), and an ack works only on a pull inbox: on one that delivers,
// it marked delivered what was never POSTed (a review). Both are refused
// as invalid requests, and the events stay pending.
func TestPullAndAckRefuseWhatWouldHandOutOrLose(t *testing.T) {
	h := newHarness(t, pullInbox+`
inbox "push" {
  from    = "nats.local"
  subject = "t.push"
  deliver { url = "http://127.0.0.1:1/hook" }
}
`, false, busySink{name: config.InboxSinkName("push"), after: time.Hour}) // the service answers 429
	ctx := context.Background()
	for name, ids := range map[string][]string{"pay": {"a"}, "push": {"b"}} {
		if _, err := h.eng.Receive(ctx, name, inbound(ids...)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.eng.Pull(ctx, "pay", 10, 0, 0); switchyard.ErrorCode(err) != switchyard.EINVALIDREQUEST {
		t.Errorf("a pull with lease 0: %v, want an invalid request", err)
	}
	if res, err := h.eng.Ack(ctx, "push", engine.Acks{IDs: []string{"b"}}); switchyard.ErrorCode(err) != switchyard.EINVALIDREQUEST || res.Acked != 0 {
		t.Errorf("an ack on a push inbox: %+v, %v; want 0 and an invalid request", res, err)
	}
	if err := h.db.View(func(tx *storage.Tx) error {
		rec, err := tx.InboxRecord(config.InboxQueueName("push"), "/bank", "b")
		if err == nil && rec.State == storage.StateDelivered {
			err = errors.New("delivered")
		}
		return err
	}); err != nil {
		t.Errorf("the push inbox's event after the refused ack: %v", err)
	}
	if msgs, err := h.eng.Pull(ctx, "pay", 10, 0, time.Minute); err != nil || len(msgs) != 1 {
		t.Errorf("a pull with a lease after the refused one: %d events, %v; want 1", len(msgs), err)
	}
}

// viewGate holds the next View's read, once armed, after its snapshot is
// taken and before it reads: what commits meanwhile is not in it.
type viewGate struct {
	engine.Store
	armed   atomic.Bool
	reading chan struct{}
	gate    chan struct{}
}

func (s *viewGate) View(fn func(*storage.Tx) error) error {
	return s.Store.View(func(tx *storage.Tx) error {
		if s.armed.CompareAndSwap(true, false) {
			close(s.reading)
			<-s.gate
		}
		return fn(tx)
	})
}

// A pull whose snapshot was taken before an ack committed does not hand
// out the event acked, though the ack let go of its lease before the pull
// read it (a review: a duplicate hand-over inside the dedup window).
func TestPullDoesNotHandOutWhatWasJustAcked(t *testing.T) {
	vg := &viewGate{reading: make(chan struct{}), gate: make(chan struct{})}
	h := newHarness(t, pullInbox, false, storeWrap(func(s engine.Store) engine.Store { vg.Store = s; return vg }))
	ctx := context.Background()
	if _, err := h.eng.Receive(ctx, "pay", inbound("m")); err != nil {
		t.Fatal(err)
	}
	if msgs, err := h.eng.Pull(ctx, "pay", 10, 0, time.Minute); err != nil || len(msgs) != 1 {
		t.Fatalf("first pull: %d, %v", len(msgs), err)
	}
	vg.armed.Store(true)
	got := make(chan int, 1)
	go func() {
		msgs, _ := h.eng.Pull(ctx, "pay", 10, 0, time.Minute)
		got <- len(msgs)
	}()
	<-vg.reading // the second pull's snapshot holds m pending, leased
	if res, err := h.eng.Ack(ctx, "pay", engine.Acks{IDs: []string{"m"}}); err != nil || res.Acked != 1 {
		t.Fatalf("ack: %+v, %v", res, err)
	}
	close(vg.gate)
	select {
	case n := <-got:
		if n != 0 {
			t.Fatalf("the pull handed out %d events; m was acked before it read", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pull did not return")
	}
}

// fromSources is one inbound event per source, every one with the id id.
func fromSources(id string, sources ...string) []switchyard.Inbound {
	out := inbound(slices.Repeat([]string{id}, len(sources))...)
	for i, s := range sources {
		out[i].Event.Source = s
	}
	return out
}

// Two producers that count their ids alike both reach the inbox
// (CloudEvents names an event by its source and id): neither is taken for
// a redelivery of the other, in one batch or in two, while a redelivery
// of either is still dropped. A pull hands all out; an ack by the shared
// id acks none of them and says so; their ack ids ack each.
func TestInboxTellsSourcesApart(t *testing.T) {
	h := newHarness(t, pullInbox, true)
	ctx := context.Background()
	for _, c := range []struct {
		sources         []string
		stored, skipped int
	}{
		{[]string{"/billing", "/shipping"}, 2, 0},
		{[]string{"/returns"}, 1, 0},
		{[]string{"/billing", "/shipping", "/returns"}, 0, 3},
	} {
		res, err := h.eng.Receive(ctx, "pay", fromSources("1", c.sources...))
		if err != nil || res.Stored != c.stored || res.Skipped != c.skipped {
			t.Fatalf("receive from %v: %+v, %v; want %d stored, %d dropped", c.sources, res, err, c.stored, c.skipped)
		}
	}
	msgs, err := h.eng.Pull(ctx, "pay", 10, 0, time.Minute)
	if err != nil || len(msgs) != 3 {
		t.Fatalf("pull: %d, %v; want the 3 events", len(msgs), err)
	}
	res, err := h.eng.Ack(ctx, "pay", engine.Acks{IDs: []string{"1"}})
	if err != nil || res.Acked != 0 || !slices.Equal(res.Ambiguous, []string{"1"}) {
		t.Fatalf("an ack by the shared id: %+v, %v; want none acked, the id ambiguous", res, err)
	}
	refs := []string{storage.InboxRef(msgs[0]), storage.InboxRef(msgs[1])}
	if res, err := h.eng.Ack(ctx, "pay", engine.Acks{AckIDs: refs}); err != nil || res.Acked != 2 {
		t.Fatalf("an ack by two ack ids: %+v, %v; want 2 acked", res, err)
	}
	// One event of the id is pending now: the id names it.
	if res, err := h.eng.Ack(ctx, "pay", engine.Acks{IDs: []string{"1"}}); err != nil || res.Acked != 1 || len(res.Ambiguous) != 0 {
		t.Fatalf("an ack by the id of the last one: %+v, %v; want it acked", res, err)
	}
	h.clock.Advance(2 * time.Minute)
	if msgs, err := h.eng.Pull(ctx, "pay", 10, 0, time.Minute); err != nil || len(msgs) != 0 {
		t.Fatalf("after every ack, a pull past the leases: %d, %v; want none", len(msgs), err)
	}
}

// An event whose source is longer than a bbolt key (40,000 bytes) is
// stored whole, with the event beside it in its batch, and its redelivery
// is dropped: it failed its whole batch ("key too large"), and the broker
// gave the batch again for ever.
func TestInboxStoresAnEventWithAHugeSource(t *testing.T) {
	h := newHarness(t, pullInbox, true)
	ctx := context.Background()
	huge := "/" + strings.Repeat("x", 40_000)
	if res, err := h.eng.Receive(ctx, "pay", fromSources("1", huge, "/ok")); err != nil || res.Stored != 2 {
		t.Fatalf("receive: %+v, %v; want both stored", res, err)
	}
	if res, err := h.eng.Receive(ctx, "pay", fromSources("1", huge)); err != nil || res.Skipped != 1 {
		t.Fatalf("its redelivery: %+v, %v; want it dropped", res, err)
	}
	msgs, err := h.eng.Pull(ctx, "pay", 10, 0, time.Minute)
	if err != nil || len(msgs) != 2 || msgs[0].Event.Source != huge && msgs[1].Event.Source != huge {
		t.Fatalf("pull: %d, %v; want both, the huge source whole", len(msgs), err)
	}
}

// refusingSink refuses every message for good, as a service answering
// 400: its events go to the DLQ at once.
type refusingSink struct{ name string }

func (s refusingSink) Name() string { return s.name }
func (s refusingSink) Publish(_ context.Context, msgs []*switchyard.Message) []switchyard.Result {
	r := make([]switchyard.Result, len(msgs))
	for i := range r {
		r[i] = switchyard.Result{Err: switchyard.Permanentf("400 Bad Request")}
	}
	return r
}
func (refusingSink) Close(context.Context) error { return nil }

// deadFromSources is a harness whose push inbox's service refuses
// everything, holding one dead letter with the id "1" from each source,
// and the inbox's queue.
func deadFromSources(t *testing.T, sources ...string) (*harness, string) {
	t.Helper()
	h := newHarness(t, `
inbox "push" {
  from    = "nats.local"
  subject = "t.push"
  deliver { url = "http://127.0.0.1:1/hook" }
}
`, true, refusingSink{name: config.InboxSinkName("push")})
	q := config.InboxQueueName("push")
	if res, err := h.eng.Receive(context.Background(), "push", fromSources("1", sources...)); err != nil || res.Stored != len(sources) {
		t.Fatalf("receive: %+v, %v", res, err)
	}
	h.pollAll(q)
	return h, q
}

// An inbox's dead letters that share an id are told apart by their
// sources: a lookup by the id alone is a conflict that names both, a
// source picks one, and a bulk action by the id acts on the source given
// only. Once one is left, the id alone names it again.
func TestDLQTellsAnInboxsSourcesApart(t *testing.T) {
	h, q := deadFromSources(t, "/billing", "/shipping")
	ctx := context.Background()
	_, err := h.eng.DLQGet(engine.DLQRef{Queue: q, ID: "1"})
	if code(err) != switchyard.ECONFLICT || !strings.Contains(err.Error(), `"/billing"`) || !strings.Contains(err.Error(), `"/shipping"`) {
		t.Fatalf("a lookup by the shared id: %v; want a conflict naming both sources", err)
	}
	it, err := h.eng.DLQGet(engine.DLQRef{Queue: q, ID: "1", Source: "/billing"})
	if err != nil || it.Record.Event.Source != "/billing" || it.Record.State != storage.StateDLQ {
		t.Fatalf("a lookup with a source: %+v, %v", it, err)
	}
	res, err := h.eng.DLQDeleteMany(ctx, engine.DLQFilter{Type: q, IDs: []string{"1"}, Source: "/shipping"})
	if err != nil || res.Done != 1 {
		t.Fatalf("a bulk delete of the id from one source: %+v, %v; want 1 done", res, err)
	}
	it, err = h.eng.DLQGet(engine.DLQRef{Queue: q, ID: "1"})
	if err != nil || it.Record.Event.Source != "/billing" {
		t.Fatalf("the id alone, once one is left: %+v, %v; want the /billing one", it, err)
	}
	if _, err := h.eng.DLQGet(engine.DLQRef{Queue: q, ID: "1", Source: "/shipping"}); code(err) != switchyard.ENOTFOUND {
		t.Fatalf("the deleted one: %v; want not found", err)
	}
}

// An ack by event id marks delivered only what a pull handed out: sent
// again after another source's event with the same id came in, it acked
// that one, which no pull had handed out (a review); now the second event
// is still handed out.
func TestAckByIDTakesOnlyWhatWasHandedOut(t *testing.T) {
	h := newHarness(t, pullInbox, true)
	ctx := context.Background()
	if _, err := h.eng.Receive(ctx, "pay", fromSources("1", "/billing")); err != nil {
		t.Fatal(err)
	}
	if msgs, err := h.eng.Pull(ctx, "pay", 10, 0, time.Minute); err != nil || len(msgs) != 1 {
		t.Fatalf("pull: %d, %v", len(msgs), err)
	}
	if res, err := h.eng.Ack(ctx, "pay", engine.Acks{IDs: []string{"1"}}); err != nil || res.Acked != 1 {
		t.Fatalf("ack: %+v, %v", res, err)
	}
	if _, err := h.eng.Receive(ctx, "pay", fromSources("1", "/shipping")); err != nil {
		t.Fatal(err)
	}
	if res, err := h.eng.Ack(ctx, "pay", engine.Acks{IDs: []string{"1"}}); err != nil || res.Acked != 0 {
		t.Fatalf("the ack sent again: %+v, %v; want nothing acked", res, err)
	}
	msgs, err := h.eng.Pull(ctx, "pay", 10, 0, time.Minute)
	if err != nil || len(msgs) != 1 || msgs[0].Event.Source != "/shipping" {
		t.Fatalf("the next pull: %d, %v; want the /shipping event", len(msgs), err)
	}
}

// A bulk action filtered by source alone, or by type and source, acts on
// that source's dead letters only (it acted on every dead letter the
// index walk met: a review).
func TestDLQBulkBySourceActsOnThatSourceOnly(t *testing.T) {
	h, q := deadFromSources(t, "/billing", "/shipping", "/returns")
	ctx := context.Background()
	for _, f := range []engine.DLQFilter{{Source: "/billing"}, {Type: q, Source: "/shipping"}} {
		res, err := h.eng.DLQDeleteMany(ctx, f)
		if err != nil || res.Matched != 1 || res.Done != 1 {
			t.Fatalf("a bulk delete filtered by %+v: %+v, %v; want 1 matched and done", f, res, err)
		}
	}
	it, err := h.eng.DLQGet(engine.DLQRef{Queue: q, ID: "1"})
	if err != nil || it.Record.Event.Source != "/returns" {
		t.Fatalf("what is left: %+v, %v; want the /returns dead letter", it, err)
	}
	// By id and a source the id has no dead letter of: skipped as filtered
	// (a type or since that does not match says the same), not "not found".
	res, err := h.eng.DLQDeleteMany(ctx, engine.DLQFilter{Type: q, IDs: []string{"1", "2"}, Source: "/billing"})
	if err != nil || len(res.NotFound) != 1 || res.NotFound[0] != "2" || len(res.Skipped) != 1 || res.Skipped[0].Code != engine.DLQSkipExcluded ||
		res.Skipped[0].Reason != "its source is /returns, not /billing" {
		t.Fatalf("by ids with a source: %+v, %v; want id 1 skipped (its source), id 2 not found", res, err)
	}
}

// An inbox's event asked for in the DLQ once it left it is "not in the DLQ
// of" its inbox, with its state, and no pointer to GET /v1/events/{id},
// which finds only outbound events (an inbox trial followed it to a 404).
func TestAnInboxEventOutOfTheDLQIsNotSentToTheEventsRoute(t *testing.T) {
	h, q := deadFromSources(t, "/billing")
	ctx := context.Background()
	if res, err := h.eng.DLQResolveMany(ctx, engine.DLQFilter{Type: q, IDs: []string{"1"}}); err != nil || res.Done != 1 {
		t.Fatalf("resolve: %+v, %v", res, err)
	}
	if _, err := h.eng.DLQRetryMany(ctx, engine.DLQFilter{Type: q, IDs: []string{"1"}}); err != nil {
		t.Fatal(err)
	}
	_, err := h.eng.DLQGet(engine.DLQRef{Queue: q, ID: "1"})
	if err == nil || !strings.Contains(err.Error(), "not in the DLQ of "+q) || strings.Contains(err.Error(), "/v1/events") {
		t.Fatalf("the retried inbox event: %v", err)
	}
}

// An inbox whose batch the engine refused (a failing disk, a full budget)
// is said not to take batches (InboxRefusal) for a minute after the last
// refusal, though its broker answers, and no longer once a batch is taken
// or the refusal is a minute old (a batch that never comes again: purged,
// taken by another router).
func TestInboxRefusalIsKeptAMinute(t *testing.T) {
	failing := &failingStore{}
	failing.until.Store(math.MaxInt64)
	h := newHarness(t, pullInbox, true, storeWrap(func(s engine.Store) engine.Store { failing.Store = s; return failing }))
	ctx := context.Background()
	if err := h.eng.InboxRefusal("pay"); err != nil {
		t.Fatalf("before any batch: %v", err)
	}
	if _, err := h.eng.Receive(ctx, "pay", inbound("a")); err == nil {
		t.Fatal("a batch the disk refused was taken")
	}
	err := h.eng.InboxRefusal("pay")
	if err == nil || !strings.Contains(err.Error(), `inbox "pay": the last batch was not taken`) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("after a refused batch: %v", err)
	}
	h.clock.Advance(time.Minute - time.Second)
	if h.eng.InboxRefusal("pay") == nil {
		t.Fatal("the refusal forgotten within a minute")
	}
	h.clock.Advance(time.Second)
	if err := h.eng.InboxRefusal("pay"); err != nil {
		t.Fatalf("a minute after the refusal: %v", err)
	}
	if _, err := h.eng.Receive(ctx, "pay", inbound("a")); err == nil {
		t.Fatal("a batch the disk refused was taken")
	}
	failing.until.Store(0)
	if _, err := h.eng.Receive(ctx, "pay", inbound("a")); err != nil {
		t.Fatal(err)
	}
	if err := h.eng.InboxRefusal("pay"); err != nil {
		t.Fatalf("after a batch was taken: %v", err)
	}
}

// Receive keeps, with each batch it takes, where it takes each Kafka
// partition's reading to (the offset after its last message there, and
// the topic's id), for InboxRead: a batch read again, its messages
// dropped as redeliveries, does not set it back; a topic of another id
// (made again, its offsets begun again) does; nothing is kept of a
// partition no batch came from.
func TestReceiveKeepsWhereEachPartitionGotTo(t *testing.T) {
	h := newHarness(t, pullInbox, true)
	old, made := [16]byte{1}, [16]byte{2}
	batch := func(id [16]byte, partition int32, from, n int) []switchyard.Inbound {
		msgs := make([]switchyard.Inbound, n)
		for i := range msgs {
			off := int64(from + i)
			msgs[i] = inbound(fmt.Sprintf("%x-%d-%d", id[0], partition, off))[0]
			msgs[i].Read = switchyard.Read{Topic: "payments", Partition: partition, Next: off + 1, ID: id}
		}
		return msgs
	}
	want := func(partition int32, offset int64, id [16]byte) {
		t.Helper()
		r, ok, err := h.eng.InboxRead("pay", "payments", partition)
		if err != nil || !ok || r.Next != offset || r.ID != id || r.Topic != "payments" || r.Partition != partition {
			t.Fatalf("partition %d: %+v, %v, %v; want offset %d of topic id %x", partition, r, ok, err, offset, id[0])
		}
	}
	ctx := context.Background()
	if _, err := h.eng.Receive(ctx, "pay", append(batch(old, 0, 0, 5), batch(old, 1, 10, 3)...)); err != nil {
		t.Fatal(err)
	}
	want(0, 5, old)
	want(1, 13, old)
	res, err := h.eng.Receive(ctx, "pay", batch(old, 0, 0, 3))
	if err != nil || res.Skipped != 3 {
		t.Fatalf("the batch read again: %+v, %v", res, err)
	}
	want(0, 5, old)
	if _, err := h.eng.Receive(ctx, "pay", batch(made, 0, 0, 1)); err != nil {
		t.Fatal(err)
	}
	want(0, 1, made)
	if _, ok, err := h.eng.InboxRead("pay", "payments", 2); ok || err != nil {
		t.Fatalf("partition 2, which no batch came from: %v, %v", ok, err)
	}
}

// A pull inbox drained stays in the stats (and its metrics), at 0: it has
// no loop, and a skip of loopless types with nothing stored made it vanish
// at each drain (a review).
func TestADrainedPullInboxStaysInTheStats(t *testing.T) {
	h := newHarness(t, pullInbox, false)
	ctx := context.Background()
	if _, err := h.eng.Receive(ctx, "pay", inbound("m")); err != nil {
		t.Fatal(err)
	}
	msgs, err := h.eng.Pull(ctx, "pay", 10, 0, time.Minute)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("pull: %d, %v", len(msgs), err)
	}
	if res, err := h.eng.Ack(ctx, "pay", engine.Acks{IDs: []string{"m"}}); err != nil || res.Acked != 1 {
		t.Fatalf("ack: %+v, %v", res, err)
	}
	stats, err := h.eng.Stats()
	if err != nil || !slices.ContainsFunc(stats, func(s engine.TypeStats) bool { return s.Type == "inbox:pay" && s.Pending == 0 }) {
		t.Fatalf("stats after the drain: %+v, %v; want inbox:pay at 0", stats, err)
	}
}
