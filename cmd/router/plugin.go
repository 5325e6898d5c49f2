package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sync/errgroup"

	switchyard "github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/api"
	"github.com/switchyard-router/switchyard/cloudevents"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/plugins/wasm"
)

// Exit codes of `router plugin test`.
const (
	pluginExitOK     = 0 // verdict ok (outputs, or none: dropped)
	pluginExitRetry  = 1 // verdict retry, or a trap, timeout, limit
	pluginExitReject = 2 // verdict reject
	pluginExitError  = 3 // the plugin did not load, bad flags or a bad event
)

// PluginCommand is `router plugin`: the plugin author's tools.
//
//	router plugin test <file.wasm> [-config k=v ...] < event.json
//	router plugin check <file.wasm> [-config k=v ...]
type PluginCommand struct {
	*Main
}

// Run dispatches to test or check.
func (c *PluginCommand) Run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		c.usage()
		return &exitError{code: pluginExitError, err: errors.New("plugin: name a subcommand: test, check, init, doctor, dev or state")}
	}
	switch args[0] {
	case "test":
		return c.test(ctx, args[1:])
	case "check":
		return c.check(ctx, args[1:])
	case "init":
		return c.init(args[1:])
	case "doctor":
		return c.doctor(ctx, args[1:])
	case "dev":
		return c.dev(ctx, args[1:])
	case "state":
		return c.state(ctx, args[1:])
	case "help", "-h", "-help", "--help":
		c.usage()
		return nil
	default:
		c.usage()
		return &exitError{code: pluginExitError, err: fmt.Errorf("plugin: unknown subcommand %q", args[0])}
	}
}

func (c *PluginCommand) usage() {
	fmt.Fprint(c.Stderr, `Tools for plugin authors (WebAssembly modules, plugin ABI v1).

Usage:
  router plugin test <file.wasm> [flags] < event.json
      Runs the plugin on one CloudEvent (structured JSON) and prints the
      verdict and the outputs as JSON; each output's "event" is again a
      structured CloudEvent, so outputs can feed the next plugin. An output
      destination "" means the event type's routes. The plugin's log() and
      stdout/stderr go to stderr (from -log-level on, trace by default);
      of the router's own lines only warnings and errors.
      Exit code: 0 ok (outputs, or none = filtered), 1 retry (also a trap,
      timeout or the memory limit), 2 reject (also a broken ABI rule), 3 the
      plugin did not load or bad input.
  router plugin test <file.wasm> -event e.json -expect e.expected.json [-update]
  router plugin test <file.wasm> -dir testdata/ [-update]
      Golden tests: compare the result with a file (took and the stack
      detail ignored); -dir runs every NAME.event.json against
      NAME.expected.json. -update writes the files from the results.
      Exit code: 0 every case matches, 1 some differ, 3 the plugin did not
      load, bad input or a golden file missing.
  router plugin check <file.wasm> [flags]
      Loads the plugin (validation, _initialize, sy_abi_version, sy_init)
      and describes it.
  router plugin init -lang go|c|rust|assemblyscript|wat NAME
      Writes the folder NAME: a plugin that builds and runs as it is, with
      its SDK, build.sh, golden tests and a policies.hcl (see its README).
  router plugin doctor -lang go|c|rust|assemblyscript|wat
      Checks the language's toolchain and says how to install what is missing.
  router plugin state NAME [-type T [-prefix P]] [-delete -type T (-key K | -prefix P)]
      A running router's state of the plugin NAME: its namespaces (one per
      event type), the keys of one, or remove a key or a prefix.
  router plugin dev [-config policies.hcl] [-build ./build.sh] [-watch .]
      Runs the router on the folder's policies.hcl and, when a file of the
      folder changes (not `+devSkipped+`),
      rebuilds and reloads it with the new module. What changes during
      builds is built for at most twice in a row, then told.

Run 'router plugin test -h' for the flags.
`)
}

// pluginFlags are the flags test and check share.
type pluginFlags struct {
	fs       *flag.FlagSet
	file     string
	name     string
	policies string
	config   kvFlag
	memory   sizeFlag
	timeout  time.Duration
	outputs  int
	outBytes sizeFlag
	logLevel string
	cacheDir string
	// known is the -policies file's configuration (plugin sets it): an
	// output's destination must name one of its sinks, and an output
	// without one goes along its event type's routes. nil without the file.
	known *config.Config
}

