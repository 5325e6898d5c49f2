package main

import (
	"context"
	"flag"
	"fmt"
)

// ValidateCommand checks a configuration file and reports every problem with
// its file:line:col.
type ValidateCommand struct {
	*Main
}

// Run parses flags and validates.
func (c *ValidateCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("router validate", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	path := fs.String("config", defaultConfigPath, "the configuration file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		*path = fs.Arg(0)
	}
	cfg, err := loadConfig(*path, false)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	fmt.Fprintf(c.Stdout, "%s: ok (%d event types, sinks %v)\n", *path, len(cfg.Events), cfg.Sinks())
	return nil
}
