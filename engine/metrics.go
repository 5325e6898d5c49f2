package engine

import (
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/storage"
)

// metrics are the engine's Prometheus series. Counters are updated as work
// happens; queue gauges are read from the data file at scrape time, so they
// are never stale and cost nothing between scrapes.
type metrics struct {
	e *Engine

	ingested            *prometheus.CounterVec
	polls               *prometheus.CounterVec
	published           *prometheus.CounterVec
	publishErrs         *prometheus.CounterVec
	retried             *prometheus.CounterVec
	deadLettered        *prometheus.CounterVec
	requeued            *prometheus.CounterVec
	filtered            *prometheus.CounterVec
	unrouted            *prometheus.CounterVec
	publishSecs         *prometheus.HistogramVec
	dlqActions          *prometheus.CounterVec
	yielded             *prometheus.CounterVec
	rateLimited         *prometheus.CounterVec
	rateLimitedRequests *prometheus.CounterVec

	pending               *prometheus.Desc
	inProcess             *prometheus.Desc
	oldestAge             *prometheus.Desc
	pollDelay             *prometheus.Desc
	dlq                   *prometheus.Desc
	events                *prometheus.Desc
	watchers              *prometheus.Desc
	clockAhead            *prometheus.Desc
	stateKeys, stateBytes *prometheus.Desc

	mu       sync.Mutex
	sinkErrs map[string]SinkError // the last failed output of each sink
}

// SinkError is the last output a sink failed to publish, for operators.
type SinkError struct {
	At    time.Time
	Queue string
	Error string
}

// sinkFailed keeps the first error among outs as the sink's last.
func (m *metrics) sinkFailed(sink, queue string, outs []*output) {
	for _, o := range outs {
		if o.result.Err != nil {
			m.mu.Lock()
			if m.sinkErrs == nil {
				m.sinkErrs = make(map[string]SinkError)
			}
			m.sinkErrs[sink] = SinkError{At: m.e.now(), Queue: queue, Error: o.result.Err.Error()}
			m.mu.Unlock()
			return
		}
	}
}

// SinkErrors returns the last publish error of each sink that had one
// since the router started.
func (e *Engine) SinkErrors() map[string]SinkError {
	m := e.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.sinkErrs)
}

func newMetrics(e *Engine) *metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "switchyard", Name: name, Help: help}, labels)
	}
	gauge := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("switchyard_"+name, help, []string{"type"}, nil)
	}
	m := &metrics{
		e:            e,
		ingested:     counter("events_ingested_total", "Events accepted and fsynced.", "type"),
		polls:        counter("polls_total", "Polls of a type's queue, by outcome (empty, partial, full).", "type", "outcome"),
		published:    counter("published_total", "Outputs acknowledged by a broker.", "type", "sink"),
		publishErrs:  counter("publish_errors_total", "Outputs a broker did not acknowledge.", "type", "sink"),
		retried:      counter("retried_total", "Events rescheduled with backoff after a failed output.", "type"),
		deadLettered: counter("dead_lettered_total", "Events moved to the DLQ.", "type"),
		requeued:     counter("requeued_total", "Events put back to pending without an attempt (publish outcome unknown).", "type"),
		filtered:     counter("filtered_total", "Events done with nothing sent: the plugin chain returned no output.", "type"),
		unrouted:     counter("unrouted_outputs_total", "Plugin outputs that named no destination in a type with no route (the event is dead-lettered).", "type"),
		pending:      gauge("pending_events", "Events waiting in a type's queue."),
		inProcess:    gauge("in_process_events", "Events a type's loop holds (taken, being published)."),
		oldestAge:    gauge("oldest_pending_age_seconds", "How long the pending event due next has been stored: it grows while the queue lags, and while that event waits out a retry's backoff."),
		pollDelay:    gauge("poll_delay_seconds", "A type's current poll delay: the adaptive one, at most 1s while it backs off from an outage."),
		dlq:          gauge("dlq_events", "Events in a type's DLQ."),
		publishSecs: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "switchyard", Name: "publish_duration_seconds",
			Help:    "Time a sink took to publish one batch's messages and get every broker answer.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5ms … 16s
		}, []string{"sink"}),
		dlqActions:          counter("dlq_actions_total", "Dead letters an operator retried, resolved or deleted.", "action"),
		yielded:             counter("delivery_yield_seconds_total", "Time a type's loop rested so that requests waiting for the CPU got it (outbox.yield_lag).", "type"),
		rateLimited:         counter("tenant_rate_limited_events_total", "Events and new claims of a tenant's requests refused by its tenant block: over its rate (429), or more at once than its burst (413). A request refused before its body is read (the bucket empty) counts in switchyard_tenant_rate_limited_requests_total only.", "tenant"),
		rateLimitedRequests: counter("tenant_rate_limited_requests_total", "A tenant's requests (ingest, claims) refused by its tenant block (429 or 413), those refused before their body was read included.", "tenant"),
		watchers:            prometheus.NewDesc("switchyard_tail_watchers", "Live tails watching published outputs (router tail, the console).", nil, nil),
		clockAhead:          prometheus.NewDesc("switchyard_clock_ahead_seconds", "How far the router's clock is ahead of the system clock: after the system clock stepped back (while running, or since the data file last saw it), the router's goes on at the clock's rate until the system clock passes it.", nil, nil),
		stateKeys:           prometheus.NewDesc("switchyard_plugin_state_keys", "Keys a state namespace holds (<plugin>:<type>, or a shared state_namespace).", []string{"namespace"}, nil),
		stateBytes:          prometheus.NewDesc("switchyard_plugin_state_bytes", "Bytes of keys and values a state namespace holds.", []string{"namespace"}, nil),
		events: prometheus.NewDesc("switchyard_events", "Records in the data file by state (pending excludes in_process; delivered are kept until outbox.ttl).",
			[]string{"state"}, nil),
	}
	for _, act := range DLQActions { // at 0 from the start, as typeSeries's
		m.dlqActions.WithLabelValues(string(act))
	}
	return m
}

