package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-router/switchyard/internal/fsperm"
	"github.com/switchyard-router/switchyard/storage"
)

// BackupCommand is `router backup OUT`: a consistent copy of a running
// router's data file, over its API (GET /v1/backup), written to OUT only
// once it is whole and checked.
type BackupCommand struct {
	*Main
}

// Run streams the copy into OUT.partial, fsyncs it, checks it like `router
// db check`, and renames it to OUT.
func (c *BackupCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("router backup", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	af := &apiFlags{}
	af.registerUntimed(fs)
	fs.Usage = func() {
		fmt.Fprintln(c.Stderr, "Usage: router backup OUT [-socket ./data/router.sock | -addr HOST:PORT -token T]")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		if len(pos) > 1 {
			return &exitError{code: 2, err: fmt.Errorf("backup: one file to write, not %d: %q", len(pos), pos)}
		}
		return &exitError{code: 2, err: errors.New("backup: name the file to write")}
	}
	out := pos[0]
	if _, err := os.Stat(out); err == nil {
		return fmt.Errorf("backup: %s exists; the backup never overwrites a file", out)
	}
	cl, err := af.client()
	if err != nil {
		return err
	}
	n, rep, err := c.copyTo(ctx, cl, out)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if af.output == formatJSON {
		return json.NewEncoder(c.Stdout).Encode(map[string]any{"file": out, "bytes": n, "events": rep.Events})
	}
	fmt.Fprintf(c.Stdout, "backup %s: %d bytes, %d events, consistent\n", out, n, rep.Events)
	return nil
}

// copyTo makes the backup at out: the copy is made beside it and named out
// once it checks. A .partial there already is not this run's: another
// backup's, or one that was stopped, and left alone.
func (c *BackupCommand) copyTo(ctx context.Context, cl *apiClient, out string) (int64, *storage.CheckReport, error) {
	f, err := os.OpenFile(out+".partial", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return 0, nil, fmt.Errorf("%s.partial exists (another backup writing it, or one that was stopped): remove it if no backup runs", out)
	}
	if err != nil {
		return 0, nil, err
	}
	n, err := c.fetch(ctx, cl, f)
	var rep *storage.CheckReport
	if err == nil {
		rep, err = checkIsolated(ctx, out+".partial")
	}
	if err == nil && len(rep.Problems) > 0 {
		err = fmt.Errorf("the copy does not check: %v", rep.Problems)
	}
	if err != nil {
		os.Remove(out + ".partial")
		return 0, nil, err
	}
	// Never over a file made meanwhile (storage.PlaceNew).
	return n, rep, storage.PlaceNew(out+".partial", out)
}

// fetch writes GET /v1/backup to f (made with mode 0600: it holds every
// event), fsyncs and closes it; a copy shorter than its Content-Length is
// an error.
func (c *BackupCommand) fetch(ctx context.Context, cl *apiClient, f *os.File) (int64, error) {
	resp, err := cl.send(ctx, http.MethodGet, "/v1/backup", nil, nil)
	if err != nil {
		f.Close()
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(f, resp.Body)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || err == nil && resp.ContentLength >= 0 && n != resp.ContentLength:
		// "unexpected EOF" said nothing of why (a router that stopped).
		err = fmt.Errorf("the router ended the copy after %d of %d bytes (it stopped, or its log says why); nothing was kept: run the backup again", n, resp.ContentLength)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = storage.SyncDir(filepath.Dir(f.Name()))
	}
	return n, err
}

// DBCommand is `router db`: offline tools for a data file no router has
// open.
type DBCommand struct {
	*Main
}

// dbUsage is `router db`'s help.
const dbUsage = `Usage:
  router db check FILE [-o table|json]
      Checks a data file that no router has open: its size against its
      metadata, every page as bbolt's consistency check requires (each
      read once, so a file larger than memory checks at the disk's pace),
      and that every stored event decodes, under its own key. Read-only. Exit 0
      consistent, 1 problems found. (bbolt keeps no checksums: a changed
      byte inside an event's data is not seen.)
  router db compact FILE [-o table|json]
      Gives a data file's free space back to the filesystem: checks it
      (one that does not check is left as it is), copies it, every page
      packed full, checks the copy, gives it FILE's mode and owner, and
      renames it over FILE. The router must be stopped; it needs free
      space for the copy. FILE is the file itself, not a link to it.
  router db rollback FILE [-o table|json]
      Sets a data file that does not check back to the commit before its
      last, when that one checks: what a disk that failed while it took
      the last commit leaves (the last commit's pages torn). What the last
      commit stored, events acknowledged just before the disk failed, is
      lost. A file that checks, or one whose commit before does not
      either, is left as it is (exit 0 and 1). The router must be stopped.
      The page written over is kept in FILE.rollback until the end: the
      next rollback puts back one that was cut short.
  router db clock FILE [-forget] [-o table|json]
      Shows the last time the router's clock gave on FILE, and how far it
      is from this system's clock: a router started with its clock behind
      it goes on from it. -forget removes it (the router stopped cleanly),
      for a file whose router once ran with the clock set far ahead; what
      that router stored keeps its due times, so let its backlog drain
      first (stored retries and delays would wait for the system clock).
`

// dbToolUsage is dbUsage's part for tool: its line and what it does.
func dbToolUsage(tool string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.SplitAfter(dbUsage, "\n") {
		if strings.HasPrefix(line, "  router db ") {
			in = strings.HasPrefix(line, "  router db "+tool+" ")
		}
		if in {
			b.WriteString(line)
		}
	}
	return b.String()
}

// dbTools are `router db`'s subcommands.
var dbTools = []string{"check", "compact", "rollback", "clock"}

// Run dispatches `router db check FILE`, `router db compact FILE`, `router
// db rollback FILE` and `router db clock FILE`.
func (c *DBCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 || !slices.Contains(dbTools, args[0]) {
		fmt.Fprint(c.Stderr, dbUsage)
		if len(args) > 0 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
			return nil
		}
		if len(args) > 0 {
			return &exitError{code: 2, err: fmt.Errorf("db: unknown subcommand %q: %s", args[0], strings.Join(dbTools, ", "))}
		}
		return &exitError{code: 2, err: fmt.Errorf("db: name a subcommand: %s", strings.Join(dbTools, ", "))}
	}
	fs := flag.NewFlagSet("router db "+args[0], flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(c.Stderr, "Usage of router db %s:\n%s", args[0], dbToolUsage(args[0]))
		fs.PrintDefaults()
	}
	var output format
	formatVar(fs, &output, "o", "output", formatTable, formatJSON)
	forget := false
	if args[0] == "clock" {
		fs.BoolVar(&forget, "forget", false, "remove the file's clock (the router stopped): the next start takes the system clock's time")
	}
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fmt.Fprint(c.Stderr, dbUsage)
		return &exitError{code: 2, err: fmt.Errorf("db %s: name one data file (given %d: %q)", args[0], len(pos), pos)}
	}
	if err := c.asFolderWriter(args[0], pos[0]); err != nil {
		return fmt.Errorf("db %s: %w", args[0], err)
	}
	switch {
	case args[0] == "check":
		return c.check(ctx, pos[0], output)
	case args[0] == "rollback":
		return c.rollback(ctx, pos[0], output)
	case args[0] == "compact" || forget:
		if err := checkBeforeWriting(ctx, pos[0]); err != nil {
			return fmt.Errorf("db %s: %w", args[0], err)
		}
	}
	if args[0] == "compact" {
		return c.compact(pos[0], output)
	}
	return c.clock(pos[0], forget, output)
}

