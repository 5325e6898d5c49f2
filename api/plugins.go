package api

import (
	"net/http"
	"time"

	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/internal/history"
)

// pluginView is a loaded plugin as GET /v1/plugins shows it.
type pluginView struct {
	Name     string                         `json:"name"`
	File     string                         `json:"file,omitempty"`
	SHA256   string                         `json:"sha256,omitempty"`
	LoadedAt *time.Time                     `json:"loaded_at,omitempty"`
	UsedBy   []string                       `json:"used_by"`
	Verdicts map[engine.PluginVerdict]int64 `json:"verdicts"`
	Outputs  int64                          `json:"outputs"`
	// FailureKinds counts failures without a verdict of the plugin's own:
	// trap, timeout, memory, start (retried), broken_rule (rejected).
	FailureKinds map[string]int64 `json:"failure_kinds"`
	// SharedIDEvents counts the events whose outputs, sent the same way,
	// share an id (docs/decisions/output-ids.md); SharedIDLast is the last.
	SharedIDEvents int64                 `json:"shared_id_events"`
	SharedIDLast   *engine.SharedIDEvent `json:"shared_id_last,omitempty"`
	// Latency is over the console's window (the last 15 minutes), when
	// the router keeps one.
	Latency  *history.Quantiles     `json:"latency,omitempty"`
	Failures []engine.PluginFailure `json:"failures"`
}

// getPlugins is GET /v1/plugins (admin): every loaded plugin, its module,
// its verdicts since start, its latency and its last failures.
func (s *Server) getPlugins(w http.ResponseWriter, r *http.Request) {
	var lat map[string]history.Quantiles
	if s.opts.History != nil {
		lat = s.opts.History.View(time.Now()).Latency[HistoryPlugin]
	}
	views := []pluginView{}
	for _, p := range s.engine.Plugins() {
		v := pluginView{Name: p.Name, UsedBy: p.UsedBy, Verdicts: p.Verdicts, Outputs: p.Outputs, Failures: p.Failures, FailureKinds: p.FailureKinds,
			SharedIDEvents: p.SharedIDEvents, SharedIDLast: p.SharedIDLast}
		if v.FailureKinds == nil {
			v.FailureKinds = map[string]int64{}
		}
		if v.UsedBy == nil {
			v.UsedBy = []string{}
		}
		if v.Failures == nil {
			v.Failures = []engine.PluginFailure{}
		}
		if m := p.Module; m != nil {
			v.File, v.SHA256, v.LoadedAt = m.File, m.SHA256, &m.LoadedAt
		}
		if q, ok := lat[p.Name]; ok {
			v.Latency = &q
		}
		views = append(views, v)
	}
	writeJSON(w, http.StatusOK, map[string]any{"plugins": views})
}

// The series names the console reads from the history (cmd/router wires
// the Prometheus families to them).
const (
	HistoryIn      = "in"      // events in, by queue
	HistoryOut     = "out"     // outputs published, by queue
	HistoryFsync   = "fsync"   // the data file's commits (write + fsync)
	HistoryPublish = "publish" // a batch's publish, by sink
	HistoryPlugin  = "plugin"  // one plugin call, by plugin
)

// getHistory is GET /v1/stats/history (admin): in and out rates per queue
// for the last minutes, and fsync, publish and plugin latency percentiles
// over the same window.
func (s *Server) getHistory(w http.ResponseWriter, r *http.Request) {
	if s.opts.History == nil {
		writeJSON(w, http.StatusOK, map[string]any{"interval_seconds": 0, "window_seconds": 0, "times": []time.Time{}, "rates": map[string]any{}, "latency": map[string]any{}})
		return
	}
	v := s.opts.History.View(time.Now()) // its samples' clock, not Options.Now (the engine's may run ahead)
	if v.Times == nil {
		v.Times = []time.Time{}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"interval_seconds": v.Interval.Seconds(), "window_seconds": v.Window.Round(time.Second).Seconds(),
		"times": v.Times, "rates": v.Rates, "latency": v.Latency,
	})
}
