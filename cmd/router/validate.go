package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/plugins/kafka"
	natsplugin "github.com/switchyard-router/switchyard/plugins/nats"
)

// ValidateCommand checks a configuration file and reports every problem with
// its file:line:col; with -check-sinks it also connects to every external
// broker and checks the routed Kafka topics exist.
type ValidateCommand struct {
	*Main
}

// Run parses flags and validates.
func (c *ValidateCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("router validate", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	path := fs.String("config", defaultConfigPath, "the configuration file")
	checkSinks := fs.Bool("check-sinks", false, "also connect to every external broker and check the routed Kafka topics")
	timeout := fs.Duration("timeout", 10*time.Second, "with -check-sinks: how long each check may take")
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
	if !*checkSinks {
		return nil
	}
	var failed []error
	for name, err := range checkSinksOf(ctx, cfg, *timeout) {
		if err != nil {
			fmt.Fprintf(c.Stdout, "%s: %v\n", name, err)
			failed = append(failed, err)
		} else {
			fmt.Fprintf(c.Stdout, "%s: reachable\n", name)
		}
	}
	if len(failed) > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d sink check(s) failed", len(failed))}
	}
	return nil
}

// checkSinksOf connects to each external sink of cfg: NATS servers (an
// embedded one only exists while the router runs) and Kafka clusters, whose
// routed topics must exist.
func checkSinksOf(ctx context.Context, cfg *config.Config, timeout time.Duration) map[string]error {
	out := make(map[string]error)
	for _, n := range cfg.NATS {
		if n.Embedded {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		n.Streams = nil // checking must not create or change streams
		sink, err := natsplugin.Open(cctx, n, n.URL, nil)
		if err == nil {
			err = errors.Join(sink.Healthy(cctx), sink.Close(cctx))
		}
		cancel()
		out["nats."+n.Name] = err
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
		out["kafka."+k.Name] = err
	}
	return out
}

// routedTopics lists the topics the event types route to on sink.
func routedTopics(cfg *config.Config, sink engine.Sink) []string {
	var topics []string
	for _, p := range cfg.Events {
		for _, r := range p.Routes {
			if r.To == sink.Name() {
				topics = append(topics, r.Topic)
			}
		}
	}
	return topics
}