// asFolderWriter makes a db tool run by root act as a user who may change
// the data file's folder already (fsperm.BecomeWriterOf): it makes,
// renames and checks files there by path, and as root it followed what
// that user put at a path between two of its steps
// (docs/decisions/file-permissions.md, "The db tools run by root"). The
// tool checks in a child process of this binary (checkIsolated), which
// that user must then be able to run.
func (c *DBCommand) asFolderWriter(tool, path string) error {
	switched, err := fsperm.BecomeWriterOf(path)
	if err != nil || !switched {
		return err
	}
	dir := filepath.Dir(path)
	fmt.Fprintf(c.Stderr, "router db %s: acting as uid %d, who may change %s already (root's rights are not used in a folder another user may change)\n", tool, os.Getuid(), dir)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := fsperm.CanRun(self); err != nil {
		return fmt.Errorf("%s cannot be run by uid %d, as which this tool now checks the file: run a router binary that user may run (installed in /usr/local/bin, say), or run the tool as that user (sudo -u '#%d' router db %s %s): %w", self, os.Getuid(), os.Getuid(), tool, path, err)
	}
	return nil
}

// checkBeforeWriting checks the data file at path as router db check does
// (checkIsolated) before a tool writes it: compact copied a damaged file
// into one that checked (a damaged key moved its event out of reach of its
// id), and clock -forget stopped with bbolt's panic on one. A file that
// does not check is left as it is.
func checkBeforeWriting(ctx context.Context, path string) error {
	rep, err := checkIsolated(ctx, path)
	if err != nil {
		return err
	}
	if len(rep.Problems) > 0 {
		return fmt.Errorf("%s does not check (%s); it was left as it is: see router db check %s, and restore it from a backup (router backup)",
			path, strings.Join(rep.Problems, "; "), path)
	}
	return nil
}

