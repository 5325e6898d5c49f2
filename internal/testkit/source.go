package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard"
)

// SourceRun is a source's Run in a goroutine of its own, until Stop.
type SourceRun struct {
	cancel context.CancelFunc
	done   chan error
}

// RunSource runs s, handing each batch it fetches to receive, until Stop.
func RunSource(s switchyard.Source, receive func(context.Context, []switchyard.Inbound) error) *SourceRun {
	ctx, cancel := context.WithCancel(context.Background())
	r := &SourceRun{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.Run(ctx, receive) }()
	return r
}

// Stop ends the run and fails the test if Run failed or did not return
// within 10 s.
func (r *SourceRun) Stop(t testing.TB) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
}

// Cancel ends the run without waiting for it (a test that stops a source
// whose Run may fail, or in a defer).
func (r *SourceRun) Cancel() { r.cancel() }

// Wait waits for Run to return, and returns its error.
func (r *SourceRun) Wait() error { return <-r.done }
