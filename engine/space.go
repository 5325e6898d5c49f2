package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/storage"
)

// spaceEvery is how often the engine measures the data file against its
// budget; ingest reads the last verdict, so a request pays nothing for it.
var spaceEvery = 250 * time.Millisecond

// SpaceMeter is a store that can say how much room it takes and has
// (storage.DB). Without one there is no budget.
type SpaceMeter interface {
	Space() (storage.Space, error)
	// Used is Space's Used after the last write, read without its system
	// calls: cheap enough for every request.
	Used() int64
}

// spaceState is the last measurement and its verdict.
type spaceState struct {
	space    storage.Space
	measured bool  // false: the measurement failed, space is partial
	full     error // non-nil: ingest answers it (507 storage_full)
	// Between measurements, check refuses once the pages in use grew by
	// more than headroom bytes (the room left under max_size and above
	// min_free; -1: no budget): a burst cannot overshoot the budget by what
	// it writes in spaceEvery, only by one commit.
	headroom int64
	soonFull error
	// outside is the free room outside the reserve at the measurement,
	// and reserve the reserve's size (config.Storage.Reserve; 0: no
	// floor, delivery never waits): the pages in use may grow by outside
	// less reserve before the loops stop taking batches, and delivery
	// resumes once they have shrunk to leave twice reserve outside it.
	// The last of min_free is for the cleanup, so that delivery's own
	// growth (each delivered record grows by its outputs, and the
	// delivered index by an entry) cannot leave it nothing to make room
	// with.
	outside, reserve int64
}

// spaceWatch keeps the verdict on the data file's budget fresh: storage
// { max_size } against the pages in use, min_free against the disk's free
// bytes and the file's own free pages (storage.Space.Room). While
// over, ingest is refused, delivery and the DLQ go on, and delivered
// records (but the last replay window's), then idempotency records past
// idempotency.min_window, are removed before their time to make room
// (makeRoom): ingest resumes as the backlog drains.
type spaceWatch struct {
	meter SpaceMeter
	state atomic.Pointer[spaceState]
	// delivered: the file keeps delivered records, which the cleanup
	// removes to make room (at once, or after the replay window). Without
	// any, delivery does not wait (deliveryHeld): only it can make some.
	delivered atomic.Bool
	// holding: delivery waits (deliveryHeld) until the room outside the
	// reserve is twice the reserve's size, one reserve's worth more than
	// where it stopped: near the line it would otherwise wait and resume
	// at every check (a log line and a wake-up of every loop each time).
	holding atomic.Bool
	// stuck is set while the budget is exhausted, no event waits for
	// delivery and makeRoom found nothing to remove early: the refusal
	// then says how room comes back (stuckOnRecords, stuckOnDisk), where
	// it said "delivery goes on and makes room" for the hour idempotency
	// records within idempotency.min_window held it (a multi-tenant
	// trial); nil otherwise.
	stuck atomic.Pointer[time.Duration] // idempotency.min_window then
}

// check returns the storage_full error while the budget is exhausted, or
// once the writes since the last measurement may have taken what room it
// left.
func (w *spaceWatch) check() error { return w.checkGrowing(0) }

// checkGrowing is check for a write that will add pending bytes to the
// pages in use once committed (a batch's plugin state).
func (w *spaceWatch) checkGrowing(pending int64) error {
	if w == nil {
		return nil
	}
	st := w.state.Load()
	switch {
	case st == nil:
		return nil
	case st.full != nil:
		return st.full
	case st.headroom >= 0 && w.meter.Used()+pending-st.space.Used > st.headroom:
		// The writes since have passed the budget: the next measurement
		// finds it full, and the space loop makes room.
		return st.soonFull
	}
	return nil
}

// roomy reports whether the data file is inside half its budget: under
// half of max_size, and above twice min_free of room (storage.Space.Room:
// the disk's free bytes and the file's reusable ones). Without a meter,
// before the first measurement, or after one that failed, it cannot tell,
// and says it is (as check does not refuse).
func (w *spaceWatch) roomy(budget config.Storage) bool {
	maxSize, minFree := budget.MaxSize, budget.MinFree
	if w == nil {
		return true
	}
	st := w.state.Load()
	switch {
	case st == nil || !st.measured:
		return true
	case st.full != nil:
		return false
	case maxSize > 0 && st.space.Used >= maxSize/2:
		return false
	}
	return minFree <= 0 || st.space.Room() >= 2*minFree
}

