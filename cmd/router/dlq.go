package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard-router/switchyard/api"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/storage"
)

// DLQCommand is `router dlq list|show|retry|resolve|delete`: the dead-letter
// queue of a running router, through its API.
type DLQCommand struct {
	*Main
}

const dlqUsage = `Usage:
  router dlq list    [-type T] [-status dlq|resolved] [-since 1h|RFC3339] [-limit 100] [-cursor C] [-all-pages]
  router dlq show    ID [-queue inbox:NAME [-source S]] [-tenant T]
  router dlq retry   ID... | -type T [-since S] [-source S] | -all        back to pending, attempts reset
  router dlq resolve ID... | -type T [-since S] [-source S] | -all        kept as resolved, removed after dlq { ttl }
  router dlq delete  ID... | -type T [-since S] [-source S] | -all        removed

An id of a tenant other than the default one needs -tenant (tenants choose
their ids independently). An inbox's dead letter is named with -queue
inbox:NAME (one) or -type inbox:NAME (with ids); an id that two sources
sent one inbox, with -source too. Every subcommand takes -socket PATH (default ./data/router.sock), or -addr
HOST:PORT with -token (or $SWITCHYARD_TOKEN, or -token-file) for the TCP
listener, and -o table|json.
`

// Run runs a dlq subcommand.
func (c *DLQCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(c.Stderr, dlqUsage)
		if len(args) == 0 {
			return &exitError{code: 2, err: errors.New("dlq: which subcommand?")}
		}
		return nil
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "list", "ls":
		return c.list(ctx, rest)
	case "show", "get":
		return c.show(ctx, rest)
	case "retry", "resolve", "delete":
		return c.act(ctx, sub, rest)
	default:
		fmt.Fprint(c.Stderr, dlqUsage)
		return &exitError{code: 2, err: fmt.Errorf("dlq: unknown subcommand %q", sub)}
	}
}

