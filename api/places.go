package api

import (
	"fmt"
	"sync"
	"time"

	"github.com/switchyard-router/switchyard"
)

// tenantPlaces holds each tenant to half of the TCP listener's places
// (listen.max_connections) with requests in progress, while the tokens
// name two tenants or more: one tenant stalling its requests mid-body
// cannot lock the others out (authenticate takes and gives the places;
// why, and what it costs: docs/decisions/tenant-rate.md, "Places on the
// listener").
type tenantPlaces struct {
	max int

	mu   sync.Mutex
	busy map[string]int // requests in progress, by tenant
}

// newTenantPlaces holds each tenant to half of maxConnections places; nil
// (no bound) when the listener has none.
func newTenantPlaces(maxConnections int) *tenantPlaces {
	if maxConnections <= 0 {
		return nil
	}
	return &tenantPlaces{max: max(1, maxConnections/2), busy: make(map[string]int)}
}

// take gives tenant a place for a request, or says why it may not have one
// now; a place taken is given back with give.
func (p *tenantPlaces) take(tenant string) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.busy[tenant] >= p.max {
		return &switchyard.Error{Code: switchyard.ERATELIMITED, RetryAfter: time.Second,
			Message: fmt.Sprintf("tenant %q has %d requests in progress on this listener, half of max_connections: one tenant may not hold every place; send it again when one has ended", tenant, p.busy[tenant])}
	}
	p.busy[tenant]++
	return nil
}

// give gives back the place of one of tenant's requests.
func (p *tenantPlaces) give(tenant string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.busy[tenant]--; p.busy[tenant] <= 0 {
		delete(p.busy, tenant)
	}
}