func (m *metrics) vecs() []prometheus.Collector {
	return []prometheus.Collector{m.ingested, m.polls, m.published, m.publishErrs, m.retried, m.deadLettered, m.requeued, m.filtered, m.unrouted, m.publishSecs, m.dlqActions, m.yielded, m.rateLimited, m.rateLimitedRequests}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.vecs() {
		c.Describe(ch)
	}
	for _, d := range []*prometheus.Desc{m.pending, m.inProcess, m.oldestAge, m.pollDelay, m.dlq, m.events, m.watchers, m.clockAhead, m.stateKeys, m.stateBytes} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.vecs() {
		c.Collect(ch)
	}
	ch <- prometheus.MustNewConstMetric(m.watchers, prometheus.GaugeValue, float64(m.e.tail.watching.Load()))
	ch <- prometheus.MustNewConstMetric(m.clockAhead, prometheus.GaugeValue, m.e.clock.ahead().Seconds())
	if nss, err := m.e.StateNamespaces(""); err == nil {
		for _, ns := range nss {
			ch <- prometheus.MustNewConstMetric(m.stateKeys, prometheus.GaugeValue, float64(ns.Keys), ns.Name)
			ch <- prometheus.MustNewConstMetric(m.stateBytes, prometheus.GaugeValue, float64(ns.Bytes), ns.Name)
		}
	}
	stats, err := m.e.Stats()
	if err != nil {
		return
	}
	inProcess := 0
	for _, s := range stats {
		inProcess += s.InProcess
		ch <- prometheus.MustNewConstMetric(m.pending, prometheus.GaugeValue, float64(s.Pending), s.Type)
		ch <- prometheus.MustNewConstMetric(m.inProcess, prometheus.GaugeValue, float64(s.InProcess), s.Type)
		ch <- prometheus.MustNewConstMetric(m.oldestAge, prometheus.GaugeValue, s.OldestPending.Seconds(), s.Type)
		ch <- prometheus.MustNewConstMetric(m.pollDelay, prometheus.GaugeValue, s.PollDelay.Seconds(), s.Type)
		ch <- prometheus.MustNewConstMetric(m.dlq, prometheus.GaugeValue, float64(s.DLQ), s.Type)
	}
	var states storage.StateCounts
	if m.e.store.View(func(tx *storage.Tx) error { states = tx.CountStates(); return nil }) != nil {
		return
	}
	for _, st := range []struct {
		name string
		n    int
	}{
		{"pending", max(states.Pending-inProcess, 0)},
		{"in_process", inProcess},
		{"delivered", states.Delivered},
		{"dlq", states.DLQ},
		{"resolved", states.Resolved},
	} {
		ch <- prometheus.MustNewConstMetric(m.events, prometheus.GaugeValue, float64(st.n), st.name)
	}
}

// loopIfAny returns the loop of queue t if one exists, without creating it:
// reads (stats, metrics, event status) must not start a loop for a pull
// inbox, nor build one for a stored type the configuration no longer has
// (it has no policy).
func (e *Engine) loopIfAny(t string) *Loop {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.loops[t]
}

