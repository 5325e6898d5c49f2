package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/switchyard-router/switchyard/storage"
)

// rollbackReport is `router db rollback -o json`.
type rollbackReport struct {
	Path string `json:"path"`
	// Resumed says what a rollback cut short had left, and what became of
	// it (storage.ResumeRollback).
	Resumed    string `json:"resumed,omitempty"`
	RolledBack bool   `json:"rolled_back"`
	// From and To are the transactions the file was and is at.
	From     uint64   `json:"from_commit,omitempty"`
	To       uint64   `json:"to_commit,omitempty"`
	Events   int      `json:"events"`
	Problems []string `json:"problems"` // what the check found before
	Error    string   `json:"error,omitempty"`
}

// rollback is `router db rollback`: put back what a rollback cut short
// left; check the file (isolated, as db check does); if it does not
// check, set it back one commit (storage.RollBackLastCommit), check it
// again, and keep that only if it checks, else put the last commit back.
// docs/decisions/torn-commit.md.
func (c *DBCommand) rollback(ctx context.Context, path string, output format) error {
	rep := rollbackReport{Path: path, Problems: []string{}}
	err := rollBackIfDamaged(ctx, path, &rep)
	if err != nil {
		rep.Error = err.Error()
		err = &exitError{code: 1, err: fmt.Errorf("db rollback: %w", err)}
	}
	if perr := c.printRollback(rep, output); err == nil {
		err = perr
	}
	return err
}

// rollBackIfDamaged is rollback's work, told in rep.
func rollBackIfDamaged(ctx context.Context, path string, rep *rollbackReport) error {
	resumed, err := storage.ResumeRollback(path)
	if err != nil {
		return err
	}
	rep.Resumed = resumed
	before, err := checkIsolated(ctx, path)
	if err != nil {
		return err
	}
	rep.Events, rep.Problems = before.Events, before.Problems
	if len(before.Problems) == 0 {
		return nil
	}
	return rollBackChecked(ctx, path, rep)
}

// rollBackChecked sets the file at path back one commit and keeps it so
// only if it then checks.
func rollBackChecked(ctx context.Context, path string, rep *rollbackReport) error {
	rb, err := storage.RollBackLastCommit(path)
	if err != nil {
		return fmt.Errorf("%w; the file was left as it is: restore it from a backup (router backup)", err)
	}
	after, err := checkIsolated(ctx, path)
	if err == nil && len(after.Problems) > 0 {
		err = fmt.Errorf("the commit before its last (%d) does not check either: %s", rb.To, strings.Join(after.Problems, "; "))
	}
	if err != nil {
		if uerr := rb.Undo(); uerr != nil {
			return fmt.Errorf("%w; and %w", err, uerr)
		}
		return fmt.Errorf("%w; the file was put back as it was: restore it from a backup (router backup)", err)
	}
	rep.RolledBack, rep.From, rep.To, rep.Events = true, rb.From, rb.To, after.Events
	return rb.Keep()
}

// printRollback says what rollback did.
func (c *DBCommand) printRollback(rep rollbackReport, output format) error {
	if output == formatJSON {
		return json.NewEncoder(c.Stdout).Encode(rep)
	}
	if rep.Resumed != "" {
		fmt.Fprintf(c.Stdout, "%s: %s\n", rep.Path, rep.Resumed)
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(c.Stdout, "  problem: %s\n", p)
	}
	switch {
	case rep.Error != "":
		return nil // the error says it
	case !rep.RolledBack:
		fmt.Fprintf(c.Stdout, "%s: consistent, %d events: nothing to roll back; left as it is\n", rep.Path, rep.Events)
		return nil
	}
	fmt.Fprintf(c.Stdout, "%s: rolled back from commit %d to %d, which checks: %d events; what commit %d stored is lost\n",
		rep.Path, rep.From, rep.To, rep.Events, rep.From)
	return nil
}
