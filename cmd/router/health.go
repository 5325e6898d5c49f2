package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sync/singleflight"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/engine"
	natsplugin "github.com/switchyard-router/switchyard/plugins/nats"
)

// healthWait bounds each health check of a sink, an embedded NATS server
// or an inbox, for /readyz and the gauges switchyard_sink_up,
// switchyard_nats_server_up and switchyard_inbox_up. A broker gone silent (its
// host dark: no reset, no answer) answers neither, and a client library
// waits its own request timeouts, tens of seconds: /readyz waited for them
// (a test found it past 10 s with a silent Kafka cluster), and a readiness
// probe that times out says the router is not ready when ingest works.
const healthWait = time.Second

// healthCheck is one named check: a sink's, an embedded server's, or an
// inbox's.
type healthCheck struct {
	name    string
	healthy func(context.Context) error
}

// health runs a router's health checks, one check of a component at a
// time: those who ask while it runs (a readiness probe and a metrics
// scrape at once) share its answer, and a check that does not end (one
// ignoring its context, as a client waiting on a silent broker may) costs
// one goroutine, not one more per probe: later callers wait on it, each
// within wait. One stuck past stuckAfter waits is let go and started
// anew, with a warning: the component may answer a new request (a
// library's lost wake-up), and its gauge would read 0 for ever otherwise.
// Only once while the one let go runs: a component that ignores every
// deadline costs two goroutines, not one more each stuckAfter waits.
// Names are unique across sinks, servers and inboxes (only the first two
// hold a dot).
type health struct {
	wait   time.Duration
	log    hclog.Logger
	flight singleflight.Group

	mu      sync.Mutex
	running map[string]*time.Time // checks in flight, since when
	letGo   map[string]int        // checks let go and not yet ended, by name
}

// stuckAfter is how many waits a check may run before the next caller
// lets it go and starts another.
const stuckAfter = 30

func newHealth(wait time.Duration, log hclog.Logger) *health {
	return &health{wait: wait, log: log, running: map[string]*time.Time{}, letGo: map[string]int{}}
}

// check runs every check at once, each within the wait, and returns each
// one's error (nil: healthy). A check that has not answered by then is
// reported so and left to end on its own, so one that ignores its context
// does not hold the answer either.
func (h *health) check(ctx context.Context, checks []healthCheck) map[string]error {
	ctx, cancel := context.WithTimeout(ctx, h.wait)
	defer cancel()
	answers := make([]<-chan singleflight.Result, len(checks))
	for i, c := range checks {
		answers[i] = h.start(c)
	}
	res := make(map[string]error, len(checks))
	for i, c := range checks {
		res[c.name] = h.await(ctx, c.name, answers[i])
	}
	return res
}

// start runs c, or joins its run in flight. The check's own deadline ends
// a tenth of the wait before the caller's, so a check that fails at its
// deadline (a request to a dark broker) gives its reason in time, not "no
// answer".
func (h *health) start(c healthCheck) <-chan singleflight.Result {
	h.letGoIfStuck(c.name)
	return h.flight.DoChan(c.name, func() (any, error) {
		since := time.Now()
		h.mu.Lock()
		h.running[c.name] = &since
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			if h.running[c.name] == &since {
				delete(h.running, c.name)
			} else { // it was let go
				h.letGo[c.name]--
			}
			h.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), h.wait-h.wait/10)
		defer cancel()
		return nil, c.healthy(ctx)
	})
}

// letGoIfStuck forgets name's check in flight if it has run stuckAfter
// waits, so the next caller starts another.
func (h *health) letGoIfStuck(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	since, ok := h.running[name]
	if !ok || time.Since(*since) < stuckAfter*h.wait || h.letGo[name] > 0 {
		return // one let go and still running is as many as a check may leave
	}
	h.flight.Forget(name)
	delete(h.running, name)
	h.letGo[name]++
	h.log.Warn("a health check has not returned; starting another (its component ignores the deadline it was given)",
		"check", name, "running", time.Since(*since).Round(time.Second))
}

// await is the check's answer, or that it gave none before ctx ended.
func (h *health) await(ctx context.Context, name string, answer <-chan singleflight.Result) error {
	select {
	case r := <-answer:
		return r.Err
	case <-ctx.Done():
	}
	select {
	case r := <-answer: // it answered as the deadline passed
		return r.Err
	default:
		return fmt.Errorf("%s: no answer within %s", name, h.wait)
	}
}

// gauge is c as a gauge's value: 1 healthy, 0 not (or no answer within
// the wait).
func (h *health) gauge(c healthCheck) func() float64 {
	return func() float64 {
		if h.check(context.Background(), []healthCheck{c})[c.name] != nil {
			return 0
		}
		return 1
	}
}

// serverCheck is an embedded NATS server's check: /readyz and its gauge
// name it alike, so they share one run.
func serverCheck(srv *natsplugin.Server) healthCheck {
	return healthCheck{"nats-server." + srv.Name(), srv.Healthy}
}

// sinkChecks are the health checks of the sinks that have one
// (switchyard.HealthChecker), by name.
func sinkChecks(sinks []switchyard.Sink) []healthCheck {
	var checks []healthCheck
	for _, s := range sinks {
		if h, ok := s.(switchyard.HealthChecker); ok {
			checks = append(checks, healthCheck{s.Name(), h.Healthy})
		}
	}
	return checks
}

// inboxChecks are the inboxes' health checks: its source's own, where it
// has one (connected, its last fetch worked), then whether the inbox took
// its last batch, which the engine refuses (a full storage budget).
func inboxChecks(sources []switchyard.Source, eng *engine.Engine) []healthCheck {
	checks := make([]healthCheck, 0, len(sources))
	for _, src := range sources {
		name := src.Name()
		own, _ := src.(switchyard.HealthChecker)
		checks = append(checks, healthCheck{name, func(ctx context.Context) error {
			if own != nil {
				if err := own.Healthy(ctx); err != nil {
					return err
				}
			}
			return eng.InboxRefusal(name)
		}})
	}
	return checks
}