// clock is `router db clock`.
func (c *DBCommand) clock(path string, forget bool, output format) error {
	mark, err := storage.ReadClock(path)
	if err == nil && forget {
		err = storage.ForgetClock(path)
	}
	if err != nil {
		return fmt.Errorf("db clock: %w", err)
	}
	ahead := time.Duration(0)
	if !mark.IsZero() {
		ahead = mark.Sub(time.Now()).Round(time.Second)
	}
	if output == formatJSON {
		return json.NewEncoder(c.Stdout).Encode(clockReport{Path: path, Clock: mark.UTC(), AheadOfSystem: ahead.Seconds(), Forgotten: forget && !mark.IsZero()})
	}
	switch {
	case mark.IsZero():
		fmt.Fprintf(c.Stdout, "%s: no clock kept (a new file, or one from a router before the clock was kept)\n", path)
		return nil
	case ahead > 0:
		fmt.Fprintf(c.Stdout, "%s: the router's clock last gave %s, %s ahead of this system's clock\n", path, mark.UTC().Format(time.RFC3339), ahead)
	default:
		fmt.Fprintf(c.Stdout, "%s: the router's clock last gave %s (%s ago by this system's clock)\n", path, mark.UTC().Format(time.RFC3339), -ahead)
	}
	if forget {
		fmt.Fprintln(c.Stdout, "forgotten: the next router on it starts at the system clock's time")
	}
	return nil
}

// clockReport is `router db clock -o json`.
type clockReport struct {
	Path          string    `json:"path"`
	Clock         time.Time `json:"clock,omitzero"`
	AheadOfSystem float64   `json:"ahead_of_system_seconds"`
	Forgotten     bool      `json:"forgotten,omitempty"`
}

// check is `router db check`.
func (c *DBCommand) check(ctx context.Context, path string, output format) error {
	rep, err := checkIsolated(ctx, path)
	if err != nil {
		return err
	}
	if output == formatJSON {
		if err := json.NewEncoder(c.Stdout).Encode(rep); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(c.Stdout, "%s: %d bytes, schema %s, %d events\n", rep.Path, rep.Bytes, schemaOf(rep), rep.Events)
		for _, p := range rep.Problems {
			fmt.Fprintf(c.Stdout, "  problem: %s\n", p)
		}
		if len(rep.Problems) == 0 {
			fmt.Fprintln(c.Stdout, "consistent")
		}
	}
	if len(rep.Problems) > 0 {
		return &exitError{code: 1, err: fmt.Errorf("db check: %s in %s", counted(len(rep.Problems), "problem"), rep.Path)}
	}
	return nil
}

// compact is `router db compact`.
func (c *DBCommand) compact(path string, output format) error {
	rep, err := storage.CompactFile(path)
	if err != nil {
		return fmt.Errorf("db compact: %w", err)
	}
	if output == formatJSON {
		return json.NewEncoder(c.Stdout).Encode(rep)
	}
	if rep.ReserveRemoved {
		fmt.Fprintf(c.Stdout, "%s: the disk had no room for the copy: removed the reserve beside it, which the router makes again once the disk has room\n", rep.Path)
	}
	if rep.Kept {
		fmt.Fprintf(c.Stdout, "%s: %d bytes, nothing to give back (a compacted copy was no smaller); left as it was\n", rep.Path, rep.Before)
		return nil
	}
	fmt.Fprintf(c.Stdout, "%s: %d bytes → %d bytes (%d freed)\n", rep.Path, rep.Before, rep.After, rep.Before-rep.After)
	return nil
}

