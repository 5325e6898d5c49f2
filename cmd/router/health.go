package main

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/switchyard-router/switchyard"
)

// healthWait bounds each health check of a sink or an embedded server,
// for /readyz and the switchyard_sink_up gauge. A broker gone silent (its
// host dark: no reset, no answer) answers neither, and a client library
// waits its own request timeouts, tens of seconds: /readyz waited for them
// (a test found it past 10 s with a silent Kafka cluster), and a readiness
// probe that times out says the router is not ready when ingest works.
const healthWait = time.Second

// healthCheck is one named check: a sink's, or an embedded server's.
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
	var mu sync.Mutex
	res := make(map[string]error, len(checks))
	for _, c := range checks {
		res[c.name] = fmt.Errorf("%s: no answer within %s", c.name, healthWait)
	}
	var wg sync.WaitGroup
	for _, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.healthy(ctx)
			mu.Lock()
			defer mu.Unlock()
			res[c.name] = err
		}()
	}
	answered := make(chan struct{})
	go func() { wg.Wait(); close(answered) }()
	select {
	case <-answered:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	return maps.Clone(res)
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
