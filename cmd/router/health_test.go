package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
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
