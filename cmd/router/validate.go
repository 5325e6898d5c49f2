package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	switchyard "github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/api"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/internal/fsperm"
	"github.com/switchyard-router/switchyard/plugins/kafka"
	natsplugin "github.com/switchyard-router/switchyard/plugins/nats"
	"github.com/switchyard-router/switchyard/plugins/wasm"
	"github.com/switchyard-router/switchyard/plugins/webhook"
	"github.com/switchyard-router/switchyard/storage"
)

// ValidateCommand checks a configuration file and reports its problems
// with their file:line:col: a syntax error alone (nothing past it can be
// read), else every problem of the blocks, and once there are none, those
// that need the whole (plugin files, what the streams capture); with -check-sinks
// it also connects to every external broker and checks the routed Kafka
// topics exist.
type ValidateCommand struct {
	*Main
}

// Run parses flags and validates.
func (c *ValidateCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("router validate", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	path := fs.String("config", defaultConfigPath, "the configuration file")
	checkSinks := fs.Bool("check-sinks", false, "also connect to every external broker and check the routed Kafka topics")
	var timeout time.Duration
	durationVar(fs, &timeout, "timeout", 10*time.Second, "with -check-sinks: how long each check may take")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		*path = fs.Arg(0)
	}
	cfg, err := loadConfig(*path, false)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && *path == defaultConfigPath {
			// router run starts anyway: say why validate does not.
			err = fmt.Errorf("%w (router run starts on the defaults built into the binary when %s does not exist; validate checks a file: name one with -config, or copy policies.hcl from the repository)", err, defaultConfigPath)
		}
		return &exitError{code: 1, err: err}
	}
	if problems := checkLoaded(ctx, cfg); len(problems) > 0 {
		return &exitError{code: 1, err: errors.New(strings.Join(problems, "\n"))}
	}
	for _, w := range configWarnings(cfg) {
		fmt.Fprintf(c.Stdout, "%s\n", w)
	}
	for _, f := range foldersToMake(cfg, false) {
		fmt.Fprintf(c.Stdout, "%s: note: %s\n", f.at, f)
	}
	fmt.Fprintf(c.Stdout, "%s: ok (%s, sinks %v)\n", *path, counted(len(cfg.Events), "event type"), cfg.Sinks())
	if !*checkSinks {
		return nil
	}
	var failed []error
	checked := checkSinksOf(ctx, cfg, timeout)
	for _, name := range slices.Sorted(maps.Keys(checked)) {
		err := checked[name]
		if err == nil {
			fmt.Fprintf(c.Stdout, "%s: reachable\n", name)
			continue
		}
		// The sinks' errors name the sink already.
		fmt.Fprintf(c.Stdout, "%s: %s\n", name, strings.TrimPrefix(err.Error(), name+": "))
		if !errors.Is(err, errEmbedded) {
			failed = append(failed, err)
		}
	}
	if len(failed) > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d sink check(s) failed", len(failed))}
	}
	return nil
}

// errEmbedded is checkSinksOf's answer for an embedded NATS server: it
// only exists while the router runs. Not a failure: its streams are
// checked against the routes with the config (checkLoaded).
var errEmbedded = errors.New("embedded (it starts with the router): not checked")