func (c *PluginCommand) flags(cmd string) *pluginFlags {
	f := &pluginFlags{fs: flag.NewFlagSet("router plugin "+cmd, flag.ContinueOnError)}
	fs := f.fs
	fs.SetOutput(c.Stderr)
	fs.Usage = func() {
		synopsis := "router plugin test <file.wasm> [flags] < event.json"
		if cmd == "check" {
			synopsis = "router plugin check <file.wasm> [flags]"
		}
		fmt.Fprintf(c.Stderr, "Usage: %s\n\nFlags (before or after the file):\n", synopsis)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.name, "name", "", "the plugin's name in logs and errors (default: the file name without .wasm)")
	fs.StringVar(&f.policies, "policies", "", "take the plugin's config and limits from the plugin block named -name in this policies.hcl")
	fs.Var(&f.config, "config", "a config pair key=value for sy_init (repeatable)")
	fs.Var(&f.memory, "memory", "limits.memory, e.g. 16MiB (default 16MiB)")
	durationVar(fs, &f.timeout, "timeout", 0, "limits.timeout (default 50ms)")
	fs.IntVar(&f.outputs, "max-outputs", 0, "limits.max_outputs (default 16)")
	fs.Var(&f.outBytes, "max-output-bytes", "limits.max_output_bytes, e.g. 1MiB (default 1MiB)")
	fs.StringVar(&f.logLevel, "log-level", "trace", "the lowest level of plugin log lines shown on stderr")
	fs.StringVar(&f.cacheDir, "cache-dir", defaultPluginCache(), `the compilation cache ("" = none): a Go plugin compiles in seconds, loads from the cache in milliseconds`)
	return f
}

// parse reads the flags; the file may come before or after them.
func (f *pluginFlags) parse(args []string) error {
	if err := parseFlags(f.fs, args); err != nil {
		return err
	}
	if f.fs.NArg() > 0 {
		f.file = f.fs.Arg(0)
		if err := parseFlags(f.fs, f.fs.Args()[1:]); err != nil {
			return err
		}
		if f.fs.NArg() > 0 {
			return fmt.Errorf("unexpected arguments %q", f.fs.Args())
		}
	}
	return nil
}

// plugin builds the config.Plugin: the policies block if any, then the
// flags on top.
func (f *pluginFlags) plugin() (config.Plugin, error) {
	p := config.Plugin{Limits: config.DefaultPluginLimits}
	if f.policies != "" {
		cfg, err := config.Load(f.policies)
		if err != nil {
			return p, err
		}
		f.known = cfg
		var names []string
		for _, b := range cfg.Plugins {
			names = append(names, b.Name)
			if b.Name == f.name || f.name == "" && len(cfg.Plugins) == 1 {
				p = b
			}
		}
		if p.Name == "" {
			return p, fmt.Errorf("%s: no plugin block %q (there are %q); name one with -name", f.policies, f.name, names)
		}
		if f.file == "" {
			f.file = p.Wasm
		}
	}
	if f.file == "" {
		return p, errors.New("name the plugin's .wasm file")
	}
	p.Wasm = f.file
	if f.name != "" {
		p.Name = f.name
	}
	if p.Name == "" {
		p.Name = strings.TrimSuffix(filepath.Base(f.file), ".wasm")
	}
	if len(f.config) > 0 && p.Config == nil {
		p.Config = map[string]string{}
	}
	for k, v := range f.config {
		p.Config[k] = v
	}
	if f.memory > 0 {
		p.Limits.Memory = int64(f.memory)
	}
	if f.timeout > 0 {
		p.Limits.Timeout = f.timeout
	}
	if f.outputs > 0 {
		p.Limits.MaxOutputs = f.outputs
	}
	if f.outBytes > 0 {
		p.Limits.MaxOutputBytes = int64(f.outBytes)
	}
	return p, nil
}

// defaultPluginCache is the user's cache directory: a module tested on
// several events compiles once.
func defaultPluginCache() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "switchyard", "wasm-cache")
}

