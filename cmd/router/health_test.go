package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	go func() { done <- checkHealth(context.Background(), checks) }()
	var res map[string]error
	select {
	case res = <-done:
	case <-time.After(10 * healthWait):
		t.Fatal("checkHealth waits for a check that never answers")
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
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := checkHealth(context.Background(), []healthCheck{check})[check.name]; err == nil {
				t.Error("a check that has not ended answered healthy")
			}
		})
	}
	wg.Wait()
	if err := checkHealth(context.Background(), []healthCheck{check})[check.name]; err == nil {
		t.Error("a check that has not ended answered healthy")
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the stuck check was started %d times", n)
	}
	close(release)
	testkit.Eventually(t, "the check to run anew once it ended", 5*time.Second, func() bool {
		return checkHealth(context.Background(), []healthCheck{check})[check.name] == nil && calls.Load() == 2
	})
}