// checkSinksOf connects to each external sink of cfg: NATS servers (an
// embedded one answers errEmbedded) and Kafka clusters, whose routed
// topics must exist.
func checkSinksOf(ctx context.Context, cfg *config.Config, timeout time.Duration) map[string]error {
	out := make(map[string]error)
	for _, n := range cfg.NATS {
		if n.Embedded {
			out[n.SinkName()] = errEmbedded
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		// Subjects a stream block captures are run's to set up on the
		// server; checking must not create or change streams.
		subjects := slices.DeleteFunc(routedSubjects(cfg, n.SinkName()), func(s string) bool { return natsplugin.StreamCapturing(n.Streams, s) != "" })
		n.Streams = nil
		sink, err := natsplugin.Open(cctx, n, n.URL, nil)
		if err == nil {
			err = sink.Healthy(cctx)
			if err == nil && n.JetStream && len(subjects) > 0 {
				err = sink.CheckSubjects(cctx, subjects)
			}
			err = errors.Join(err, sink.Close(cctx))
		}
		cancel()
		out[n.SinkName()] = err
	}
	for _, k := range cfg.Kafka {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		sink, err := kafka.Open(cctx, k, nil)
		if err == nil {
			err = sink.Healthy(cctx)
			if topics := routedTopics(cfg, sink); err == nil && len(topics) > 0 {
				err = sink.CheckTopics(cctx, topics)
			}
			err = errors.Join(err, sink.Close(cctx))
		}
		cancel()
		out[k.SinkName()] = err
	}
	return out
}

// checkFiles reads the files the configuration names for secrets: the
// tokens file parses (when listen.http serves, as the API reads it only
// then: configWarnings says so otherwise), and each secret file is private
// to the router's user. router run asks it first, before it starts
// anything.
func checkFiles(cfg *config.Config) []string {
	var problems []string
	if cfg.Listen.TokensFile != "" && cfg.Listen.HTTP != "" {
		if _, err := api.LoadTokens(cfg.Listen.TokensFile); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", cfg.Listen.TokensAt, err))
		}
	}
	for _, f := range cfg.SecretFiles {
		err := config.CheckPrivate(f.Path)
		if errors.Is(err, fs.ErrNotExist) && madeByRouter(cfg, f.Path) {
			continue
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %s: %v", f.At, f.Attr, err))
		}
	}
	for _, e := range cfg.SecretEnvs {
		if _, err := config.LookupSecretEnv(e.Name); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %s: %v", e.At, e.Attr, err))
		}
	}
	return problems
}

// checkLoaded checks what parsing cannot: the files the config names and
// what they hold. Each problem is a "file:line:col: ..." line.
//   - tokens_file: exists, private (config.CheckPrivate), holds valid
//     tokens;
//   - every other file of secrets (password, token, creds, nkey seed, TLS
//     key): private, as the router checks it when it connects (an
//     embedded server's password file may not exist yet: the router
//     makes it);
//   - every plugin: loads as the router loads it (compiled, ABI exports and
//     imports, _initialize and sy_init with its config);
//   - every route to an embedded NATS server (JetStream): one of its
//     declared streams captures the subject, or no publish is acknowledged;
//   - the streams of a nats block: no two capture one subject, which
//     JetStream refuses when the router creates them;
//   - the data file and the folders router run fills: this user can write
//     them (checkWritable).
func checkLoaded(ctx context.Context, cfg *config.Config) []string {
	problems := checkFiles(cfg)
	problems = append(problems, checkPlaces(cfg)...)
	problems = append(problems, checkWritable(cfg)...)
	problems = append(problems, checkPlugins(ctx, cfg)...)
	if len(cfg.Sinks()) == 0 {
		for _, t := range slices.Sorted(maps.Keys(cfg.Events)) {
			if len(cfg.Events[t].Plugins) > 0 {
				problems = append(problems, fmt.Sprintf("%s: event %q runs plugins, but the configuration has no sink (no nats or kafka block): every output would be dead-lettered; add the sink its plugins send to",
					cfg.EventsAt[t], t))
			}
		}
	}
	for _, n := range cfg.NATS {
		for _, o := range natsplugin.Overlaps(n.Streams) {
			problems = append(problems, fmt.Sprintf("%s: nats %q: stream %q captures %q, which overlaps %q of stream %q: JetStream refuses two streams that capture one subject",
				cfg.StreamsAt[n.Name+"/"+o.Second], n.Name, o.Second, o.SecondSubject, o.FirstSubject, o.First))
		}
	}
	problems = append(problems, uncapturedInboxes(cfg)...)
	return append(problems, uncapturedRoutes(cfg)...)
}

