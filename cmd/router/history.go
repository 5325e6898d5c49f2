package main

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-router/switchyard/api"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/internal/history"
)

// startHistory keeps the console's last 15 minutes (rates in and out per
// queue; fsync, publish and plugin latency), read from the router's own
// registry every 10 s until ctx ends. Nothing on the event path changes:
// the series are the ones /metrics exports.
func startHistory(ctx context.Context, g prometheus.Gatherer) *history.Recorder {
	rec := history.New(g,
		[]history.Series{
			{Name: api.HistoryIn, Family: "switchyard_events_ingested_total", Label: "type"},
			{Name: api.HistoryIn, Family: "switchyard_inbox_received_total", Label: "inbox", Key: config.InboxQueueName},
			{Name: api.HistoryOut, Family: "switchyard_published_total", Label: "type"},
		},
		[]history.Series{
			{Name: api.HistoryFsync, Family: "switchyard_storage_commit_seconds"},
			{Name: api.HistoryPublish, Family: "switchyard_publish_duration_seconds", Label: "sink"},
			{Name: api.HistoryPlugin, Family: "switchyard_plugin_duration_seconds", Label: "plugin"},
		},
		history.DefaultInterval, history.DefaultKeep)
	go rec.Run(ctx)
	return rec
}
