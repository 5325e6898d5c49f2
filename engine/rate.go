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

// tenantRates holds a bucket of events per tenant with a tenant block (its
// own, or "*"): a tenant's clients on the TCP listener store events at its
// rate, and at most its burst at once. The buckets outlive reloads: a
// reload that changes a block changes the bucket's rate and size from then
// on and keeps what it holds, and one that removes a block leaves its
// bucket (and count of refusals) for a block that comes back. Why a bucket
// of events, for tenants' tokens alone: docs/decisions/tenant-rate.md.
type tenantRates struct {
	mu sync.Mutex
	by map[string]*bucket
}

// take charges req's events to its tenant's bucket at now, or says why it
// may not store them now: 429 rate_limited with the wait until the bucket
// holds them, 413 payload_too_large for more than the bucket ever holds.
// The configuration is read under the buckets' lock (config), so that a
// bucket made while a reload applies gets the reload's block. The
// returned give puts the events back (the request stored nothing); nil
// when req is held to no bucket (the operator's clients, a tenant without
// a block, an empty request).
func (tr *tenantRates) take(config func() *config.Config, req *IngestRequest, now time.Time) (give func(), err error) {
	n := len(req.Events)
	if req.Operator || n == 0 {
		return nil, nil
	}
	b, block := tr.bucketOf(config, req.Tenant, now)
	if b == nil {
		return nil, nil
	}
	wait, fits := b.take(n, now)
	switch {
	case !fits:
		return nil, switchyard.Errorf(switchyard.ETOOLARGE, "tenant %q may store at most %d events at once (the burst of %s); this request has %d: send fewer at a time", req.Tenant, b.size(), block, n)
	case wait > 0:
		return nil, &switchyard.Error{Code: switchyard.ERATELIMITED, RetryAfter: wait,
			Message: fmt.Sprintf("tenant %q may store events at %s a second (the rate of %s): the bucket holds this request's %d in %v", req.Tenant, b.rateText(), block, n, max(wait.Round(time.Millisecond), time.Millisecond))}
	}
	return func() { b.give(n) }, nil
}

// bucketOf is tenant's bucket (made full at its first use), and which
// block bounds it; nil when none does.
func (tr *tenantRates) bucketOf(config func() *config.Config, tenant string, now time.Time) (*bucket, string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	cfg := config()
	lim, ok := cfg.TenantLimit(tenant)
	if !ok {
		return nil, ""
	}
	block := "its tenant block"
	if _, own := cfg.Tenants[tenant]; !own {
		block = `the tenant "*" block`
	}
	b := tr.by[tenant]
	if b == nil {
		if tr.by == nil {
			tr.by = make(map[string]*bucket)
		}
		b = &bucket{at: now, tokens: float64(lim.Burst)}
		b.set(lim, now)
		tr.by[tenant] = b
	}
	return b, block
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
// rate a second. Written here rather than taken from golang.org/x/time/rate:
// its Reserve and Cancel are made for reservations that wait their turn,
// and a refusal cancelled while another request's was in flight lost the
// bucket's tokens, or gave them twice (a review measured both). Here a
// take that does not fit takes nothing, a give adds back what a take
// took, and the bucket's clock never goes back.
type bucket struct {
	mu      sync.Mutex
	rate    float64   // events a second
	burst   float64   // events it holds at most
	tokens  float64   // events it holds at at
	at      time.Time // when tokens was brought up to date
	refused int64     // events refused since the router started
}

// fill brings tokens up to now.
func (b *bucket) fill(now time.Time) {
	if now.After(b.at) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.at).Seconds()*b.rate)
		b.at = now
	}
}

// take takes n events at now. It returns the wait until the bucket would
// hold them (0: taken), and fits false when it never would (n > burst).
func (b *bucket) take(n int, now time.Time) (wait time.Duration, fits bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fill(now)
	need := float64(n)
	switch {
	case need > b.burst:
		b.refused += int64(n)
		return 0, false
	case b.tokens >= need:
		b.tokens -= need
		return 0, true
	}
	b.refused += int64(n)
	return time.Duration((need - b.tokens) / b.rate * float64(time.Second)), true
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

func (b *bucket) size() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return int(b.burst)
}

func (b *bucket) rateText() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprint(b.rate)
}

// TenantRate is what a tenant's bucket holds, for /v1/stats.
type TenantRate struct {
	Rate, Burst int
	// Available is how many events it would take now (whole ones).
	Available int
	// Refused is how many events it refused since the router started.
	Refused int64
}

// TenantRates reports each bucket a tenant block bounds: tenants whose
// clients stored events since start.
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
		out[tenant] = TenantRate{Rate: int(b.rate), Burst: int(b.burst), Available: int(b.tokens), Refused: b.refused}
		b.mu.Unlock()
	}
	return out
}
