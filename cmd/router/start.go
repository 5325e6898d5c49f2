package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/switchyard-router/switchyard/internal/every"
)

// startReportEvery is how often a start that is still going says what it
// is waiting for.
const startReportEvery = 5 * time.Second

// startProgress tracks the steps of a starting router that are under way,
// so that a slow start explains itself: every startReportEvery in the log,
// and in the error when the start is cancelled. Without it a cancellation
// surfaces as the error of whichever step it interrupted ("plugin X:
// _initialize was cancelled"), which blames the step instead of the wait.
// Steps may run concurrently (plugins compile in parallel).
type startProgress struct {
	began time.Time
	log   hclog.Logger
	stop  func() // ends the reports and the watch of ctx

	mu       sync.Mutex
	steps    map[string]time.Time // under way, with when each began
	next     int                  // makes each key unique
	atCancel string               // what was under way when ctx ended
	noted    chan struct{}        // closed once atCancel is set
}

// newStartProgress begins timing a start and reporting on it until done;
// when ctx ends first it notes what was under way at that moment (the
// interrupted steps end right after, with errors of their own).
func newStartProgress(ctx context.Context, log hclog.Logger) *startProgress {
	p := &startProgress{began: time.Now(), log: log, steps: map[string]time.Time{}, noted: make(chan struct{})}
	stopWatch := context.AfterFunc(ctx, func() {
		now := p.String()
		p.mu.Lock()
		p.atCancel = now
		p.mu.Unlock()
		close(p.noted)
	})
	stopReports := every.Start(startReportEvery, func() {
		p.log.Info("still starting", "after", p.elapsed(), "waiting_for", p.String())
	})
	p.stop = func() { stopReports(); stopWatch() }
	return p
}

// step records that what is under way (a phrase such as `loading plugin
// "route"`) and returns the function that ends it.
func (p *startProgress) step(format string, args ...any) (end func()) {
	if p == nil {
		return func() {}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	key := fmt.Sprintf(format, args...) + "\x00" + fmt.Sprint(p.next)
	p.steps[key] = time.Now()
	return func() {
		p.mu.Lock()
		delete(p.steps, key)
		p.mu.Unlock()
	}
}

// String says what is under way: `loading plugin "route" (12s), ...`, the
// longest-running first, or "between steps".
func (p *startProgress) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	type running struct {
		what string
		took time.Duration
	}
	var all []running
	for key, began := range p.steps {
		what, _, _ := strings.Cut(key, "\x00")
		all = append(all, running{what, time.Since(began)})
	}
	if len(all) == 0 {
		return "between steps"
	}
	slices.SortFunc(all, func(a, b running) int { return int(b.took - a.took) })
	parts := make([]string, len(all))
	for i, r := range all {
		parts[i] = fmt.Sprintf("%s (%s)", r.what, r.took.Round(100*time.Millisecond))
	}
	return strings.Join(parts, ", ")
}

// elapsed is the time since the start began.
func (p *startProgress) elapsed() time.Duration {
	return time.Since(p.began).Round(100 * time.Millisecond)
}

// cancelled wraps the error of a start whose context ended: it names what
// the start was doing rather than what the cancellation broke.
func (p *startProgress) cancelled(cause error) error {
	select { // the context has ended: its AfterFunc runs now, if not already
	case <-p.noted:
	case <-time.After(time.Second):
	}
	p.mu.Lock()
	what := p.atCancel
	p.mu.Unlock()
	if what == "" {
		what = p.String()
	}
	return fmt.Errorf("start cancelled after %s while %s: %w", p.elapsed(), what, cause)
}

// done ends the reports.
func (p *startProgress) done() { p.stop() }

// logFileLimit says how many file descriptors the router may open. The Go
// runtime raises the soft limit to the hard one at start (Linux, Go 1.19+),
// so this is the hard limit; a low one is worth a warning, since every
// connection, JetStream block file and Kafka broker takes one.
func logFileLimit(log hclog.Logger) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return
	}
	if lim.Cur < 4096 {
		log.Warn("few file descriptors: raise LimitNOFILE (systemd) or ulimit -n", "limit", lim.Cur)
		return
	}
	log.Debug("file descriptor limit", "limit", lim.Cur)
}