// uncapturedInboxes lists the inboxes of an embedded NATS server (with
// JetStream) whose subject no declared stream, or more than one, stores:
// router run cannot find the one stream to consume and refuses to start.
func uncapturedInboxes(cfg *config.Config) []string {
	var out []string
	for _, in := range cfg.Inboxes {
		for _, n := range cfg.NATS {
			if in.From != n.SinkName() || !n.Embedded || !n.JetStream {
				continue
			}
			at := cfg.BlocksAt[config.InboxSinkName(in.Name)]
			switch streams := natsplugin.StreamsStoring(n.Streams, in.Subject); len(streams) {
			case 0:
				out = append(out, fmt.Sprintf("%s: inbox %q reads subject %q, which no stream of nats %q stores: router run would refuse to start; add the subject to a stream block",
					at, in.Name, in.Subject, n.Name))
			case 1:
			default:
				out = append(out, fmt.Sprintf("%s: inbox %q reads subject %q, which several streams of nats %q store (%s): an inbox consumes one stream; narrow its subject",
					at, in.Name, in.Subject, n.Name, strings.Join(streams, ", ")))
			}
		}
	}
	return out
}

// checkPlaces refuses, as router run would at its start, the data file's
// place (storage.CheckPath: a folder or file another user owns or anyone
// may write, or no regular file), the plugin cache's (one others could
// have written in: fsperm.CheckPrivateTree), and the socket's (api.CheckSocketPlace:
// its folder so, or something else than a socket at its path); without
// asking whether a router serves there, so that validate may run beside
// the router it checks a change for.
func checkPlaces(cfg *config.Config) []string {
	var out []string
	for _, p := range cfg.WrittenPaths {
		switch {
		case p.What == config.WhatDataFile:
			if err := storage.CheckPath(p.Path); err != nil {
				out = append(out, fmt.Sprintf("%s: storage.path %q: router run would refuse it: %v", p.At, p.Path, err))
			}
		case p.What == config.WhatPluginCache && len(cfg.Plugins) > 0:
			if err := fsperm.CheckPrivateTree(p.Path); err != nil {
				out = append(out, fmt.Sprintf("%s: the plugin cache %q: router run would refuse it: %v", p.At, p.Path, err))
			}
		}
	}
	for _, in := range cfg.Inboxes {
		if t, err := webhook.ParseURL(in.Deliver.URL); err == nil {
			if err := t.CheckSocketDir(); err != nil {
				out = append(out, fmt.Sprintf("%s: inbox %q: deliver url %q: router run would refuse it: %v", cfg.BlocksAt["inbox."+in.Name], in.Name, in.Deliver.URL, err))
			}
		}
	}
	if err := api.CheckSocketPlace(cfg.Listen.Socket); err != nil {
		at, ok := cfg.BlocksAt["listen"]
		if !ok {
			at = config.Pos(cfg.File) // the default path: no block names it
		}
		out = append(out, fmt.Sprintf("%s: listen.socket %q: router run would refuse it (unless systemd passes the socket): %v", at, cfg.Listen.Socket, err))
	}
	return out
}

// folderToMake is a folder router run makes (as mkdir -p does) for paths
// the configuration names: the first of their folders that does not
// exist. A typo in an absolute path would otherwise go unseen until the
// file turns up in a folder nobody meant (the new user's trial).
type folderToMake struct {
	folder string
	at     config.Pos // where the first path under it is named
	paths  []string   // `storage.path "./data/router.db"`, ...
}

// foldersToMake lists the folders router run would make for the data
// file, the folders it fills and the API socket (unless systemd passes
// it: socketPassed), in the order the configuration names them.
func foldersToMake(cfg *config.Config, socketPassed bool) []folderToMake {
	var out []folderToMake
	add := func(what, path, dir string, at config.Pos) {
		f := firstMissing(dir)
		if f == "" {
			return
		}
		named := fmt.Sprintf("%s %q", what, path)
		for i := range out {
			if out[i].folder == f {
				out[i].paths = append(out[i].paths, named)
				return
			}
		}
		out = append(out, folderToMake{f, at, []string{named}})
	}
	for _, p := range cfg.WrittenPaths {
		if p.What == config.WhatPluginCache && len(cfg.Plugins) == 0 {
			continue // made when a plugin is first compiled
		}
		dir := p.Path
		if !p.Dir {
			dir = filepath.Dir(dir)
		}
		add(p.What, p.Path, dir, p.At)
	}
	if !socketPassed {
		at, ok := cfg.BlocksAt["listen"]
		if !ok {
			at = config.Pos(cfg.File) // the default path: no block names it
		}
		add("listen.socket", cfg.Listen.Socket, filepath.Dir(cfg.Listen.Socket), at)
	}
	return out
}

