package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/switchyard-router/switchyard/api"
)

// StatsCommand is `router stats`: per type, the depth, the oldest pending
// age, the poll delay and the DLQ, from a running router.
type StatsCommand struct {
	*Main
}

// typeLine is one type's line: GET /v1/stats joined with GET /v1/dlq/stats.
type typeLine struct {
	api.TypeStats
	Resolved int `json:"resolved"`
}

// Run runs the command.
func (c *StatsCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("router stats", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	af := &apiFlags{}
	af.register(fs)
	if err := parseFlagsOnly(fs, args); err != nil {
		return err
	}
	cl, err := af.client()
	if err != nil {
		return err
	}
	// The API's sections as they are; only "types" is joined with the DLQ.
	var stats map[string]json.RawMessage
	if _, err := cl.getJSON(ctx, "/v1/stats", nil, &stats); err != nil {
		return err
	}
	var types []typeLine
	if err := json.Unmarshal(stats["types"], &types); err != nil {
		return fmt.Errorf("/v1/stats: no types in the answer: %v", err)
	}
	var dlq struct {
		Types []api.DLQStats `json:"types"`
	}
	if _, err := cl.getJSON(ctx, "/v1/dlq/stats", nil, &dlq); err != nil {
		return err
	}
	byType := make(map[string]typeLine, len(types))
	for _, l := range types {
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
	if af.output == formatJSON {
		stats["types"], _ = json.Marshal(lines)
		b, _ := json.Marshal(stats)
		return writeIndented(c.Stdout, b)
	}
	if len(lines) == 0 {
		fmt.Fprintln(c.Stdout, "no event types yet")
	} else if err := c.typeTable(lines); err != nil {
		return err
	}
	c.storageLine(stats["storage"])
	c.sinkLines(stats["sinks"], cl.now())
	return nil
}

func (c *StatsCommand) typeTable(lines []typeLine) error {
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tPENDING\tIN PROCESS\tOLDEST\tPOLL DELAY\tDLQ\tRESOLVED")
	for _, l := range lines {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%d\t%d\n", tableCell(l.Type, 48), l.Pending, l.InProcess,
			secs(l.OldestAgeSecs), secs(l.PollDelaySecs), l.DLQ, l.Resolved)
	}
	return tw.Flush()
}

// storageLine prints the data file's use against its budget and the disk
// (GET /v1/stats "storage"); nothing when the API sent none.
func (c *StatsCommand) storageLine(raw json.RawMessage) {
	var st struct {
		Used     int64 `json:"used_bytes"`
		File     int64 `json:"file_bytes"`
		DiskFree int64 `json:"disk_free_bytes"`
		Reserve  int64 `json:"reserve_bytes"`
		MaxSize  int64 `json:"max_size_bytes"`
	}
	if raw == nil || json.Unmarshal(raw, &st) != nil {
		return
	}
	budget := "no max_size"
	if st.MaxSize > 0 {
		budget = "max_size " + ibytes(st.MaxSize)
	}
	fmt.Fprintf(c.Stdout, "\nstorage: %s in use (%s), file %s, %s free on its disk, reserve %s\n",
		ibytes(st.Used), budget, ibytes(st.File), ibytes(st.DiskFree), ibytes(st.Reserve))
}

// sinkLines prints each sink's last publish error since start (GET
// /v1/stats "sinks", present once a sink has failed), its age from now,
// the router's.
func (c *StatsCommand) sinkLines(raw json.RawMessage, now time.Time) {
	var sinks map[string]struct {
		Err  string    `json:"last_error"`
		At   time.Time `json:"last_error_at"`
		Type string    `json:"type"`
	}
	if raw == nil || json.Unmarshal(raw, &sinks) != nil || len(sinks) == 0 {
		return
	}
	names := make([]string, 0, len(sinks))
	for n := range sinks {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(c.Stdout, "\nlast publish error per sink:")
	for _, n := range names {
		e := sinks[n]
		when := "at an unknown time"
		if !e.At.IsZero() {
			when = shortAge(e.At, now) + " ago"
		}
		of := ""
		if e.Type != "" {
			of = ", type " + tableCell(e.Type, 48)
		}
		fmt.Fprintf(c.Stdout, "  %s  %s%s: %s\n", n, when, of, tableCell(e.Err, 200))
	}
}

// ibytes renders a byte count in binary units: 512 B, 1.5 KiB, 12.3 MiB.
func ibytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
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
