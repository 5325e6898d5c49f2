package engine

import (
	"context"
	"fmt"

	"github.com/switchyard-router/switchyard/storage"
)

// linesPerStep is how many events lineUp lines up per write transaction.
const linesPerStep = 1024

// lineUp puts the pending events of queue that are not in their key's
// line — stored while the type was not ordered by key, before a reload or
// a restart turned ordering = "key" on — in that line, in the order they
// were stored: without it, the take by key would pass them by while a
// later event of their key waits, and send them together once none does
// (out of order both times). The queue is read in read transactions, and
// only what is missing is written.
func (e *Engine) lineUp(ctx context.Context, queue string) error {
	// A write that read the old policy is committed once this empty one
	// is (one writer, in order): the reads below see its events.
	if err := e.store.Update(ctx, func(*storage.Tx) error { return nil }); err != nil {
		return fmt.Errorf("ordering by key: %w", err)
	}
	var from []byte
	total := 0
	for {
		var found []storage.Unlined
		var next []byte
		if err := e.store.View(func(tx *storage.Tx) (err error) {
			found, next, err = tx.MissingLines(queue, from, linesPerStep)
			return err
		}); err != nil {
			return fmt.Errorf("ordering by key: %w", err)
		}
		if len(found) > 0 {
			var n int
			if err := e.store.Update(ctx, func(tx *storage.Tx) (err error) {
				n, err = tx.AddLines(queue, found)
				return err
			}); err != nil {
				return fmt.Errorf("ordering by key: %w", err)
			}
			total += n
		}
		if next == nil {
			break
		}
		from = next
	}
	if total > 0 {
		e.log.Info("ordering = \"key\": events stored while the type was not ordered by key were put in their keys' lines, in the order they were stored",
			"type", queue, "events", total)
	}
	return nil
}