func (c *DLQCommand) flags(name string) (*flag.FlagSet, *apiFlags) {
	fs := flag.NewFlagSet("router dlq "+name, flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	af := &apiFlags{}
	af.register(fs)
	return fs, af
}

// dlqItemAt is when a dead letter was resolved, or else moved to the DLQ.
func dlqItemAt(it *api.DLQItem) time.Time {
	switch {
	case it.ResolvedAt != nil:
		return *it.ResolvedAt
	case it.MovedAt != nil:
		return *it.MovedAt
	}
	return time.Time{}
}

func (c *DLQCommand) list(ctx context.Context, args []string) error {
	fs, af := c.flags("list")
	typ := fs.String("type", "", "only this event type (or inbox:NAME)")
	status := fs.String("status", "dlq", "dlq, or resolved")
	since := fs.String("since", "", "only those that entered the DLQ since: a duration (1h) or an RFC 3339 time")
	limit := fs.Int("limit", 100, "items per page (at most 1000)")
	cursor := fs.String("cursor", "", "continue where a previous page ended")
	allPages := fs.Bool("all-pages", false, "follow the cursor to the last page")
	if err := parseFlagsOnly(fs, args); err != nil {
		return err
	}
	cl, err := af.client()
	if err != nil {
		return err
	}
	q := url.Values{}
	for k, v := range map[string]string{"type": *typ, "status": *status, "since": *since, "cursor": *cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	q.Set("limit", strconv.Itoa(*limit))
	items, raws, next, err := fetchDLQPages(ctx, cl, q, *allPages)
	if err != nil {
		return err
	}
	if af.output == formatJSON {
		return c.writeDLQJSON(raws, next)
	}
	if err := c.writeDLQTable(items, *status, cl.now()); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(c.Stderr, "more: %s (or -all-pages)\n", nextPageCommand(fs, next))
	}
	return nil
}

// nextPageCommand is the command that lists the page after this one: this
// one's flags, as given, with the cursor where it ended. A hint of the
// cursor alone listed the unfiltered dead letters (a new-user trial).
// A -token's value is left out: the hint goes to a terminal, and maybe a
// log ($SWITCHYARD_TOKEN gives it).
func nextPageCommand(fs *flag.FlagSet, cursor string) string {
	cmd := []string{fs.Name()}
	fs.Visit(func(f *flag.Flag) {
		switch {
		case f.Name == "cursor" || f.Name == "token":
		case isBoolFlag(f):
			cmd = append(cmd, "-"+f.Name+"="+f.Value.String())
		default:
			cmd = append(cmd, "-"+f.Name, shellWord(f.Value.String()))
		}
	})
	return strings.Join(append(cmd, "-cursor", cursor), " ")
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// shellWord is s as one word of a POSIX shell command line.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:@%+=,-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// fetchDLQPages gets a page of GET /v1/dlq, or with all every page, and
// returns the items both decoded and as the API sent them, and the cursor
// where the last page ended.
func fetchDLQPages(ctx context.Context, cl *apiClient, q url.Values, all bool) (items []api.DLQItem, raws []json.RawMessage, next string, err error) {
	for {
		var page struct {
			Items      []json.RawMessage `json:"items"`
			NextCursor string            `json:"next_cursor"`
		}
		if _, err := cl.getJSON(ctx, "/v1/dlq", q, &page); err != nil {
			return nil, nil, "", err
		}
		for _, raw := range page.Items {
			var it api.DLQItem
			if err := json.Unmarshal(raw, &it); err != nil {
				return nil, nil, "", err
			}
			items = append(items, it)
			raws = append(raws, raw)
		}
		next = page.NextCursor
		if !all || next == "" {
			return items, raws, next, nil
		}
		q.Set("cursor", next)
	}
}

func (c *DLQCommand) writeDLQJSON(raws []json.RawMessage, next string) error {
	out := map[string]any{"items": raws}
	if raws == nil {
		out["items"] = []json.RawMessage{}
	}
	if next != "" {
		out["next_cursor"] = next
	}
	b, _ := json.Marshal(out)
	return writeIndented(c.Stdout, b)
}

func (c *DLQCommand) writeDLQTable(items []api.DLQItem, status string, now time.Time) error {
	if len(items) == 0 {
		fmt.Fprintln(c.Stdout, "no dead letters")
		return nil
	}
	when := "MOVED"
	if storage.State(status) == storage.StateResolved {
		when = "RESOLVED"
	}
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ID\tTYPE\tTENANT\tATTEMPTS\t%s\tREASON\n", when)
	for _, it := range items {
		typ := it.Type
		if it.Queue != "" {
			typ = it.Queue + " (" + it.Type + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", tableCell(it.ID, 40), tableCell(typ, 32), tableCell(it.Tenant, 16),
			it.Attempts, shortAge(dlqItemAt(&it), now)+" ago", tableCell(it.Reason, 72))
	}
	return tw.Flush()
}

// dlqDetail is GET /v1/dlq/{id}, its event as the API wrote it.
type dlqDetail struct {
	api.DLQDetail
	Event map[string]json.RawMessage `json:"event"`
}

func dlqPath(id, suffix string) string {
	return "/v1/dlq/" + url.PathEscape(id) + suffix
}

func (c *DLQCommand) show(ctx context.Context, args []string) error {
	fs, af := c.flags("show")
	queue := fs.String("queue", "", "the inbox queue of the event (inbox:NAME); default: an outbound event")
	tenant := fs.String("tenant", "", "the tenant of the event (tenants choose ids independently); default: the default tenant")
	source := fs.String("source", "", "the source of the event, where two sources sent an inbox the same id")
	ids, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(ids) != 1 || ids[0] == "":
		return &exitError{code: 2, err: errors.New("dlq show: give one event id")}
	case ids[0] == "stats":
		// GET /v1/dlq/stats is the counts (docs/decisions/dlq-and-operator-access.md);
		// read as a dead letter it printed an empty one.
		return &exitError{code: 2, err: errors.New(`dlq show: an event whose id is "stats" cannot be shown (its path is the DLQ's counts'); "router dlq list" lists it, and retry, resolve and delete take it`)}
	}
	cl, err := af.client()
	if err != nil {
		return err
	}
	q := refQuery(*queue, *tenant, *source)
	var d dlqDetail
	raw, err := cl.getJSON(ctx, dlqPath(ids[0], ""), q, &d)
	if err != nil {
		return err
	}
	if af.output == formatJSON {
		return writeIndented(c.Stdout, raw)
	}
	if err := c.writeDLQSummary(&d, cl.now()); err != nil {
		return err
	}
	writeDLQAttempts(c.Stdout, d.History)
	writeDLQOutputs(c.Stdout, d.Outputs)
	ev, _ := json.MarshalIndent(d.Event, "  ", "  ")
	fmt.Fprintf(c.Stdout, "\nEvent:\n  %s\n", ev)
	return nil
}

// writeDLQAttempts writes a dead letter's attempts, with their errors:
// every one, those before a retry too (the Attempts row above counts
// since the last retry, which resets it).
func writeDLQAttempts(w io.Writer, history []storage.Attempt) {
	fmt.Fprintf(w, "\nHistory (%s, retries included):\n", counted(len(history), "attempt"))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tAT\tERROR")
	for i, a := range history {
		fmt.Fprintf(tw, "  %d\t%s\t%s\n", i+1, a.At.Local().Format(time.RFC3339), tableCell(a.Error, 120))
	}
	tw.Flush()
}

// writeDLQOutputs writes a dead letter's outputs and where each stands.
func writeDLQOutputs(w io.Writer, outputs []storage.Output) {
	if len(outputs) == 0 {
		return
	}
	fmt.Fprintf(w, "\nOutputs (%d):\n", len(outputs))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  DESTINATION\tMSG ID\tDELIVERED\tPOSITION\tLAST ERROR")
	for _, o := range outputs {
		pos := positionText(o.Position)
		if pos == "" {
			pos = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%t\t%s\t%s\n", o.Destination, o.MsgID, o.Delivered, pos, tableCell(o.LastError, 80))
	}
	tw.Flush()
}

// writeDLQSummary writes a dead letter's fields, one a line.
func (c *DLQCommand) writeDLQSummary(d *dlqDetail, now time.Time) error {
	tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, shown(v))
		}
	}
	ts := func(t *time.Time) string {
		if t == nil || t.IsZero() {
			return ""
		}
		return t.Local().Format(time.RFC3339) + " (" + shortAge(*t, now) + " ago)"
	}
	row("ID", d.ID)
	row("Queue", d.Queue)
	row("Type", d.Type)
	row("Source", d.Source)
	row("Tenant", d.Tenant)
	row("State", string(d.State))
	attempts := strconv.Itoa(d.Attempts)
	if len(d.History) > d.Attempts {
		attempts += " (since the last retry)"
	}
	row("Attempts", attempts)
	row("Created", ts(&d.CreatedAt))
	row("Moved to DLQ", ts(d.MovedAt))
	row("Resolved", ts(d.ResolvedAt))
	row("Reason", d.Reason)
	return tw.Flush()
}

