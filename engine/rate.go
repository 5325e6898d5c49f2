package engine

import (
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
)

// tenantRates holds a token bucket of events per tenant with a tenant block
// (its own, or "*"): a tenant's clients on the TCP listener store events at
// its rate, and at most its burst at once. The buckets outlive reloads: a
// reload that changes a block changes the bucket's rate and size from then
// on, and keeps what it held (reload). Why a token bucket, counted in events,
// for tenants' tokens alone: docs/decisions/tenant-rate.md.
type tenantRates struct {
	mu      sync.Mutex
	by      map[string]*rate.Limiter
	refused map[string]int64 // events refused since start, by tenant
}

// take charges req's events to its tenant's bucket at now, or says why it
// may not store them now: 429 rate_limited with the wait until the bucket
// holds them, 413 payload_too_large for more than the bucket ever holds.
// The returned give puts the events back (the request stored nothing);
// nil when req is held to no bucket (the operator's clients, a tenant
// without a block, an empty request).
func (tr *tenantRates) take(cfg *config.Config, req *IngestRequest, now time.Time) (give func(), err error) {
	n := len(req.Events)
	if req.Operator || n == 0 {
		return nil, nil
	}
	lim, ok := cfg.TenantLimit(req.Tenant)
	if !ok {
		return nil, nil
	}
	b := tr.bucket(req.Tenant, lim, now)
	r := b.ReserveN(now, n)
	if !r.OK() {
		tr.refuse(req.Tenant, n)
		return nil, switchyard.Errorf(switchyard.ETOOLARGE, "tenant %q may store at most %d events at once (the burst of its tenant block at %s); this request has %d: send fewer at a time", req.Tenant, lim.Burst, lim.At, n)
	}
	if wait := r.DelayFrom(now); wait > 0 {
		r.CancelAt(now)
		tr.refuse(req.Tenant, n)
		return nil, &switchyard.Error{Code: switchyard.ERATELIMITED, RetryAfter: wait,
			Message: fmt.Sprintf("tenant %q may store events at %d a second (the rate of its tenant block at %s; %d at once): the bucket holds this request's %d in %v", req.Tenant, lim.Rate, lim.At, lim.Burst, n, wait.Round(time.Millisecond))}
	}
	return func() { r.CancelAt(now) }, nil
}

func (tr *tenantRates) refuse(tenant string, n int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.refused == nil {
		tr.refused = make(map[string]int64)
	}
	tr.refused[tenant] += int64(n)
}

// bucket is tenant's bucket, made full to lim at its first use, and set
// to lim.
func (tr *tenantRates) bucket(tenant string, lim config.TenantLimit, now time.Time) *rate.Limiter {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	b, ok := tr.by[tenant]
	if !ok {
		if tr.by == nil {
			tr.by = make(map[string]*rate.Limiter)
		}
		b = rate.NewLimiter(rate.Limit(lim.Rate), lim.Burst)
		tr.by[tenant] = b
	} else if b.Limit() != rate.Limit(lim.Rate) || b.Burst() != lim.Burst {
		// A bucket made from the configuration before a reload, while the
		// reload set the others.
		b.SetLimitAt(now, rate.Limit(lim.Rate))
		b.SetBurstAt(now, lim.Burst)
	}
	return b
}

// reload sets each bucket to cfg's block for its tenant from now, and
// forgets those of tenants cfg bounds no more.
func (tr *tenantRates) reload(cfg *config.Config, now time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for tenant, b := range tr.by {
		lim, ok := cfg.TenantLimit(tenant)
		if !ok {
			delete(tr.by, tenant)
			continue
		}
		b.SetLimitAt(now, rate.Limit(lim.Rate))
		b.SetBurstAt(now, lim.Burst)
	}
}

// TenantRate is what a tenant's bucket holds, for /v1/stats.
type TenantRate struct {
	Rate, Burst int
	// Available is how many events it would take now (whole ones).
	Available int
	// Refused is how many events it refused since start.
	Refused int64
}

// TenantRates reports each bucket in use: tenants whose clients stored
// events under a tenant block since start.
func (e *Engine) TenantRates() map[string]TenantRate {
	cfg, now := e.config(), e.now()
	tr := &e.rates
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := make(map[string]TenantRate, len(tr.by))
	for tenant, b := range tr.by {
		lim, ok := cfg.TenantLimit(tenant)
		if !ok {
			continue // a reload is taking its block away
		}
		out[tenant] = TenantRate{Rate: lim.Rate, Burst: lim.Burst, Available: int(math.Max(0, math.Min(float64(lim.Burst), math.Floor(b.TokensAt(now))))),
			Refused: tr.refused[tenant]}
	}
	return out
}