// firstMissing is the outermost folder of dir (dir itself, or one above
// it) that does not exist, or "" when dir exists or cannot be looked at.
func firstMissing(dir string) string {
	_, fi, missing, err := nearestExisting(dir)
	if err != nil || !fi.IsDir() {
		return ""
	}
	return missing
}

// nearestExisting walks up from dir to the nearest path that exists and
// returns it with its FileInfo and the outermost path below it that does
// not exist ("" when dir exists). An error other than "not there" stops
// the walk and names the path that gave it.
func nearestExisting(dir string) (found string, fi fs.FileInfo, missing string, err error) {
	for {
		fi, err := os.Stat(dir)
		if err == nil {
			return dir, fi, missing, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir || !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return "", nil, "", fmt.Errorf("%s: %w", dir, bare(err))
		}
		missing, dir = dir, parent
	}
}

// String says which folder router run makes, and for what.
func (f folderToMake) String() string {
	return fmt.Sprintf("the folder %s does not exist; router run makes it, for %s", f.folder, strings.Join(f.paths, ", "))
}

// checkWritable lists the paths router run writes (the data file, the
// plugin cache, an embedded NATS server's store) that this user could not
// write, as router run would find at its start: once per folder, as the
// plugin cache beside the data file fails with it. validate runs as the
// service's user, as for the files of secrets.
func checkWritable(cfg *config.Config) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range cfg.WrittenPaths {
		if err := writable(p.Path, p.Dir); err != nil && !seen[err.Error()] {
			seen[err.Error()] = true
			out = append(out, fmt.Sprintf("%s: %s %q: router run as this user could not write it: %v", p.At, p.What, p.Path, err))
		}
	}
	return out
}

// writable tries what router run will do at path: open the file for
// writing when it exists, or else make (and remove) a file in the nearest
// folder that exists, which router run would create the rest under. An
// error about a folder names it.
func writable(path string, dir bool) error {
	if !dir {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err == nil {
			return f.Close()
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return bare(err)
		}
		path = filepath.Dir(path)
	}
	path, fi, _, err := nearestExisting(path)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a folder", path)
	}
	f, err := os.CreateTemp(path, ".router-validate-*")
	if err != nil {
		return fmt.Errorf("cannot create a file in %s: %w", path, bare(err))
	}
	f.Close()
	return os.Remove(f.Name())
}

// bare is err without the operation and path a *fs.PathError adds, for a
// message that names the path already.
func bare(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}

// uncapturedRoutes lists the routes to an embedded NATS server (with
// JetStream) whose subject none of its declared streams captures: a
// publish there is acknowledged only once someone makes such a stream by
// hand, else the events dead-letter after their retries. validate refuses
// them; router run and a reload warn (runWarnings), since a stream made by
// hand is allowed.
func uncapturedRoutes(cfg *config.Config) []string {
	var out []string
	for _, t := range slices.Sorted(maps.Keys(cfg.Events)) {
		for _, r := range cfg.Events[t].Routes {
			if n := uncapturedBy(cfg, r.To, r.Subject); n != nil {
				out = append(out, fmt.Sprintf("%s: event %q routes to subject %q, which no stream of nats %q captures: a publish there is never acknowledged; add the subject to a stream block",
					cfg.EventsAt[t], t, r.Subject, n.Name))
			}
		}
	}
	return out
}