// deliveryHeld reports whether the loops must take no batch: the free
// room outside the reserve (at the last measurement, less what the pages
// in use grew by since) is down to the reserve's size, or, once delivery
// waits, not yet back to twice it (holding); and the file keeps delivered
// records the cleanup will remove (now, or once the replay window has
// passed: deliveredRemovable). Batches
// in flight still record their outcomes, and the cleanup runs. With no
// delivered record to remove (another program filled the disk while every
// event was pending), waiting would make no room: delivery goes on, and
// its first commit the full disk refuses takes the reserve
// (docs/decisions/disk-full.md).
func (w *spaceWatch) deliveryHeld() bool {
	if w == nil || !w.delivered.Load() {
		return false
	}
	st := w.state.Load()
	if st == nil || !st.measured || st.reserve <= 0 {
		return false
	}
	// The room outside the reserve now: what the measurement found, less
	// what the pages in use grew by since (a cleanup's commit shrinks
	// them: more room).
	outside := st.outside - (w.meter.Used() - st.space.Used)
	if w.holding.Load() {
		if outside > 2*st.reserve {
			w.holding.Store(false)
			return false
		}
		return true
	}
	if outside <= st.reserve {
		w.holding.Store(true)
		return true
	}
	return false
}

// measure takes a measurement and decides.
func (w *spaceWatch) measure(budget config.Storage) *spaceState {
	maxSize, minFree := budget.MaxSize, budget.MinFree
	sp, err := w.meter.Space()
	st := &spaceState{space: sp, measured: err == nil, headroom: -1}
	if st.measured {
		st.headroom, st.soonFull = headroom(sp, maxSize, minFree)
		st.reserve, st.outside = budget.Reserve(), sp.Room()-sp.Reserve
	}
	switch {
	case err != nil:
		// Cannot tell: do not refuse on a failed measurement.
	case maxSize > 0 && sp.Used >= maxSize:
		st.full = w.full(fmt.Sprintf("the data file holds %d bytes, its budget (storage.max_size) is %d", sp.Used, maxSize), stuckOnRecords)
	case minFree > 0 && sp.Room() < minFree:
		st.full = w.full(fmt.Sprintf("the disk holding the data file has %d bytes free, the file %d it can reuse and the reserve %d, under the floor (storage.min_free) of %d", sp.DiskFree, sp.Reusable, sp.Reserve, minFree), stuckOnDisk)
	}
	w.state.Store(st)
	return st
}

// full is the storage_full refusal: why, and when room comes back; stuck
// says how it does when no delivery can make it (spaceWatch.stuck).
func (w *spaceWatch) full(why string, stuck func(minWindow time.Duration) string) *switchyard.Error {
	if minWindow := w.stuck.Load(); minWindow != nil {
		return &switchyard.Error{Code: switchyard.ESTORAGEFULL, RetryAfter: stuckRetryAfter, Message: why + ": nothing was stored; " + stuck(*minWindow)}
	}
	return &switchyard.Error{Code: switchyard.ESTORAGEFULL, RetryAfter: 5 * time.Second, Message: why + ": nothing was stored; delivery goes on and makes room"}
}

// stuckOnRecords is how room comes back under storage.max_size when no
// delivery can make it: the records kept for their windows age out.
func stuckOnRecords(minWindow time.Duration) string {
	return fmt.Sprintf("no event waits for delivery to make room, and the router removed what it may before its time: "+
		"what holds the budget is kept for its window (idempotency records for idempotency.min_window, %s; delivered records for the replay window; claims until they expire; dead letters until deleted), "+
		"and room comes back as it ages out (or with a larger storage.max_size)", minWindow)
}

// stuckOnDisk is how room comes back under storage.min_free when no
// delivery can make it: the disk's other files hold it as much as the
// data file's records do (a review: an empty data file on a disk another
// program filled was told its records held the budget).
func stuckOnDisk(minWindow time.Duration) string {
	return fmt.Sprintf("no event waits for delivery to make room, and the router removed what it may before its time: "+
		"room comes back as the disk's other files are removed, as the data file's records age out (idempotency records after idempotency.min_window, %s), "+
		"or with a lower storage.min_free", minWindow)
}

// stuckRetryAfter is the Retry-After of a refusal while no delivery can
// make room (spaceWatch.stuck): room comes back as records age out, in
// minutes, not seconds.
const stuckRetryAfter = time.Minute

