// Command router is Switchyard: a single-binary event router for the edge.
//
// main is thin on purpose: Main parses the subcommand and hands off to one
// file per subcommand (run.go, validate.go, version.go, ...).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/google/uuid"

	"github.com/switchyard-router/switchyard/internal/gctune"
)

func main() {
	// Ids the router assigns are UUIDv7s drawn from a pool of random
	// bytes, not a read of the system's source per id (an allocation and a
	// call each): docs/decisions/ingest-cost.md.
	uuid.EnableRandPool()
	// The collector gets 32 MiB of headroom above a small live heap, and
	// keeps the heap under a share of the cgroup's memory limit
	// (internal/gctune; GOGC or GOMEMLIMIT set in the environment win).
	defer gctune.Start(gctune.DefaultHeadroom, memoryCeiling())()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first SIGTERM or Ctrl-C begins a graceful stop; the next one ends
	// the process at once (Go's default, restored), as after a SIGKILL:
	// nothing acknowledged is lost, and the next start checks the file.
	context.AfterFunc(ctx, stop)
	m := NewMain(os.Stdin, os.Stdout, os.Stderr)
	if err := m.Run(ctx, os.Args[1:]); err != nil {
		os.Exit(m.Exit(err))
	}
}

// subcommand is the command args name ("run" when they begin with a flag
// or are empty) and the arguments after it.
func subcommand(args []string) (cmd string, rest []string) {
	if len(args) > 0 && args[0] != "" && (args[0][0] != '-' || isHelp(args[0])) {
		return args[0], args[1:]
	}
	return "run", args
}

// hupAtStart catches SIGHUP from this package's init in a process that
// runs the router (not a test binary), for RunCommand.Run: one sent before
// Run caught it ended the process, Go's default, for the first ~40 ms of
// its life (a trial: a deploy script's reload of a router just started;
// 10 ms here). What is left is the runtime's and the libraries' start:
// 5–10 ms here (README, Configuration).
var hupAtStart chan os.Signal

func init() {
	if cmd, _ := subcommand(os.Args[1:]); cmd == "run" && !testing.Testing() {
		hupAtStart = make(chan os.Signal, 1)
		signal.Notify(hupAtStart, syscall.SIGHUP)
	}
}

// Exit says err on Stderr, unless it was told already (a bad flag, with
// the usage) or is help given, and returns the process's exit code.
func (m *Main) Exit(err error) int {
	if err != nil && !errors.Is(err, flag.ErrHelp) && !told(err) {
		fmt.Fprintln(m.Stderr, "router:", err)
	}
	return exitCode(err)
}

// Main dispatches to the subcommands.
type Main struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// NewMain returns a Main on the given streams.
func NewMain(stdin io.Reader, stdout, stderr io.Writer) *Main {
	return &Main{Stdin: stdin, Stdout: stdout, Stderr: stderr}
}

// exitError carries an exit code through Run.
type exitError struct {
	code int
	err  error
	// told: the error was written already (the flag package writes a
	// flag's error with the command's usage), and main does not repeat it.
	told bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0 // help asked for and given, as Go's flag package exits
	}
	return 1
}

// parseFlags parses args with fs (ContinueOnError, its output the
// command's stderr). A bad flag is exit 2, and told once: the flag
// package has written it, with the usage, to fs's output.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return &exitError{code: 2, err: err, told: true}
}

// told reports whether err was written already.
func told(err error) bool {
	var e *exitError
	return errors.As(err, &e) && e.told
}

// Run runs the subcommand named by args[0] ("run" when args is empty).
func (m *Main) Run(ctx context.Context, args []string) error {
	cmd, rest := subcommand(args)
	if cmd == "help" || isHelp(cmd) {
		m.usage()
		return nil
	}
	switch cmd {
	case "run":
		c := &RunCommand{Main: m}
		if err := c.ParseFlags(rest); err != nil {
			return err
		}
		return c.Run(ctx)
	case "validate":
		return (&ValidateCommand{Main: m}).Run(ctx, rest)
	case "version":
		return m.version(rest)
	case "bench":
		return (&BenchCommand{Main: m}).Run(ctx, rest)
	case "plugin":
		return (&PluginCommand{Main: m}).Run(ctx, rest)
	case "dlq":
		return (&DLQCommand{Main: m}).Run(ctx, rest)
	case "stats":
		return (&StatsCommand{Main: m}).Run(ctx, rest)
	case "tail":
		return (&TailCommand{Main: m}).Run(ctx, rest)
	case "ui":
		return (&UICommand{Main: m}).Run(ctx, rest)
	case "backup":
		return (&BackupCommand{Main: m}).Run(ctx, rest)
	case "db":
		return (&DBCommand{Main: m}).Run(ctx, rest)
	default:
		m.usage()
		return &exitError{code: 2, err: fmt.Errorf("unknown command %q", cmd)}
	}
}

// isHelp reports whether arg asks for help: `router -h` lists the
// commands, while `router -config F -h` is run's own help.
func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

func (m *Main) usage() {
	fmt.Fprint(m.Stderr, `Switchyard routes events from local services to Kafka and NATS, durably.

Usage:
  router <command> [flags]

Commands:
  run        run the router (default; -config ./policies.hcl)
  validate   check a configuration file
  bench      load a running router over its socket and report throughput
  plugin     write, build and try WebAssembly plugins: test, check, init, doctor, dev, state
  dlq        list, show, retry, resolve or delete dead letters of a running router
  stats      per-type depth, oldest age, poll delay and DLQ of a running router, its storage and failing sinks
  tail       print each output a running router publishes, live (-type T, -o json)
  ui         the operator console of a running router in a browser: prints a one-time link
  backup     a consistent copy of a running router's data file (router backup OUT)
  db         offline tools for a data file: router db check FILE, router db rollback FILE, router db compact FILE, router db clock FILE
  version    print the version

Run 'router <command> -h' for a command's flags.
`)
}