// load starts a runtime and loads the plugin with one instance.
func (c *PluginCommand) load(ctx context.Context, f *pluginFlags) (*wasm.Plugin, func(), error) {
	pc, err := f.plugin()
	if err != nil {
		return nil, nil, &exitError{code: pluginExitError, err: err}
	}
	// The plugin's own lines at -log-level; the router's about it (loaded,
	// an instance discarded) only from warnings on: a command prints its
	// result, not its workings.
	logger := func(level hclog.Level) hclog.Logger {
		return hclog.New(&hclog.LoggerOptions{Name: "router", Level: level, Output: c.Stderr, Color: hclog.AutoColor})
	}
	rt, err := wasm.NewRuntime(ctx, wasm.RuntimeOptions{CacheDir: f.cacheDir,
		Logger: logger(hclog.LevelFromString(f.logLevel)), HostLogger: logger(hclog.Warn)})
	if err != nil {
		return nil, nil, &exitError{code: pluginExitError, err: err}
	}
	p, err := rt.Load(ctx, pc, wasm.LoadOptions{Instances: 1})
	if err != nil {
		rt.Close(context.Background())
		if _, refused := errors.AsType[*wasm.InitError](err); refused && len(f.config) == 0 && f.policies == "" {
			err = fmt.Errorf("%w (the plugin's sy_init ran without config: give it with -config key=value, repeatable, or take its plugin block with -policies FILE -name NAME)", err)
		}
		return nil, nil, &exitError{code: pluginExitError, err: err}
	}
	return p, func() { rt.Close(context.Background()) }, nil
}