var pastTense = map[engine.DLQAction]string{engine.DLQActionRetry: "retried", engine.DLQActionResolve: "resolved", engine.DLQActionDelete: "deleted"}

// checkSelection refuses what an action would select nothing by, or guess
// at: no ids, filter or -all (a -queue names the queue of ids, and selects
// nothing alone); an empty id; -all with ids, a filter or a -queue.
func checkSelection(action string, ids []string, filtered, all, queue bool) error {
	var err error
	switch {
	case len(ids) == 0 && !filtered && !all:
		err = fmt.Errorf("dlq %s: give event ids, or a filter (-type, -since, -source, -tenant), or -all", action)
	case slices.Contains(ids, ""):
		err = fmt.Errorf("dlq %s: an event id is never empty", action)
	case all && (len(ids) > 0 || filtered || queue):
		err = fmt.Errorf("dlq %s: -all takes every dead letter and comes alone: give it without ids, -type, -since, -source, -tenant or -queue", action)
	}
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	return nil
}

// act is retry, resolve or delete: of one id (the single route), or of
// several ids or a filter (the bulk route, chunked transactions).
func (c *DLQCommand) act(ctx context.Context, action string, args []string) error {
	fs, af := c.flags(action)
	typ := fs.String("type", "", "every dead letter of this event type (or inbox:NAME; with ids: the inbox the ids are in)")
	status := fs.String("status", "", "which dead letters a filter walks: dlq (default) or resolved")
	since := fs.String("since", "", "those that entered the DLQ since: a duration (1h) or an RFC 3339 time")
	all := fs.Bool("all", false, "every dead letter (no filter)")
	queue := fs.String("queue", "", "the inbox queue of a single id (inbox:NAME)")
	tenant := fs.String("tenant", "", "only this tenant's dead letters; with ids: the tenant they belong to (default: the default tenant)")
	source := fs.String("source", "", "only events of this source (where two sources sent an inbox the same id, the one meant)")
	ids, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	filtered := *typ != "" || *since != "" || *source != "" || *tenant != ""
	if err := checkSelection(action, ids, filtered, *all, *queue != ""); err != nil {
		return err
	}
	cl, err := af.client()
	if err != nil {
		return err
	}
	if len(ids) == 1 && *typ == "" && *since == "" && *status == "" && !*all {
		return c.actOne(ctx, cl, af, action, ids[0], refQuery(*queue, *tenant, *source))
	}
	if *queue != "" && *typ == "" {
		*typ = *queue
	}
	body := map[string]any{}
	for k, v := range map[string]string{"type": *typ, "status": *status, "since": *since, "tenant": *tenant, "source": *source} {
		if v != "" {
			body[k] = v
		}
	}
	if len(ids) > 0 {
		body["ids"] = ids
	}
	if *all {
		body["all"] = true
	}
	raw, err := cl.do(ctx, http.MethodPost, "/v1/dlq/"+action, nil, body)
	if err != nil {
		return err
	}
	var res api.DLQBulk
	if err := json.Unmarshal(raw, &res); err != nil {
		return err
	}
	if af.output == formatJSON {
		err = writeIndented(c.Stdout, raw)
	} else {
		c.writeBulk(&res)
	}
	if err == nil && (len(res.NotFound) > 0 || len(res.Skipped) > 0) {
		err = &exitError{code: 1, err: fmt.Errorf("dlq %s: %d not found, %d skipped", action, len(res.NotFound), len(res.Skipped))}
	}
	return err
}

