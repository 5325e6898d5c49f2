package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// Health checks run side by side, each within healthWait: a check that
// never answers (one that ignores its context, as a client waiting on a
// silent broker may) is reported as not answering, and holds up neither
// the answer nor the other checks' results.
func TestCheckHealthDoesNotWaitForAStuckCheck(t *testing.T) {
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	refused := errors.New("connection refused")
	checks := []healthCheck{
		{"ok", func(context.Context) error { return nil }},
		{"refused", func(context.Context) error { return refused }},
		{"stuck", func(context.Context) error { <-stuck; return nil }},
		{"stuck too", func(context.Context) error { <-stuck; return nil }},
	}
	done := make(chan map[string]error, 1)
	h := newHealth(healthWait, hclog.NewNullLogger())
	go func() { done <- h.check(context.Background(), checks) }()
	var res map[string]error
	select {
	case res = <-done:
	case <-time.After(10 * healthWait):
		t.Fatal("check waits for a check that never answers")
	}
	if res["ok"] != nil || !errors.Is(res["refused"], refused) {
		t.Fatalf("the checks that answered: %v", res)
	}
	for _, name := range []string{"stuck", "stuck too"} {
		if err := res[name]; err == nil || !strings.Contains(err.Error(), "no answer within") {
			t.Fatalf("%s: %v, want no answer", name, err)
		}
	}
}

// A check that never ends is not started again while it runs: later
// probes wait on it (each within healthWait) rather than leave one more
// goroutine behind each, and callers at the same time share one answer.
// Once it ends, the next probe runs it anew.
func TestAStuckCheckRunsOnce(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	check := healthCheck{"stuck-once", func(context.Context) error {
		if calls.Add(1) == 1 {
			<-release
		}
		return nil
	}}
	h := newHealth(healthWait, hclog.NewNullLogger())
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := h.check(context.Background(), []healthCheck{check})[check.name]; err == nil {
				t.Error("a check that has not ended answered healthy")
			}
		})
	}
	wg.Wait()
	if err := h.check(context.Background(), []healthCheck{check})[check.name]; err == nil {
		t.Error("a check that has not ended answered healthy")
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the stuck check was started %d times", n)
	}
	close(release)
	testkit.Eventually(t, "the check to run anew once it ended", 5*time.Second, func() bool {
		return h.check(context.Background(), []healthCheck{check})[check.name] == nil && calls.Load() == 2
	})
}

// A check that fails at its own deadline (a request to a dark broker)
// gives its reason, not "no answer": its deadline ends before the
// caller's. Before, it began after the caller's and ended with it, and
// most answers were lost to the race. (The wait is 500 ms, its tenth the
// slack: at 100 ms, 10 ms was missed once on a CI box under load.)
func TestACheckFailingAtItsDeadlineGivesItsReason(t *testing.T) {
	h := newHealth(500*time.Millisecond, hclog.NewNullLogger())
	dark := healthCheck{"dark", func(ctx context.Context) error {
		<-ctx.Done()
		return fmt.Errorf("no broker reachable: %w", ctx.Err())
	}}
	for round := range 6 {
		if err := h.check(context.Background(), []healthCheck{dark})["dark"]; err == nil || !strings.Contains(err.Error(), "no broker reachable") {
			t.Fatalf("round %d: %v, want the check's reason", round, err)
		}
	}
}

// A check stuck for stuckAfter waits is let go: the next caller starts
// another (the component may answer a new one) and a warning names it.
// One stuck for less is waited on, not started again.
func TestAStuckCheckIsLetGoAfterAWhile(t *testing.T) {
	logs := &testkit.Buffer{}
	h := newHealth(20*time.Millisecond, hclog.New(&hclog.LoggerOptions{Output: logs}))
	release := make(chan struct{})
	defer close(release)
	var calls atomic.Int32
	check := healthCheck{"sink.stuck", func(context.Context) error {
		if calls.Add(1) == 1 {
			<-release
		}
		return nil
	}}
	start := time.Now()
	for time.Since(start) < stuckAfter*h.wait-5*h.wait {
		if err := h.check(context.Background(), []healthCheck{check})[check.name]; err == nil {
			t.Fatal("a check that has not ended answered healthy")
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("started %d times within %s", n, time.Since(start))
	}
	testkit.Eventually(t, "another run once the first is let go", 5*time.Second, func() bool {
		return h.check(context.Background(), []healthCheck{check})[check.name] == nil
	})
	if n := calls.Load(); n != 2 {
		t.Fatalf("started %d times, want 2", n)
	}
	if !strings.Contains(logs.String(), "check=sink.stuck") {
		t.Fatalf("no warning naming the check: %q", logs.String())
	}
}

// A component that ignores every deadline is let go once, not once each
// stuckAfter waits: while the run let go has not ended, the new one is
// waited on, so such a component costs two goroutines, not more and more
// (a review counted one more each 30 waits).
func TestAlwaysStuckCheckIsLetGoOnce(t *testing.T) {
	h := newHealth(2*time.Millisecond, hclog.NewNullLogger())
	release := make(chan struct{})
	defer close(release)
	var calls atomic.Int32
	check := healthCheck{"sink.dark", func(context.Context) error { calls.Add(1); <-release; return nil }}
	for start := time.Now(); time.Since(start) < 10*stuckAfter*h.wait; {
		h.check(context.Background(), []healthCheck{check})
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("started %d times over 10 stuck periods, want 2 (the first and one after it was let go)", n)
	}
}
