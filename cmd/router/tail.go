package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/switchyard-router/switchyard"
)

// TailCommand is `router tail`: the outputs a running router publishes,
// as they are acknowledged (GET /v1/tail, server-sent events).
type TailCommand struct {
	*Main
}

// tailLine is one published output as GET /v1/tail sends it.
type tailLine struct {
	At          time.Time            `json:"at"`
	Type        string               `json:"type"`
	Destination string               `json:"destination"`
	Position    *switchyard.Position `json:"position"`
	Event       struct {
		ID      string `json:"id"`
		Source  string `json:"source"`
		Subject string `json:"subject"`
	} `json:"event"`
}

// Run runs the command until ctx ends (Ctrl-C) or the router goes away.
func (c *TailCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("router tail", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	af := &apiFlags{}
	af.register(fs)
	typ := fs.String("type", "", "only outputs of this event type")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: router tail [-type T] [-o table|json] [-socket PATH | -addr HOST:PORT -token T]\n\nPrints each output the router publishes, as the broker acknowledges it (-o json: one JSON object a line, the event included).")
		fs.PrintDefaults()
	}
	if err := parseFlagsOnly(fs, args); err != nil {
		return err
	}
	cl, err := af.client()
	if err != nil {
		return err
	}
	q := url.Values{}
	if *typ != "" {
		q.Set("type", *typ)
		c.warnUnknownType(ctx, cl, *typ)
	}
	cl.hc.Timeout = 0 // a stream: it lasts until ctx ends
	resp, err := cl.send(ctx, "GET", "/v1/tail", q, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	err = c.print(resp.Body, af.output == formatJSON)
	if ctx.Err() != nil {
		return nil // interrupted: the normal way to stop
	}
	if err == nil {
		err = errors.New("the router ended the stream (shutting down?)")
	}
	return err
}

// warnUnknownType says on stderr when no queue of type t is configured or
// stored: a mistyped -type would wait in silence for ever. A catch-all may
// still take it, so it only warns.
func (c *TailCommand) warnUnknownType(ctx context.Context, cl *apiClient, t string) {
	var stats struct {
		Types []typeLine `json:"types"`
	}
	if _, err := cl.getJSON(ctx, "/v1/stats", nil, &stats); err != nil {
		return
	}
	for _, l := range stats.Types {
		if l.Type == t {
			return
		}
	}
	fmt.Fprintf(c.Stderr, "router tail: the router has no event type %q configured or stored (yet); waiting for its outputs all the same\n", t)
}

// print reads server-sent events from r and prints the published ones.
func (c *TailCommand) print(r io.Reader, asJSON bool) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			event = ""
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			c.printData(event, strings.TrimPrefix(line, "data: "), asJSON)
		}
	}
	return sc.Err()
}

func (c *TailCommand) printData(event, data string, asJSON bool) {
	switch event {
	case "published":
		if asJSON {
			fmt.Fprintln(c.Stdout, data)
			return
		}
		var l tailLine
		if err := json.Unmarshal([]byte(data), &l); err != nil {
			fmt.Fprintf(c.Stderr, "router tail: unreadable line: %v\n", err)
			return
		}
		fmt.Fprintf(c.Stdout, "%s  %-20s %s → %s%s\n", l.At.Local().Format("15:04:05.000"), l.Type, l.Event.ID, l.Destination, l.where())
	case "dropped":
		fmt.Fprintf(c.Stderr, "router tail: fell behind, outputs skipped: %s\n", data)
	}
}

// where is the broker position, as " (stream events #12)".
func (l *tailLine) where() string {
	if p := positionText(l.Position); p != "" {
		return " (" + p + ")"
	}
	return ""
}

// positionText is where a broker holds an output: "stream events #12",
// "orders/3@1042"; "" when unknown.
func positionText(p *switchyard.Position) string {
	switch {
	case p == nil:
		return ""
	case p.Stream != "":
		return fmt.Sprintf("stream %s #%d", p.Stream, p.Sequence)
	case p.Topic != "":
		return fmt.Sprintf("%s/%d@%d", p.Topic, p.Partition, p.Offset)
	}
	return ""
}