// writeBulk writes what a bulk action did: how many, and which ids it did
// not find or skipped, and why.
func (c *DLQCommand) writeBulk(res *api.DLQBulk) {
	fmt.Fprintf(c.Stdout, "%s %d of %d matched\n", pastTense[res.Action], res.Done, res.Matched)
	if len(res.NotFound) > 0 {
		fmt.Fprintf(c.Stdout, "not found (%d): %s\n", len(res.NotFound), strings.Join(res.NotFound, " "))
	}
	if len(res.Skipped) > 0 {
		fmt.Fprintf(c.Stdout, "skipped (%d):\n", len(res.Skipped))
		tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
		for _, s := range res.Skipped {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", tableCell(s.ID, 40), s.Code, tableCell(s.Reason, 100))
		}
		tw.Flush()
	}
}

// refQuery is the query that addresses one dead letter besides its id.
func refQuery(queue, tenant, source string) url.Values {
	q := url.Values{}
	if source != "" {
		q.Set("source", source)
	}
	if queue != "" {
		q.Set("queue", queue)
	}
	if tenant != "" {
		q.Set("tenant", tenant)
	}
	return q
}

func (c *DLQCommand) actOne(ctx context.Context, cl *apiClient, af *apiFlags, action, id string, q url.Values) error {
	method, path := http.MethodPost, dlqPath(id, "/"+action)
	if action == "delete" {
		method, path = http.MethodDelete, dlqPath(id, "")
	}
	raw, err := cl.do(ctx, method, path, q, nil)
	if err != nil {
		return err
	}
	if af.output == formatJSON {
		if len(raw) == 0 {
			raw, _ = json.Marshal(map[string]any{"id": id, "deleted": true})
		}
		return writeIndented(c.Stdout, raw)
	}
	var st api.DLQItem
	json.Unmarshal(raw, &st)
	switch action {
	case "retry":
		fmt.Fprintf(c.Stdout, "retried %s: %s, due now\n", id, st.State)
	case "resolve":
		fmt.Fprintf(c.Stdout, "resolved %s\n", id)
	default:
		fmt.Fprintf(c.Stdout, "deleted %s\n", id)
	}
	return nil
}
