package api

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the API's Prometheus series.
type metrics struct {
	problems *prometheus.CounterVec // every problem+json answer, by code
	replays  prometheus.Counter     // idempotent replays
	ingest   prometheus.Histogram   // POST /v1/events, request to response
	places   *prometheus.CounterVec // requests refused past their tenant's half of the TCP places, by tenant
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		problems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_http_problems_total",
			Help: "API requests answered with a problem (application/problem+json), by code: idempotency_key_reuse (422), request_in_progress (409), unauthorized (401) ...",
		}, []string{"code"}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_idempotent_replays_total",
			Help: "Ingest requests answered with a stored response (Idempotent-Replayed: true).",
		}),
		ingest: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "switchyard_ingest_duration_seconds",
			Help:    "Time from receiving POST /v1/events to answering it, fsync included, whatever the outcome.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16), // 0.1ms … 3.3s
		}),
		places: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_tenant_places_refused_total",
			Help: "Requests of a tenant refused (429) on the TCP listener because the tenant already had half of max_connections in progress (docs/decisions/tenant-rate.md, \"Places on the listener\").",
		}, []string{"tenant"}),
	}
	for code := range statusOf { // every code at 0 from the start: an alert on increase() sees the first
		m.problems.WithLabelValues(string(code))
	}
	if reg != nil {
		m.problems = register(reg, m.problems)
		m.replays = register(reg, m.replays)
		m.ingest = register(reg, m.ingest)
		m.places = register(reg, m.places)
	}
	return m
}

// register registers c, or returns the collector already registered under
// its name (a second server on one registry shares the series).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}