// schemaOf says a checked file's schema, and whether this router reads it
// as it is or upgrades it when it opens it.
func schemaOf(rep *storage.CheckReport) string {
	switch {
	case rep.Schema == storage.SchemaVersion:
		return rep.Schema
	case rep.Schema == "":
		return "none"
	case !storage.ReadsSchema(rep.Schema):
		return fmt.Sprintf("%s (a newer router's: this one reads up to %s)", rep.Schema, storage.SchemaVersion)
	}
	return fmt.Sprintf("%s (router run upgrades it to %s, one way)", rep.Schema, storage.SchemaVersion)
}

// checkWorkerEnv marks the child process that checkIsolated starts.
const checkWorkerEnv = "SWITCHYARD_DB_CHECK_WORKER"

// checkIsolated runs storage.CheckFile in a child process (this binary,
// `db check -o json`): on a damaged file bbolt can panic in a goroutine of
// its own (its free-page scan asserts on a page that lies about itself),
// which no recover reaches and which would end the process. The child's
// crash becomes a problem in the report instead.
func checkIsolated(ctx context.Context, path string) (*storage.CheckReport, error) {
	if os.Getenv(checkWorkerEnv) == "1" {
		return storage.CheckFile(path)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, "db", "check", path, "-o", string(formatJSON))
	// GOGC=25: the child shares the router's cgroup, whose memory limit
	// gctune's headroom assumes is one process's; the check's live heap is
	// a few MB, and at the default headroom the two were killed in a
	// 64 MiB group (a memory trial: 57 MB resident, 22 MB at 25).
	cmd.Env = append(os.Environ(), checkWorkerEnv+"=1", "GOGC=25")
	// A SIGKILL of this process (the OOM killer, kill -9 outside systemd,
	// whose KillMode=mixed would end the child too) ends the check with
	// it: the next start checks again, and two checks would share the disk.
	cmd.SysProcAttr = checkChildAttr()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var rep storage.CheckReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err == nil && rep.Path != "" {
		return &rep, nil
	}
	if runErr == nil {
		return nil, fmt.Errorf("db check: the checking process printed no report")
	}
	if ctx.Err() != nil { // killed for the stop, not stopped by the file
		return nil, fmt.Errorf("the check was cut short, before it could say: %w", context.Cause(ctx))
	}
	if ee, ok := errors.AsType[*exec.ExitError](runErr); ok && ee.ExitCode() == -1 {
		// Ended by a signal from outside (the OOM killer, a kill): a
		// crash on the file exits 2 with what stopped it (the Go runtime
		// takes the faults), so this says nothing of the file (a review:
		// db rollback took it for damage and rolled a sound file back).
		return nil, fmt.Errorf("the checking process was ended from outside (%s) before it could say; check again", ee.ProcessState)
	}
	// No report: the child stopped (a panic) or could not check at all.
	msg := strings.TrimSpace(stderr.String())
	if first, _, ok := strings.Cut(msg, "\n\ngoroutine "); ok {
		msg = first
	}
	msg = strings.TrimPrefix(msg, "panic: ") // what stopped it, not how
	if strings.HasPrefix(msg, "router: ") {  // an error, not a crash
		return nil, errors.New(strings.TrimPrefix(msg, "router: "))
	}
	fi, _ := os.Stat(path)
	rep = storage.CheckReport{Path: path, Problems: []string{"the file is damaged: reading it stopped the checker: " + msg}}
	if fi != nil {
		rep.Bytes = fi.Size()
	}
	return &rep, nil
}

// checkAfterUncleanStop is storage.Options.CheckUnclean: it checks the
// whole data file in a child process (checkIsolated) when the last router
// on it did not stop cleanly, a torn write being likely then. bbolt meets
// damage inside a page on goroutines of its own, where its panic would end
// this process with a stack trace instead of an error. The check costs
// ~0.8 s per million events with the file cached (it decodes every record
// too), so storage calls it only after an unclean stop.
func checkAfterUncleanStop(ctx context.Context, path string) error {
	rep, err := checkIsolated(ctx, path)
	if err != nil {
		return fmt.Errorf("the last run did not stop cleanly, and checking the data file %s failed: %w", path, err)
	}
	if len(rep.Problems) > 0 {
		return fmt.Errorf("the last run did not stop cleanly, and the data file %s is damaged: %s; the file was left as it is: %s",
			path, strings.Join(rep.Problems, "; "), storage.DamageAdvice)
	}
	return nil
}