// uncapturedBy is the nats block of sink when a publish through it to
// subject is never acknowledged: an embedded server with JetStream, none
// of whose declared streams captures subject. Nil otherwise: another sink,
// or a server whose streams the router does not know all of.
func uncapturedBy(cfg *config.Config, sink, subject string) *config.NATS {
	for i, n := range cfg.NATS {
		if n.SinkName() == sink && n.Embedded && n.JetStream && natsplugin.StreamCapturing(n.Streams, subject) == "" {
			return &cfg.NATS[i]
		}
	}
	return nil
}

// runWarnings are what router run and a reload log about cfg: validate's
// warnings, and the routes no declared stream captures.
func runWarnings(cfg *config.Config) []string {
	out := configWarnings(cfg)
	for _, u := range uncapturedRoutes(cfg) {
		out = append(out, u+" (or make the stream by hand; validate refuses this)")
	}
	return out
}

// checkPlugins loads every plugin once, in a runtime of its own with the
// user's compilation cache (as `router plugin test`), and closes it.
func checkPlugins(ctx context.Context, cfg *config.Config) []string {
	if len(cfg.Plugins) == 0 {
		return nil
	}
	rt, err := wasm.NewRuntime(ctx, wasm.RuntimeOptions{CacheDir: defaultPluginCache()})
	if err != nil {
		// A cache this user cannot make (a service user without a home:
		// a security trial's validate failed so) costs compiling again,
		// no more; the router's own cache is checked apart (checkFolders).
		rt, err = wasm.NewRuntime(ctx, wasm.RuntimeOptions{})
	}
	if err != nil {
		return []string{err.Error()}
	}
	defer rt.Close(ctx)
	var problems []string
	for _, pc := range cfg.Plugins {
		p, err := rt.Load(ctx, pc, wasm.LoadOptions{Instances: 1})
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", pc.At, err))
			continue
		}
		p.Close(ctx)
	}
	return problems
}

// routedSubjects lists the subjects the event types route to on sink.
func routedSubjects(cfg *config.Config, sink string) []string {
	return routed(cfg, sink, func(r config.Route) string { return r.Subject })
}

// routedTopics lists the topics the event types route to on sink.
func routedTopics(cfg *config.Config, sink switchyard.Sink) []string {
	return routed(cfg, sink.Name(), func(r config.Route) string { return r.Topic })
}

// routed lists what of each route to sink pick takes.
func routed(cfg *config.Config, sink string, pick func(config.Route) string) []string {
	var out []string
	for _, p := range cfg.Events {
		for _, r := range p.Routes {
			if r.To == sink {
				out = append(out, pick(r))
			}
		}
	}
	return out
}