// headroom is how many bytes may be written before sp reaches maxSize or
// minFree (-1: neither is set), and the refusal once they are.
func headroom(sp storage.Space, maxSize, minFree int64) (int64, error) {
	room := int64(-1)
	if maxSize > 0 {
		room = max(0, maxSize-sp.Used)
	}
	if minFree > 0 {
		r := max(0, sp.Room()-minFree)
		if room < 0 || r < room {
			room = r
		}
	}
	return room, &switchyard.Error{Code: switchyard.ESTORAGEFULL, RetryAfter: time.Second, Message: fmt.Sprintf(
		"the data file has grown past the %d bytes its budget (storage.max_size, min_free) had left when last measured: nothing was stored; delivery goes on and makes room", room)}
}

// fileLost is storage.ErrFileLost once the data file is gone from its path
// or cut short
// (storage.DB.checkPlace), else nil: no write can succeed from then on, so
// the loops take nothing (each batch would be published, then fail to
// commit, and be published again) and the cleanup does not run.
func (e *Engine) fileLost() error {
	if w, ok := e.store.(interface{ Writable() error }); ok {
		if err := w.Writable(); errors.Is(err, storage.ErrFileLost) {
			return err
		}
	}
	return nil
}

// takesNothing reports whether the loops must take no batch: the data
// file is lost (fileLost), or the disk is too nearly full for delivery to
// grow the file (spaceWatch.deliveryHeld). The space loop wakes them when
// it may again.
func (e *Engine) takesNothing() bool { return e.fileLost() != nil || e.space.deliveryHeld() }

