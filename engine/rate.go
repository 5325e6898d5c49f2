package engine

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/storage"
)

// tenantRates holds a bucket of records per tenant with a tenant block
// (its own, or "*"): a tenant's clients on the TCP listener store events
// and claims (each a record in the data file) at its rate, and at most its
// burst at once. The buckets outlive reloads: a
// reload that changes a block changes the bucket's rate and size from then
// on and keeps what it holds, and one that removes a block leaves its
// bucket for a block that comes back (its refusals are counted by
// switchyard_tenant_rate_limited_events_total, for the router's life). Why a bucket
// of events, for tenants' tokens alone: docs/decisions/tenant-rate.md.
type tenantRates struct {
	mu sync.Mutex
	by map[string]*bucket
}

// ask is what a request asks of its tenant's bucket: n records (the
// events it ingests, or the one claim it makes), for tenant's own clients
// unless operator.
type ask struct {
	tenant   string
	operator bool
	n        int
	noun     string // what the n are, for the refusal: "events", "claims"
}

// take charges a's records to its tenant's bucket, or says why it may not
// store them now: 429 rate_limited with the wait until the bucket holds
// them, 413 payload_too_large for more than the bucket ever holds. The
// configuration is read under the buckets' lock (cfgOf), so that a bucket
// made while a reload applies gets the reload's block; the clock (now)
// only for a request held to a bucket. The returned charge gives the
// records back (the request stored nothing); its zero value, for a
// request held to no bucket (the operator's clients, a tenant without a
// block, an empty request), gives nothing.
func (tr *tenantRates) take(cfgOf func() *config.Config, a ask, now func() time.Time) (charge, error) {
	if a.operator || a.n == 0 || len(cfgOf().TenantLimits) == 0 {
		return charge{}, nil
	}
	b, lim := tr.bucketOf(cfgOf, a.tenant, now)
	if b == nil {
		return charge{}, nil
	}
	switch wait, never := b.take(a.n, now()); {
	case never:
		return charge{}, switchyard.Errorf(switchyard.ETOOLARGE, "tenant %q may store at most %d events and claims at once (the burst of %s); this request has %d %s: send fewer at a time", a.tenant, lim.Burst, blockName(lim), a.n, a.noun)
	case wait > 0:
		return charge{}, rateLimited(a.tenant, lim, wait, fmt.Sprintf("this request's %d %s", a.n, a.noun))
	}
	return charge{b, a.n}, nil
}

// empty says why a's tenant may store nothing now: its bucket holds less
// than one event (and a.n is not yet known). Ingest asks before it reads a
// request's body, so that a flood past the rate costs the router a lookup
// each, not a read and a decode: a tenant trial measured 5.6 ms of CPU
// for each refused batch of 1 MiB, 56% of a core at 100 a second, and the
// other tenants' p99 rose to 91–139 ms. Nothing is taken.
func (tr *tenantRates) empty(cfgOf func() *config.Config, a ask, now func() time.Time) error {
	if a.operator || len(cfgOf().TenantLimits) == 0 {
		return nil
	}
	b, lim := tr.bucketOf(cfgOf, a.tenant, now)
	if b == nil {
		return nil
	}
	if wait := b.wait(1, now()); wait > 0 {
		return rateLimited(a.tenant, lim, wait, "a first event")
	}
	return nil
}

// rateLimited is the 429 of a tenant whose bucket holds what for in wait.
func rateLimited(tenant string, lim config.TenantLimit, wait time.Duration, what string) error {
	return &switchyard.Error{Code: switchyard.ERATELIMITED, RetryAfter: wait,
		Message: fmt.Sprintf("tenant %q may store events and claims at %d a second (the rate of %s): the bucket holds %s in %v", tenant, lim.Rate, blockName(lim), what, max(wait.Round(time.Millisecond), time.Millisecond))}
}

// blockName names the block that bounds a tenant, for its client.
func blockName(lim config.TenantLimit) string {
	if lim.Block == "*" {
		return `the tenant "*" block`
	}
	return "its tenant block"
}

// charge is what a take took from a bucket.
type charge struct {
	b *bucket
	n int
}

// give puts the charge back.
func (c charge) give() {
	if c.b != nil {
		c.b.give(c.n)
	}
}

// bucketOf is tenant's bucket (made full at its first use), with the
// block that bounds it; nil when none does.
func (tr *tenantRates) bucketOf(cfgOf func() *config.Config, tenant string, now func() time.Time) (*bucket, config.TenantLimit) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	lim, ok := cfgOf().TenantLimit(tenant)
	if !ok {
		return nil, lim
	}
	b := tr.by[tenant]
	if b == nil {
		if tr.by == nil {
			tr.by = make(map[string]*bucket)
		}
		b = newBucket(lim, now())
		tr.by[tenant] = b
	}
	return b, lim
}

