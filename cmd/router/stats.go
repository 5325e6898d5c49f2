package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"sort"
	"text/tabwriter"
	"time"
)

// StatsCommand is `router stats`: per type, the depth, the oldest pending
// age, the poll delay and the DLQ, from a running router.
type StatsCommand struct {
	*Main
}

// typeLine is one type's line: GET /v1/stats joined with GET /v1/dlq/stats.
type typeLine struct {
	Type          string  `json:"type"`
	Pending       int     `json:"pending"`
	InProcess     int     `json:"in_process"`
	OldestAgeSecs float64 `json:"oldest_pending_age_seconds"`
	PollDelaySecs float64 `json:"poll_delay_seconds"`
	DLQ           int     `json:"dlq"`
	Resolved      int     `json:"resolved"`
}

// Run runs the command.
func (c *StatsCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("router stats", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	af := &apiFlags{}
	af.register(fs)
	if _, err := parseInterspersed(fs, args); err != nil {
		return err
	}
	cl, err := af.client()
	if err != nil {
		return err
	}
	var stats struct {
		Types []typeLine `json:"types"`
	}
	if _, err := cl.getJSON(ctx, "/v1/stats", nil, &stats); err != nil {
		return err
	}
	var dlq struct {
		Types []struct {
			Type     string `json:"type"`
			DLQ      int    `json:"dlq"`
			Resolved int    `json:"resolved"`
		} `json:"types"`
	}
	if _, err := cl.getJSON(ctx, "/v1/dlq/stats", nil, &dlq); err != nil {
		return err
	}
	byType := make(map[string]typeLine, len(stats.Types))
	for _, l := range stats.Types {
		byType[l.Type] = l
	}
	for _, d := range dlq.Types {
		l := byType[d.Type]
		l.Type, l.DLQ, l.Resolved = d.Type, d.DLQ, d.Resolved
		byType[d.Type] = l
	}
	lines := make([]typeLine, 0, len(byType))
	for _, l := range byType {
		lines = append(lines, l)
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i].Type < lines[j].Type })
	if af.output == "json" {
		b, _ := json.Marshal(map[string]any{"types": lines})
		return writeIndented(c.Stdout, b)
	}
	if len(lines) == 0 {
		fmt.Fprintln(c.Stdout, "no event types yet")
		return nil
	}
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tPENDING\tIN PROCESS\tOLDEST\tPOLL DELAY\tDLQ\tRESOLVED")
	for _, l := range lines {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%d\t%d\n", tableCell(l.Type, 48), l.Pending, l.InProcess,
			secs(l.OldestAgeSecs), secs(l.PollDelaySecs), l.DLQ, l.Resolved)
	}
	return tw.Flush()
}

// secs renders seconds as a rounded duration: 0s, 250ms, 1m30s.
func secs(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d == 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
