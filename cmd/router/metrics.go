package main

import (
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	switchyard "github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/engine"
	natsplugin "github.com/switchyard-router/switchyard/plugins/nats"
	"github.com/switchyard-router/switchyard/storage"
)

// newRegistry is the router's Prometheus registry, with the Go runtime's
// and the process's collectors, and the anonymous part of the resident set.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "switchyard_process_anon_resident_bytes",
			Help: "Resident memory not backed by a file (Linux RssAnon): the process's own memory, without the pages of the data file it has mapped, which process_resident_memory_bytes counts."},
			anonResident))
	return reg
}

// anonResident reads RssAnon from /proc/self/status; NaN where there is none.
func anonResident() float64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return math.NaN()
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return math.NaN()
			}
			return kb * 1024
		}
	}
	return math.NaN()
}

// storageMetrics registers the group-commit histograms and returns the
// storage.Options.OnCommit that feeds them.
func storageMetrics(reg prometheus.Registerer) func(n int, took time.Duration) {
	commits := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "switchyard_storage_group_commit_writes",
		Help:    "Writes carried by one fsynced transaction (group commit).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 12),
	})
	commitSecs := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "switchyard_storage_commit_seconds",
		Help:    "Time to write and fsync one transaction.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14),
	})
	reg.MustRegister(commits, commitSecs)
	return func(n int, took time.Duration) {
		commits.Observe(float64(n))
		commitSecs.Observe(took.Seconds())
	}
}

// registerStorage exports the data file's fsyncs and size.
func registerStorage(reg prometheus.Registerer, db *storage.DB) {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "switchyard_storage_fsyncs_total", Help: "Fsynced write transactions."},
			func() float64 { return float64(db.Commits()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "switchyard_storage_file_size_bytes", Help: "Size of the data file."},
			func() float64 { return float64(db.Size()) }),
	)
}

// registerNATSServer exports whether an embedded server's JetStream store
// takes writes.
func registerNATSServer(reg prometheus.Registerer, h *health, name string, srv *natsplugin.Server) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "switchyard_nats_server_up", Help: "1 while the embedded NATS server's JetStream store takes writes.",
		ConstLabels: prometheus.Labels{"server": name},
	}, h.gauge(serverCheck(srv))))
}

// registerSinks exports whether each sink's broker is reachable, asked
// within healthWait.
func registerSinks(reg prometheus.Registerer, h *health, sinks []switchyard.Sink) {
	registerUp(reg, h, "switchyard_sink_up", "1 when the sink's broker is reachable and answering (an inbox's local service: it takes connections and asked for no pause with a 503).", "sink", sinkChecks(sinks))
}

// registerInboxes exports whether each inbox consumes from its broker, and
// how far behind it reads (sources that know: switchyard.Lagger).
func registerInboxes(reg prometheus.Registerer, h *health, checks []healthCheck, sources []switchyard.Source) {
	registerUp(reg, h, "switchyard_inbox_up", "1 when the inbox is connected to its broker, its last fetch worked, and it took the last batch (or refused none in the last minute).", "inbox", checks)
	for _, src := range sources {
		if l, ok := src.(switchyard.Lagger); ok {
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "switchyard_inbox_lag_messages", ConstLabels: prometheus.Labels{"inbox": src.Name()},
				Help: "Messages the inbox's broker held past those it had read, as its last fetch saw them (Kafka: each partition's high watermark less the next offset; NATS: the durable's pending count); NaN until a fetch brought any.",
			}, func() float64 {
				if n, ok := l.Lag(); ok {
					return float64(n)
				}
				return math.NaN()
			}))
		}
	}
}

// registerUp exports one gauge of the family name per check, labelled
// label="<the check's name>".
func registerUp(reg prometheus.Registerer, h *health, name, help, label string, checks []healthCheck) {
	for _, c := range checks {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: name, Help: help, ConstLabels: prometheus.Labels{label: c.name},
		}, h.gauge(c)))
	}
}

// registerSpace exports the data file's use against its budget.
func registerSpace(reg prometheus.Registerer, eng *engine.Engine) {
	gauge := func(name, help string, value func(storage.Space, int64) int64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			sp, maxSize, _ := eng.Space()
			return float64(value(sp, maxSize))
		}))
	}
	gauge("switchyard_storage_used_bytes", "Bytes of the data file's pages that hold data.", func(sp storage.Space, _ int64) int64 { return sp.Used })
	gauge("switchyard_storage_max_size_bytes", "The data file's budget (storage.max_size); 0 = none.", func(_ storage.Space, m int64) int64 { return m })
	gauge("switchyard_storage_disk_free_bytes", "Free bytes on the disk holding the data file.", func(sp storage.Space, _ int64) int64 { return sp.DiskFree })
	gauge("switchyard_storage_reserve_bytes", "Bytes of the disk held in the reserve beside the data file for the moment the disk is full (0 once given up; made again when the disk has room).", func(sp storage.Space, _ int64) int64 { return sp.Reserve })
	gauge("switchyard_storage_reusable_bytes", "Bytes of the data file on disk that new writes reuse (its free pages): room min_free counts with the disk's.", func(sp storage.Space, _ int64) int64 { return sp.Reusable })
}

// reloadMetrics count the reloads and say whether the last one took
// (switchyard_config_last_reload_successful, as Prometheus's own): a
// refused reload was said only in the log, where no alert looks (a reload
// trial).
type reloadMetrics struct {
	reloads *prometheus.CounterVec
	last    prometheus.Gauge
	lastAt  prometheus.Gauge
}

func newReloadMetrics(reg prometheus.Registerer) *reloadMetrics {
	m := &reloadMetrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_config_reloads_total",
			Help: "Configuration reloads (SIGHUP), by result: applied, or refused (the running configuration stayed; the log says why). A reload that kept the tokens in force because the tokens_file did not load is refused here."}, []string{"result"}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchyard_config_last_reload_successful",
			Help: "1 when the last reload (or the start) applied the whole configuration file, 0 when it was refused."}),
		lastAt: prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchyard_config_last_reload_success_timestamp_seconds",
			Help: "When the configuration in force was last applied whole (the start, or a reload), in seconds since the Unix epoch."}),
	}
	m.reloads.WithLabelValues("applied")
	m.reloads.WithLabelValues("refused")
	m.last.Set(1)
	m.lastAt.SetToCurrentTime()
	reg.MustRegister(m.reloads, m.last, m.lastAt)
	return m
}

// reloaded counts a reload that applied (err nil) or was refused.
func (m *reloadMetrics) reloaded(err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.reloads.WithLabelValues("refused").Inc()
		m.last.Set(0)
		return
	}
	m.reloads.WithLabelValues("applied").Inc()
	m.last.Set(1)
	m.lastAt.SetToCurrentTime()
}