// configWarnings are what may be meant but often is not: each is a
// "file:line:col: warning: ..." line, and validate still passes.
//   - a type that runs plugins but has no route: an output whose plugin
//     names no destination is dead-lettered (nothing would carry it);
//   - a type with neither: each of its events is acknowledged, then
//     dead-lettered (a reload trial's `event "t.n" {}` passed unsaid);
//   - no event block and no inbox: nothing is taken at all.
func configWarnings(cfg *config.Config) []string {
	var out []string
	if cfg.Listen.TokensFile != "" && cfg.Listen.HTTP == "" {
		out = append(out, fmt.Sprintf("%s: warning: tokens_file is read only with listen.http (the TCP listener); the unix socket takes no tokens", cfg.Listen.TokensAt))
	}
	out = append(out, tenantWarnings(cfg)...)
	if len(cfg.Events) == 0 && len(cfg.Inboxes) == 0 {
		// An empty file passed as "ok" and ran, refusing every event (a
		// reload trial).
		out = append(out, fmt.Sprintf("%s:1:1: warning: no event block and no inbox: the router takes no event (ingest refuses every type); add an event block, or event \"*\" for any type", cmp.Or(cfg.File, "policies.hcl")))
	}
	for _, t := range slices.Sorted(maps.Keys(cfg.Events)) {
		p := cfg.Events[t]
		switch {
		case len(p.Routes) > 0:
		case len(p.Plugins) > 0 && t != "*":
			out = append(out, fmt.Sprintf("%s: warning: event %q runs plugins %v but has no route block: an output whose plugin names no destination (\"<sink>:<subject>\") goes to the DLQ; add a route unless every plugin names its destinations",
				cfg.EventsAt[t], t, p.Plugins))
		case len(p.Plugins) == 0:
			out = append(out, fmt.Sprintf("%s: warning: event %q has no route block and runs no plugins (nor do the defaults): each of its events is acknowledged, then dead-lettered; add a route",
				cfg.EventsAt[t], t))
		}
		if sink, timeout := slowestSink(cfg, p.Routes); timeout > p.MaxProcessingTime {
			// A reload trial's 1 ms: 50 events made 55 messages.
			out = append(out, fmt.Sprintf("%s: warning: event %q has max_processing_time %s, under %s's publish_timeout %s: a publish it cuts short is an unknown outcome, sent again later, and stored twice when the broker had it",
				cfg.EventsAt[t], t, p.MaxProcessingTime, sink, timeout))
		}
	}
	for _, in := range cfg.Inboxes {
		if in.Deliver.URL != "" && in.Deliver.Timeout > in.Policy.MaxProcessingTime {
			// A POST it cuts short is an unknown outcome: no attempt
			// counted, and a slow service gets the event for ever (a review).
			out = append(out, fmt.Sprintf("%s: warning: inbox %q has max_processing_time %s, under its deliver timeout %s: a POST it cuts short counts no attempt, and is sent again for as long as the service is that slow",
				cfg.BlocksAt[config.InboxSinkName(in.Name)], in.Name, in.Policy.MaxProcessingTime, in.Deliver.Timeout))
		}
	}
	return out
}

// slowestSink is the sink of routes with the longest publish_timeout,
// and that timeout.
func slowestSink(cfg *config.Config, routes []config.Route) (sink string, timeout time.Duration) {
	for _, r := range routes {
		for _, n := range cfg.NATS {
			if n.SinkName() == r.To && n.PublishTimeout > timeout {
				sink, timeout = r.To, n.PublishTimeout
			}
		}
		for _, k := range cfg.Kafka {
			if k.SinkName() == r.To && k.PublishTimeout > timeout {
				sink, timeout = r.To, k.PublishTimeout
			}
		}
	}
	return sink, timeout
}

// tenantWarnings are the tenant blocks that bound no one: all of them
// without a TCP listener (only tenants' tokens there are held to them),
// and one naming no tenant of tokens_file's tokens (a typo: that tenant
// then has "*"'s bucket, or none). A tokens file that does not load is
// checkFiles' to report.
func tenantWarnings(cfg *config.Config) []string {
	if len(cfg.TenantLimits) == 0 {
		return nil
	}
	names := slices.Sorted(maps.Keys(cfg.TenantLimits))
	var out []string
	if cfg.Listen.HTTP == "" {
		for _, name := range names {
			out = append(out, fmt.Sprintf("%s: warning: tenant %q bounds no one: tenant blocks bound tenants' tokens on the TCP listener (listen.http), which is off", cfg.TenantLimits[name].At, name))
		}
		return out
	}
	tokens, err := api.LoadTokens(cfg.Listen.TokensFile)
	if err != nil {
		return nil
	}
	known := tokens.Tenants()
	list := strings.Join(known, ", ")
	if list == "" {
		list = "admin tokens only"
	}
	for _, name := range names {
		if name != "*" && !slices.Contains(known, name) {
			out = append(out, fmt.Sprintf("%s: warning: tenant %q is no tenant of tokens_file's tokens (%s): the block bounds no one until a token names it", cfg.TenantLimits[name].At, name, list))
		}
	}
	return out
}

// madeByRouter reports whether path is the password file of an embedded
// NATS server, which the router makes on its first start.
func madeByRouter(cfg *config.Config, path string) bool {
	for _, n := range cfg.NATS {
		if n.Embedded && n.Auth.Password.File == path {
			return true
		}
	}
	return false
}

// counted is n and noun, plural unless n is 1: "1 event type", "2 event types".
func counted(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