// observePublish records how long one sink took over one batch.
func (m *metrics) observePublish(sink string, took time.Duration) {
	m.publishSecs.WithLabelValues(sink).Observe(took.Seconds())
}

// dlqAction counts operator actions on dead letters.
func (m *metrics) dlqAction(action DLQAction, n int) {
	if n > 0 {
		m.dlqActions.WithLabelValues(string(action)).Add(float64(n))
	}
}

// tenantSeries starts switchyard_tenant_rate_limited_*_total at 0
// for each tenant with a block of its own, so that increase() sees its
// first refusals (those under "*" start at their first).
func (m *metrics) tenantSeries(cfg *config.Config) {
	for t := range cfg.TenantLimits {
		if t != "*" {
			m.rateLimited.WithLabelValues(t)
			m.rateLimitedRequests.WithLabelValues(t)
		}
	}
}

// refusedOf is tenant's count in c (switchyard_tenant_rate_limited_*).
func refusedOf(c *prometheus.CounterVec, tenant string) int64 {
	var d dto.Metric
	if err := c.WithLabelValues(tenant).Write(&d); err != nil {
		return 0
	}
	return int64(d.GetCounter().GetValue())
}

func (m *metrics) ingestedType(t string, n int) { m.ingested.WithLabelValues(t).Add(float64(n)) }

// pollOutcomes are switchyard_polls_total's outcomes: nothing taken, fewer
// than its limit, a full batch (batch_size events, or the bytes of outputs
// it may hold: storage.Limit).
var pollOutcomes = [...]string{"empty", "partial", "full"}

func (m *metrics) polled(t string, taken int, full bool) {
	outcome := pollOutcomes[1]
	switch {
	case taken == 0:
		outcome = pollOutcomes[0]
	case full:
		outcome = pollOutcomes[2]
	}
	m.polls.WithLabelValues(t, outcome).Inc()
}

// typeSeries makes type t's counters exist, at 0, from its loop's start,
// with each sink its routes name (and a reload's, for the routes it adds): an alert on increase() sees the first
// dead letter (a series that appears at 1 shows no increase), and a
// dashboard tells a quiet type from a missing one. A new-user trial found
// them absent until first counted.
func (m *metrics) typeSeries(t string, pol *config.Policy) {
	if !strings.HasPrefix(t, inboxQueuePrefix) { // an inbox's are switchyard_inbox_received_total
		m.ingested.WithLabelValues(t)
	}
	for _, c := range []*prometheus.CounterVec{m.retried, m.deadLettered, m.requeued, m.filtered, m.unrouted, m.yielded} {
		c.WithLabelValues(t)
	}
	for _, o := range pollOutcomes {
		m.polls.WithLabelValues(t, o)
	}
	if pol == nil {
		return
	}
	for _, r := range pol.Routes {
		m.published.WithLabelValues(t, r.To)
		m.publishErrs.WithLabelValues(t, r.To)
		m.publishSecs.WithLabelValues(r.To)
	}
}

// dropTypeSeries removes the series typeSeries made for t, and those its
// events added since: the type's loop stopped (Engine.retire).
func (m *metrics) dropTypeSeries(t string) {
	for _, c := range []*prometheus.CounterVec{m.ingested, m.retried, m.deadLettered, m.requeued, m.filtered, m.unrouted, m.yielded, m.polls, m.published, m.publishErrs} {
		c.DeletePartialMatch(prometheus.Labels{"type": t})
	}
}

func (m *metrics) committed(t string, res *PollResult, b *batch) {
	for sink, outs := range b.bySink {
		ok := 0
		for _, o := range outs {
			if o.result.Err == nil {
				ok++
			}
		}
		m.published.WithLabelValues(t, sink).Add(float64(ok))
		if bad := len(outs) - ok; bad > 0 {
			m.publishErrs.WithLabelValues(t, sink).Add(float64(bad))
			m.sinkFailed(sink, t, outs)
		}
	}
	m.retried.WithLabelValues(t).Add(float64(res.Retried))
	m.deadLettered.WithLabelValues(t).Add(float64(res.DeadLettered))
	m.requeued.WithLabelValues(t).Add(float64(res.Requeued))
	if res.Filtered > 0 {
		m.filtered.WithLabelValues(t).Add(float64(res.Filtered))
	}
}

func (m *metrics) unroutedOutput(t string) { m.unrouted.WithLabelValues(t).Inc() }