func (c *PluginCommand) check(ctx context.Context, args []string) error {
	f := c.flags("check")
	if err := f.parse(args); err != nil {
		return flagError(err)
	}
	p, closeRT, err := c.load(ctx, f)
	if err != nil {
		return err
	}
	defer closeRT()
	info := p.Info()
	lim := p.Limits()
	mem := fmt.Sprintf("%d KiB declared minimum", info.MemoryMin>>10)
	if info.MemoryMax > 0 {
		mem += fmt.Sprintf(", %d KiB maximum", info.MemoryMax>>10)
	}
	if info.Tables > 0 {
		mem += fmt.Sprintf("; tables %d KiB (in limits.memory)", (info.Tables+1023)>>10)
	}
	fmt.Fprintf(c.Stdout, "%s: ok, plugin ABI v%d\n  name:    %s\n  exports: %s\n  imports: %s\n  memory:  %s\n  limits:  memory %d KiB, timeout %v, max_outputs %d, max_output_bytes %d KiB\n",
		p.File(), wasm.ABIVersion, p.Name(), strings.Join(info.Exports, ", "), orNone(strings.Join(info.Imports, ", ")),
		mem, lim.Memory>>10, lim.Timeout, lim.MaxOutputs, lim.MaxOutputBytes>>10)
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func (c *PluginCommand) test(ctx context.Context, args []string) error {
	f := c.flags("test")
	eventFile := f.fs.String("event", "-", `the event's file ("-" = stdin)`)
	expect := f.fs.String("expect", "", "compare the result with this golden file (the JSON this command prints; took is ignored)")
	dir := f.fs.String("dir", "", "run every NAME.event.json in this folder and compare each with NAME.expected.json")
	update := f.fs.Bool("update", false, "with -expect or -dir: write the results as the golden files instead of comparing")
	if err := f.parse(args); err != nil {
		return flagError(err)
	}
	if *dir != "" {
		return c.testDir(ctx, f, *dir, *update)
	}
	src, err := readEvent(c.Stdin, *eventFile)
	if err != nil {
		return &exitError{code: pluginExitError, err: err}
	}
	p, closeRT, err := c.load(ctx, f)
	if err != nil {
		return err
	}
	defer closeRT()
	state := wasm.MemoryState{}
	res, code, herr := runPluginOnce(switchyard.WithState(ctx, state), p, src, f.known)
	res.State = stateSnapshot(state)
	b := res.json()
	if *expect != "" {
		return c.golden(*expect, b, *update)
	}
	c.Stdout.Write(b)
	if sinks := namedSinks(res.Outputs); f.known == nil && len(sinks) > 0 {
		// Said beside the result, not in it (golden files stay as they
		// are): an SDK trial read "ok" for an output to a sink the router
		// did not have, which it dead-letters.
		fmt.Fprintf(c.Stderr, "note: the outputs name the sinks %s, which this test does not check without -policies FILE: the router dead-letters an output to a sink it does not have\n", strings.Join(sinks, ", "))
	}
	if code != pluginExitOK {
		return &exitError{code: code, err: herr}
	}
	return nil
}

// namedSinks is the sinks the outputs name (<sink>:<target>), each once,
// in order.
func namedSinks(outs []testOutput) []string {
	var sinks []string
	for _, o := range outs {
		if sink, _, ok := strings.Cut(o.Destination, ":"); ok && !slices.Contains(sinks, sink) {
			sinks = append(sinks, sink)
		}
	}
	return sinks
}

// readEvent reads an event file, or stdin for "-".
func readEvent(stdin io.Reader, file string) ([]byte, error) {
	var src []byte
	var err error
	if file == "-" {
		src, err = io.ReadAll(stdin)
	} else {
		src, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the event: %w", err)
	}
	return src, nil
}

// runPluginOnce runs p on the event in src and says what came of it, with
// the exit code a single test ends with. An output to a destination the
// router could not send to (not <sink>:<target>, a target its sink cannot
// take, or a sink not among known's, when the -policies file gave them) is
// a reject, as in the router, which dead-letters the event. Outputs that
// share an id are a warning (engine.SharedID), with the event type's
// routes when known has the type.
func runPluginOnce(ctx context.Context, p *wasm.Plugin, src []byte, known *config.Config) (testResult, int, error) {
	ev, err := parseCloudEvent(src)
	if err != nil {
		err = fmt.Errorf("the event: %w", err)
		return testResult{Plugin: p.Name(), Verdict: "error", Reason: err.Error(), Outputs: []testOutput{}}, pluginExitError, err
	}
	start := time.Now()
	outs, herr := p.Handle(ctx, ev)
	took := time.Since(start)

	res := testResult{Plugin: p.Name(), Event: ev.ID, Verdict: "ok", Outputs: []testOutput{}, Took: took.Round(time.Microsecond).String()}
	code := pluginExitOK
	var pe *wasm.Error
	switch {
	case herr == nil && len(outs) == 0:
		res.Note = "no outputs: the event is filtered (nothing sent)"
	case herr == nil:
		for _, o := range outs {
			res.Outputs = append(res.Outputs, testOutput{Destination: o.Destination, Key: o.Key, Event: cloudEventJSON(&o.Event)})
		}
		var configured func(string) bool
		var routes func() []string
		if known != nil {
			sinks := known.Sinks()
			configured = func(s string) bool { return slices.Contains(sinks, s) }
			if pol, ok := known.Policy(ev.Type); ok {
				routes = pol.RouteDestinations
			}
		}
		if err := engine.CheckDestinations(outs, configured); err != nil {
			res.Verdict, res.Reason, code, herr = "reject", err.Error()+" (the router dead-letters the event)", pluginExitReject, err
		}
		if why := engine.SharedID(outs, routes); why != "" {
			res.Warnings = append(res.Warnings, why)
		}
		if known != nil {
			res.Warnings = append(res.Warnings, uncapturedOutputs(known, outs)...)
		}
	case errors.As(herr, &pe):
		res.Verdict, res.Reason = pe.Verdict.String(), pe.Reason
		if pe.Cause != nil && strings.Contains(pe.Cause.Error(), "wasm stack trace") {
			res.Detail = strings.Split(strings.TrimSpace(pe.Cause.Error()), "\n")
		}
		code = pluginExitRetry
		if switchyard.IsPermanent(herr) {
			code = pluginExitReject
		}
	default:
		res.Verdict, res.Reason, code = "retry", herr.Error(), pluginExitRetry
	}
	return res, code, herr
}

// uncapturedOutputs says which outputs go to a subject that no declared
// stream of an embedded server captures (uncapturedBy): the router sends
// them, none is acknowledged, and it retries the event until it
// dead-letters it. The type's routes (no destination) are validate's to
// check.
func uncapturedOutputs(cfg *config.Config, outs []switchyard.PluginOutput) []string {
	var out []string
	for i, o := range outs {
		sink, subject, err := config.CheckDestination(o.Destination, nil)
		if err != nil {
			continue // the type's routes (no destination), or already a reject
		}
		if n := uncapturedBy(cfg, sink, subject); n != nil {
			out = append(out, fmt.Sprintf("output %d to %s: no declared stream of nats %q captures subject %q, so no publish there is acknowledged: the router retries the event, then dead-letters it; add the subject to one of its stream blocks",
				i, o.Destination, n.Name, subject))
		}
	}
	return out
}

func (r testResult) json() []byte {
	b, _ := json.MarshalIndent(r, "", "  ")
	return append(b, '\n')
}

func flagError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return &exitError{code: pluginExitError, err: err, told: told(err)}
}

// testResult is what `router plugin test` prints.
type testResult struct {
	Plugin  string   `json:"plugin"`
	Event   string   `json:"event"`
	Verdict string   `json:"verdict"`
	Reason  string   `json:"reason,omitempty"`
	Detail  []string `json:"detail,omitempty"`
	Note    string   `json:"note,omitempty"`
	// Warnings are what the router would log about the outputs (not a
	// failure: the exit code is the verdict's).
	Warnings []string     `json:"warnings,omitempty"`
	Outputs  []testOutput `json:"outputs"`
	// State is the plugin's state after the event (router plugin test
	// keeps one in memory; with -dir, from event to event): text values as
	// they are, others "base64:...".
	State map[string]string `json:"state,omitempty"`
	Took  string            `json:"took"`
}

