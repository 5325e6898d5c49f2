package main

import (
	"context"
	"errors"
)

// BenchCommand loads a running router over its socket.
type BenchCommand struct {
	*Main
}

// Run is filled in by the bench harness.
func (c *BenchCommand) Run(ctx context.Context, args []string) error {
	return errors.New("bench: not built yet")
}
