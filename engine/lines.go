package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/switchyard-router/switchyard/storage"
)

// linesPerStep is how many events lineUp lines up per write transaction.
const linesPerStep = 1024

// keyLines is a queue's need to be lined up (Engine.lineUp) before its next
// take by key: set when a loop or pull inbox starts ordered by key, or a
// reload turns ordering = "key" on; cleared once a line-up succeeds. The
// mark is atomic so that a reload never waits for a line-up under way
// (it reads the whole queue); mu keeps two line-ups of a queue apart.
type keyLines struct {
	mu    sync.Mutex
	stale atomic.Bool
}

// markStale makes the next take by key line the queue up first, even one
// that comes while a line-up is under way.
func (k *keyLines) markStale() { k.stale.Store(true) }

// lineUp lines queue up if it is marked stale, and clears the mark once it
// has.
func (k *keyLines) lineUp(ctx context.Context, e *Engine, queue string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.stale.Swap(false) {
		return nil
	}
	if err := e.lineUp(ctx, queue); err != nil {
		k.stale.Store(true)
		return err
	}
	return nil
}

// lineUp puts the pending events of queue that are not in their key's
// line — stored while the type was not ordered by key, before a reload or
// a restart turned ordering = "key" on — in that line, in the order they
// were stored: without it, the take by key would pass them by while a
// later event of their key waits, and send them together once none does
// (out of order both times). The queue is read in read transactions, and
// only what is missing is written. The file remembers a queue it has lined
// up (storage.Tx.LinedUp) until an event is stored outside its line, so a
// restart with an unchanged policy reads nothing.
func (e *Engine) lineUp(ctx context.Context, queue string) error {
	// A write that read the old policy is committed once this one is (one
	// writer, in order): the reads below see its events.
	var done bool
	if err := e.store.Update(ctx, func(tx *storage.Tx) error {
		if done = tx.LinedUp(queue); done {
			return nil
		}
		return tx.BeginLining(queue)
	}); err != nil || done {
		return wrapLines(err)
	}
	total, err := e.addMissingLines(ctx, queue)
	if err != nil {
		return wrapLines(err)
	}
	if err := e.store.Update(ctx, func(tx *storage.Tx) error {
		_, err := tx.EndLining(queue)
		return err
	}); err != nil {
		return wrapLines(err)
	}
	if total > 0 {
		e.log.Info("ordering = \"key\": events stored while the type was not ordered by key were put in their keys' lines, in the order they were stored",
			"type", queue, "events", total)
	}
	return nil
}

// addMissingLines reads queue in steps of linesPerStep and puts what it
// finds outside its line in it; it reports how many it put.
func (e *Engine) addMissingLines(ctx context.Context, queue string) (int, error) {
	var from []byte
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err // stopping, or a pull given up: the mark stays, the next take goes on
		}
		var found []storage.Unlined
		var next []byte
		if err := e.store.View(func(tx *storage.Tx) (err error) {
			found, next, err = tx.MissingLines(queue, from, linesPerStep)
			return err
		}); err != nil {
			return total, err
		}
		if len(found) > 0 {
			var n int
			if err := e.store.Update(ctx, func(tx *storage.Tx) (err error) {
				n, err = tx.AddLines(queue, found)
				return err
			}); err != nil {
				return total, err
			}
			total += n
		}
		if next == nil {
			return total, nil
		}
		from = next
	}
}

func wrapLines(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("ordering by key: %w", err)
}