type testOutput struct {
	Destination string          `json:"destination"`
	Key         string          `json:"key,omitempty"`
	Event       json.RawMessage `json:"event"`
}

// cloudEventJSON writes ev as a structured CloudEvent, as the API does.
func cloudEventJSON(ev *switchyard.Event) json.RawMessage {
	return cloudevents.EncodeJSON(ev)
}

// testEventTime is the time of a test event that gives none (ingest would
// stamp the time of arrival): fixed, so that golden files stay true.
const testEventTime = "2026-01-01T00:00:00Z"

// parseCloudEvent reads one structured-mode CloudEvent, leniently: what a
// test event leaves out of the required attributes gets a default
// (specversion 1.0, id "test-1", source "/router/plugin-test", type "test",
// time testEventTime);
// the rest is checked as ingest checks it (api.DecodeEvent).
func parseCloudEvent(src []byte) (*switchyard.Event, error) {
	src = bytes.TrimSpace(src)
	if len(src) == 0 {
		return nil, errors.New(`no event on stdin: pipe in a structured CloudEvent, e.g. {"type":"order.created","source":"/shop","id":"1","data":{"total":12}}`)
	}
	if src[0] == '[' {
		return nil, errors.New("a batch (JSON array): test one event per run")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(src, &m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	for k, v := range map[string]string{"specversion": "1.0", "id": "test-1", "source": "/router/plugin-test", "type": "test", "time": testEventTime} {
		if _, ok := m[k]; !ok {
			m[k], _ = json.Marshal(v)
		}
	}
	full, _ := json.Marshal(m)
	ev, err := api.DecodeEvent(full)
	if err != nil {
		return nil, err
	}
	return &ev, nil
}

// kvFlag is a repeatable key=value flag.
type kvFlag map[string]string

func (f *kvFlag) String() string { return "" }

func (f *kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not key=value", s)
	}
	if *f == nil {
		*f = kvFlag{}
	}
	(*f)[k] = v
	return nil
}

// sizeFlag is a size in bytes: 1048576, 512KiB, 16MiB, 1GB.
type sizeFlag int64

func (f *sizeFlag) String() string { return "" }

func (f *sizeFlag) Set(s string) error {
	units := map[string]int64{"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		i = len(s)
	}
	unit, ok := units[strings.ToLower(strings.TrimSpace(s[i:]))]
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if i == 0 || !ok || err != nil || n <= 0 || n > math.MaxInt64/unit {
		return fmt.Errorf("%q is not a size like 512KiB or 16MiB", s)
	}
	*f = sizeFlag(n * unit)
	return nil
}

// loadPlugins starts the WebAssembly runtime, with its compilation cache in
// <data dir>/wasm-cache (a restart does not compile again), and loads every
// plugin block; a relative wasm path is relative to the working directory.
// Close closes the runtime.
func (c *RunCommand) loadPlugins(ctx context.Context, cfg *config.Config) ([]switchyard.Plugin, error) {
	if len(cfg.Plugins) == 0 {
		return nil, nil
	}
	if c.wasm == nil {
		cacheDir := cfg.Storage.PluginCache
		if c.PluginCacheDir != "" {
			cacheDir = c.PluginCacheDir
		}
		rt, err := wasm.NewRuntime(ctx, wasm.RuntimeOptions{CacheDir: cacheDir, Logger: c.log})
		if err != nil {
			return nil, err
		}
		c.wasm = rt
	}
	// Compiling is the slow part of a load (seconds for a Go module on a
	// cold cache) and uses one core: load the plugins side by side.
	plugins := make([]switchyard.Plugin, len(cfg.Plugins))
	g, gctx := errgroup.WithContext(ctx)
	for i, pc := range cfg.Plugins {
		g.Go(func() error {
			defer c.progress.step("loading plugin %q", pc.Name)()
			start := time.Now()
			p, err := c.wasm.Load(gctx, pc, wasm.LoadOptions{})
			if err != nil {
				return fmt.Errorf("%s: %w", pc.At, err) // where the block is, as validate says it
			}
			c.log.Info("plugin loaded", "plugin", p.Name(), "file", pc.Wasm, "took", time.Since(start).Round(time.Microsecond))
			plugins[i] = p
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		closePlugins(ctx, slices.DeleteFunc(plugins, func(p switchyard.Plugin) bool { return p == nil }))
		return nil, err
	}
	return plugins, nil
}