// reload sets each bucket to cfg's block for its tenant from now.
func (tr *tenantRates) reload(cfg *config.Config, now time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for tenant, b := range tr.by {
		if lim, ok := cfg.TenantLimit(tenant); ok {
			b.set(lim, now)
		}
	}
}

// givesBack says whether a request that failed with err gives its events
// back to the bucket: one whose events may be stored (a commit the disk
// did not confirm) does not.
func givesBack(err error) bool { return !errors.Is(err, storage.ErrUnconfirmed) }

// bucket is a token bucket of events: it holds up to burst, and fills at
// rate a second. The project's own rather than golang.org/x/time/rate's:
// its Reserve and Cancel are made for reservations that wait their turn,
// and a refusal cancelled while another request's was in flight lost the
// bucket's tokens, or gave them twice (a review measured both). Here a
// take that does not fit takes nothing, a give adds back what a take
// took, and the bucket's clock never goes back.
type bucket struct {
	mu     sync.Mutex
	rate   float64   // events a second
	burst  float64   // events it holds at most
	tokens float64   // events it holds at at
	at     time.Time // when tokens was brought up to date
}

// newBucket is a full bucket of lim at now.
func newBucket(lim config.TenantLimit, now time.Time) *bucket {
	b := &bucket{at: now, tokens: float64(lim.Burst)}
	b.set(lim, now)
	return b
}

// fill brings tokens up to now.
func (b *bucket) fill(now time.Time) {
	if now.After(b.at) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.at).Seconds()*b.rate)
		b.at = now
	}
}

// take takes n events at now, or refuses them: never when the bucket
// never holds n (n > burst), else with the wait until it would. Taken is
// neither: a zero wait and never false.
func (b *bucket) take(n int, now time.Time) (wait time.Duration, never bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fill(now)
	need := float64(n)
	if need > b.burst {
		return 0, true
	}
	if wait := b.until(need); wait > 0 {
		return wait, false
	}
	b.tokens -= need
	return 0, false
}

// wait is how long until the bucket holds n events at now (0: it does),
// taking nothing.
func (b *bucket) wait(n int, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fill(now)
	return b.until(float64(n))
}

// until is how long until the bucket, filled up to now, holds need: 0
// when it does. b.mu is held.
func (b *bucket) until(need float64) time.Duration {
	if b.tokens >= need {
		return 0
	}
	return max(time.Duration((need-b.tokens)/b.rate*float64(time.Second)), 1)
}

// give puts back n events a take took.
func (b *bucket) give(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = min(b.burst, b.tokens+float64(n))
}

// set gives the bucket lim's rate and size from now, keeping what it holds
// (up to the new size).
func (b *bucket) set(lim config.TenantLimit, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fill(now)
	b.rate, b.burst = float64(lim.Rate), float64(lim.Burst)
	b.tokens = min(b.tokens, b.burst)
}

// TenantRate is what a tenant's bucket holds, for /v1/stats.
type TenantRate struct {
	Rate, Burst int
	// Available is how many events it would take now (whole ones).
	Available int
	// Refused is how many events and claims it refused since the router
	// started (the tenant's switchyard_tenant_rate_limited_events_total),
	// RefusedRequests how many requests (..._requests_total).
	Refused, RefusedRequests int64
}

// charge takes a's records from its tenant's bucket, or counts the refusal
// (its records and the request) and returns it: Ingest's and Claim's one
// way in.
func (e *Engine) charge(a ask) (charge, error) {
	taken, err := e.rates.take(e.config, a, e.now)
	if err != nil {
		e.metrics.rateLimited.WithLabelValues(a.tenant).Add(float64(a.n))
		e.metrics.rateLimitedRequests.WithLabelValues(a.tenant).Inc()
	}
	return taken, err
}

// CheckTenantRate refuses, before its body is read, a request of tenant's
// own clients (not operator) while its bucket holds less than one event
// (tenantRates.empty): 429 rate_limited. Ingest charges the request's
// events once they are known.
func (e *Engine) CheckTenantRate(tenant string, operator bool) error {
	err := e.rates.empty(e.config, ask{tenant: tenant, operator: operator}, e.now)
	if err != nil {
		e.metrics.rateLimitedRequests.WithLabelValues(tenant).Inc()
	}
	return err
}

// TenantRates reports each bucket a tenant block bounds: tenants whose
// clients sent events since start.
func (e *Engine) TenantRates() map[string]TenantRate {
	cfg, now := e.config(), e.now()
	tr := &e.rates
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := make(map[string]TenantRate, len(tr.by))
	for tenant, b := range tr.by {
		if _, ok := cfg.TenantLimit(tenant); !ok {
			continue // a reload took its block away
		}
		b.mu.Lock()
		b.fill(now)
		out[tenant] = TenantRate{Rate: int(b.rate), Burst: int(b.burst), Available: int(b.tokens),
			Refused: refusedOf(e.metrics.rateLimited, tenant), RefusedRequests: refusedOf(e.metrics.rateLimitedRequests, tenant)}
		b.mu.Unlock()
	}
	return out
}