// spaceLoop measures every spaceEvery; while the budget is exhausted it
// makes room (makeRoom). It keeps the reserve (keepReserve), and wakes
// the loops when delivery may go on again.
func (e *Engine) spaceLoop(ctx context.Context) {
	t := time.NewTicker(spaceEvery)
	defer t.Stop()
	var said spaceSaid
	for {
		cfg := e.config()
		st := e.space.measure(cfg.Storage)
		e.space.delivered.Store(e.deliveredRemovable(cfg))
		e.sayWhatChanged(st, &said)
		e.keepReserve(cfg.Storage, st.space, &said)
		switch {
		case st.full == nil:
			e.space.stuck.Store(nil)
			said.stuck = false
		case !e.makeRoom(ctx):
			e.sayStuck(cfg, &said)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sayStuck notes (and logs, once) what holds the room when makeRoom
// found nothing to remove: while an event waits for delivery, delivery
// makes room; with none, only records aging out do.
func (e *Engine) sayStuck(cfg *config.Config, said *spaceSaid) {
	pending := true
	e.store.View(func(tx *storage.Tx) error { pending = tx.AnyPending(); return nil })
	if pending {
		e.space.stuck.Store(nil)
		return
	}
	minWindow := cfg.Idempotency.MinWindow
	e.space.stuck.Store(&minWindow)
	if !said.stuck {
		said.stuck = true
		if st := e.space.measure(cfg.Storage); st.full != nil { // the refusal as it reads now
			e.log.Warn("storage full with no event to deliver and nothing the router may remove early: ingest is refused until room comes back", "reason", st.full.(*switchyard.Error).Message)
		}
	}
}

// spaceSaid is what spaceLoop last logged, so that it logs changes.
type spaceSaid struct {
	full, held, lost, stuck bool
	released                uint64    // the reserves the writer gave up (storage.DB.ReserveReleased)
	reserveErr              string    // why the reserve could not be made
	reserveRetry            time.Time // after such a failure, when to try again
}

// sayWhatChanged logs the changes of a measurement: the file lost, the
// budget reached or left, delivery held or resumed (which wakes the loops).
func (e *Engine) sayWhatChanged(st *spaceState, said *spaceSaid) {
	if err := e.fileLost(); err != nil && !said.lost {
		said.lost = true
		e.log.Error("the data file was removed, replaced or cut short under the router: every write is refused, the loops and the cleanup stop, until the router restarts", "error", err)
	}
	if full := st.full != nil; full != said.full {
		said.full = full
		if full {
			e.log.Warn("storage budget reached: ingest refused (507 storage_full) until delivery makes room", "reason", st.full.(*switchyard.Error).Message)
		} else {
			e.log.Info("storage budget has room again: ingest resumes", "used_bytes", st.space.Used)
		}
	}
	if held := e.space.deliveryHeld(); held != said.held {
		said.held = held
		if held {
			e.log.Warn("the disk is nearly full: delivery waits (it grows the data file) while the cleanup makes room; the last of storage.min_free is kept for the cleanup",
				"disk_free_bytes", st.space.DiskFree, "reusable_bytes", st.space.Reusable, "reserve_bytes", st.space.Reserve)
		} else {
			e.log.Info("the disk has room for delivery again: the loops resume")
			e.kickAll()
		}
	}
}

// reserveRetryAfter is how long keepReserve waits after it failed to make
// the reserve.
const reserveRetryAfter = time.Minute

// reserveHolder is a store that keeps a reserve of disk for the moment the
// disk is full (storage.DB).
type reserveHolder interface {
	HoldReserve(size int64) (made bool, err error)
	ReserveReleased() uint64
}

// keepReserve says when the writer gave up the reserve for a full disk,
// and makes it again (or of the size a reload asks for) once the disk has
// room for it outside the floor's last half: its free bytes at least the
// reserve's and half of min_free. A file full of reusable pages does not
// need it: they are the router's alone.
func (e *Engine) keepReserve(cfg config.Storage, sp storage.Space, said *spaceSaid) {
	h, ok := e.store.(reserveHolder)
	if !ok || e.fileLost() != nil {
		return
	}
	if n := h.ReserveReleased(); n != said.released {
		said.released = n
		e.log.Error("the disk is full (or the quota of the file's user or project: ENOSPC or EDQUOT): the router gave up its reserve so that delivery and the cleanup can go on; it is made again once the disk has room",
			"disk_free_bytes", sp.DiskFree, "reusable_bytes", sp.Reusable)
	}
	want := cfg.Reserve()
	if sp.Reserve == want || (want > sp.Reserve && sp.DiskFree < want-sp.Reserve+cfg.MinFree/2) || time.Now().Before(said.reserveRetry) {
		return
	}
	made, err := h.HoldReserve(want)
	switch {
	case err != nil:
		// A quota, or a filesystem that says it has room it does not give:
		// not again each quarter second (where the reserve is written
		// byte by byte, that is 16 MiB each time).
		said.reserveRetry = time.Now().Add(reserveRetryAfter)
		if err.Error() != said.reserveErr {
			said.reserveErr = err.Error()
			e.log.Warn("could not make the reserve; trying again later", "error", err, "in", reserveRetryAfter)
		}
	case made:
		said.reserveErr = ""
		e.log.Info("holding a reserve of disk for the moment it is full", "reserve_bytes", want, "disk_free_bytes", sp.DiskFree)
	}
}

// makeRoom removes, while the budget is exhausted, what is kept only for
// reading back: first the delivered records, but the last replay window's
// (dropDelivered); then the inboxes' audit of dropped redeliveries
// (dropAudit); once none is left, the idempotency records older than
// idempotency.min_window, so that a full budget does not refuse every
// request until their window ends (clients that choose their event ids
// keep one per event). Each tick takes one step: the next measurement says
// whether it was enough. It reports whether it removed anything.
func (e *Engine) makeRoom(ctx context.Context) (removed bool) {
	idem := e.config().Idempotency
	steps := []struct {
		what   string // what the step removes, for its error
		remove func(context.Context) (int, error)
		said   func(n int) // logs what it removed
	}{
		{"delivered records", e.dropDelivered, func(n int) {
			e.log.Info("removed delivered records before their ttl to make room", "records", n)
		}},
		{"the inboxes' audit of dropped redeliveries", e.dropAudit, func(n int) {
			e.log.Warn("removed the inboxes' audit of dropped redeliveries to make room (the redeliveries are still dropped: only the list of them is gone)", "entries", n)
		}},
		{"idempotency records", func(ctx context.Context) (int, error) { return e.dropIdempotency(ctx, idem) }, func(n int) {
			e.log.Warn("removed idempotency records older than idempotency.min_window to make room: a retry of those requests would be stored again",
				"records", n, "min_window", idem.MinWindow, "window", idem.Window)
		}},
	}
	for _, step := range steps {
		n, err := step.remove(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			e.log.Error("removing "+step.what+" to make room", "error", err)
			return true // not known to be stuck
		case n > 0:
			step.said(n)
			return true
		}
	}
	return false
}

// dropAudit removes every inbox's audit of dropped redeliveries (GET
// /v1/inbox/{name}/dedup): a replay within the window (a Kafka group reset,
// a durable made again) writes an entry per copy, kept for the inbox's ttl,
// and would otherwise fill the budget and refuse every inbox and ingest
// until they aged out (a review). The ids index that drops the copies
// stays.
func (e *Engine) dropAudit(ctx context.Context) (int, error) {
	total := 0
	for name := range e.inboxes {
		n, err := e.inChunks(ctx, counted(func(tx *storage.Tx, now time.Time, limit int) (int, error) {
			return tx.DeleteOldSkips(name, now.Add(time.Nanosecond), limit)
		}))
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// dropIdempotency removes the idempotency records made more than
// min_window ago, by the time each was made: the window may have changed
// since some were (docs/decisions/idempotency.md).
func (e *Engine) dropIdempotency(ctx context.Context, idem config.Idempotency) (int, error) {
	cutoff := e.now().Add(-idem.MinWindow)
	return e.inChunks(ctx, func(tx *storage.Tx, _ time.Time, from []byte, limit int) (int, []byte, error) {
		return tx.DeleteIdempotencyMadeBefore(cutoff, idem.Window, from, limit)
	})
}

// noteIdempotencyWindow keeps in the data file the longest window its
// idempotency records were made with (storage.Tx.NoteIdempotencyWindow),
// which bounds dropIdempotency's walk; at start and after a reload. A
// failure (a full disk) costs only that bound: logged, not fatal.
func (e *Engine) noteIdempotencyWindow(window time.Duration) {
	var longer bool
	e.store.View(func(tx *storage.Tx) error {
		longer = window > tx.IdempotencyWindow()
		return nil
	})
	if !longer {
		return
	}
	if err := e.store.Update(context.Background(), func(tx *storage.Tx) error {
		return tx.NoteIdempotencyWindow(window)
	}); err != nil {
		e.log.Warn("could not note the idempotency window in the data file", "window", window, "error", err)
	}
}

// deliveredRemovable reports whether dropDelivered has records to remove
// now or once the replay window has passed (spaceWatch.delivered).
func (e *Engine) deliveredRemovable(cfg *config.Config) (ok bool) {
	e.store.View(func(tx *storage.Tx) error {
		ok = tx.DeliveredRemovableBy(e.now(), cfg.Outbox.TTL)
		return nil
	})
	return ok
}

// dropDelivered removes the delivered records now, as if their outbox.ttl
// had passed: under storage pressure an event that is out matters less
// than room for the next. It keeps those of the last replay window: after
// an unclean stop, Republish reads them to find what an embedded stream
// lost before its fsync (docs/decisions/power-loss.md).
func (e *Engine) dropDelivered(ctx context.Context) (int, error) {
	cfg := e.config()
	keep := replayWindow(cfg)
	return e.inChunks(ctx, counted(func(tx *storage.Tx, now time.Time, limit int) (int, error) {
		return tx.DeleteDeliveredBefore(now.Add(-keep), cfg.Outbox.TTL, limit)
	}))
}

// deliveredTTL is how long a delivered record is kept: outbox.ttl, but not
// less than the replay window, which Republish reads after an unclean stop
// (an outbox.ttl of seconds would otherwise remove what it must find).
func deliveredTTL(cfg *config.Config) time.Duration {
	return max(cfg.Outbox.TTL, replayWindow(cfg))
}

// replayWindow is how far back Republish reads after an unclean stop: the
// longest config.NATS.ReplayWindow of the embedded servers (cmd/router),
// none without one.
func replayWindow(cfg *config.Config) time.Duration {
	var w time.Duration
	for _, n := range cfg.NATS {
		if n.Embedded {
			w = max(w, n.ReplayWindow())
		}
	}
	return w
}

// BudgetFull is why ingest is refused for the storage budget (507
// storage_full), as the last measurement and the writes since have it;
// nil while it has room, or without a budget.
func (e *Engine) BudgetFull() error { return e.space.check() }

// Space is the last measurement of the data file and its budget, for
// /v1/stats; ok is false without a meter.
func (e *Engine) Space() (sp storage.Space, maxSize int64, ok bool) {
	if e.space == nil {
		return sp, 0, false
	}
	if st := e.space.state.Load(); st != nil {
		sp = st.space
	}
	return sp, e.config().Storage.MaxSize, true
}
