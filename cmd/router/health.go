package main

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/switchyard-router/switchyard"
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

// checkHealth runs every check at once, each within healthWait, and
// returns each one's error (nil: healthy). A check that has not answered
// by then is reported so and left to end on its own, so one that ignores
// its context does not hold the answer either.
func checkHealth(ctx context.Context, checks []healthCheck) map[string]error {
	ctx, cancel := context.WithTimeout(ctx, healthWait)
	defer cancel()
	answers := make([]<-chan singleflight.Result, len(checks))
	for i, c := range checks {
		answers[i] = inFlight.DoChan(c.name, func() (any, error) {
			ctx, cancel := context.WithTimeout(context.Background(), healthWait)
			defer cancel()
			return nil, c.healthy(ctx)
		})
	}
	res := make(map[string]error, len(checks))
	for i, c := range checks {
		res[c.name] = awaitCheck(ctx, c.name, answers[i])
	}
	return res
}

// inFlight runs one check of a component at a time: those who ask while
// it runs (a readiness probe and a metrics scrape at once) share its
// answer, and a check that never ends (one ignoring its context, as a
// client waiting on a silent broker may) costs one goroutine, not one
// more per probe: later callers wait on it, each within its healthWait.
// Names are unique across sinks, servers and inboxes (only the first two
// hold a dot).
var inFlight singleflight.Group

// awaitCheck is the check's answer, or that it gave none before ctx ended.
func awaitCheck(ctx context.Context, name string, answer <-chan singleflight.Result) error {
	select {
	case r := <-answer:
		return r.Err
	case <-ctx.Done():
	}
	select {
	case r := <-answer: // it answered as the deadline passed
		return r.Err
	default:
		return fmt.Errorf("%s: no answer within %s", name, healthWait)
	}
}

// healthChecks are the health checks of the sinks or the inboxes' sources
// that have one (switchyard.HealthChecker), by name.
func healthChecks[T interface{ Name() string }](items []T) []healthCheck {
	var checks []healthCheck
	for _, it := range items {
		if h, ok := any(it).(switchyard.HealthChecker); ok {
			checks = append(checks, healthCheck{it.Name(), h.Healthy})
		}
	}
	return checks
}

// gauge is the check as a gauge's value: 1 healthy, 0 not (or no answer
// within healthWait).
func (c healthCheck) gauge() float64 {
	if checkHealth(context.Background(), []healthCheck{c})[c.name] != nil {
		return 0
	}
	return 1
}
