package engine

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/storage"
)

// DLQ paging limits.
const (
	DLQPageDefault = 100
	DLQPageMax     = 1000
	// dlqChunk bounds one transaction of a bulk operation, so that a retry
	// of 100k dead letters never holds the writer (and ingest) for long.
	dlqChunk = 256
	// DLQMaxIDs bounds the ids of one bulk request.
	DLQMaxIDs = 10000
)

// DLQRef names a dead letter: its event id and, for an inbox's records,
// the inbox queue ("inbox:<name>"; "" = an outbound event); an outbound
// event of a tenant other than the default one also by its Tenant. Source,
// if set, must be the event's: it picks one of an inbox's records when two
// sources share the id (docs/decisions/inbox-identity.md).
type DLQRef struct {
	Queue  string
	Tenant string
	ID     string
	Source string
}

// records is what ref names: the outbound event, or the inbox's records of
// its id; those of another source than Source left out.
func (r DLQRef) records(tx *storage.Tx) ([]*storage.Record, error) {
	var recs []*storage.Record
	if r.Queue == "" {
		switch rec, err := tx.Record(storage.EventKey(r.Tenant, r.ID)); {
		case err == nil:
			recs = append(recs, rec)
		case !errors.Is(err, storage.ErrNotFound):
			return nil, err
		}
	} else {
		var err error
		if recs, err = tx.InboxRecords(r.Queue, r.ID); err != nil {
			return nil, err
		}
	}
	return slices.DeleteFunc(recs, func(rec *storage.Record) bool { return r.Source != "" && rec.Event.Source != r.Source }), nil
}

// record is the one record ref names, a dead letter before any other
// state: NoEvent when there is none, a conflict naming their sources when
// several dead letters of one inbox share the id.
func (r DLQRef) record(tx *storage.Tx) (*storage.Record, error) {
	recs, err := r.records(tx)
	if err != nil {
		return nil, err
	}
	switch recs = deadFirst(recs); len(recs) {
	case 0:
		return nil, NoEvent(r.Tenant, r.ID)
	case 1:
		return recs[0], nil
	}
	sources := make([]string, len(recs))
	for i, rec := range recs {
		sources[i] = strconv.Quote(rec.Event.Source)
	}
	return nil, switchyard.Errorf(switchyard.ECONFLICT, "%s holds events with id %q from %d sources (%s): name one with source", r.Queue, r.ID, len(recs), strings.Join(sources, ", "))
}

// deadFirst is the dead (or resolved) records of recs, or all of them
// when none is: an inbox's id may name a delivered event of one source
// and a dead letter of another.
func deadFirst(recs []*storage.Record) []*storage.Record {
	dead := slices.DeleteFunc(slices.Clone(recs), func(rec *storage.Record) bool { return !isDead(rec) })
	if len(dead) > 0 {
		return dead
	}
	return recs
}

// isDead says whether r is in the DLQ, or resolved there.
func isDead(r *storage.Record) bool {
	return r.State == storage.StateDLQ || r.State == storage.StateResolved
}

// DLQItem is a dead (or resolved) record with the time it entered its
// state.
type DLQItem struct {
	Record *storage.Record
	// At is when the record was moved to the DLQ, or resolved.
	At time.Time
}

// DLQQuery is GET /v1/dlq.
type DLQQuery struct {
	Type   string        // the queue: an event type or "inbox:<name>"; "" = all
	Status storage.State // StateDLQ ("" too) or StateResolved
	Since  time.Time     // zero = no bound
	Cursor string        // from the previous page's NextCursor
	Limit  int           // 0 = DLQPageDefault; capped at DLQPageMax
}

// DLQPage is one page of a listing, newest first. NextCursor is "" on the
// last page.
type DLQPage struct {
	Items      []DLQItem
	NextCursor string
}

func checkStatus(s storage.State) (storage.State, error) {
	switch s {
	case "", storage.StateDLQ:
		return storage.StateDLQ, nil
	case storage.StateResolved:
		return s, nil
	}
	return "", switchyard.Errorf(switchyard.EINVALIDREQUEST, "status %q: use dlq or resolved", switchyard.Truncate(string(s), 64))
}

// DLQList is one page of dead letters, newest first.
func (e *Engine) DLQList(q DLQQuery) (*DLQPage, error) {
	status, err := checkStatus(q.Status)
	if err != nil {
		return nil, err
	}
	var before []byte
	filters := string(status) + "\x00" + q.Type
	if q.Cursor != "" {
		if before, err = DecodeCursor(CursorDLQ, filters, q.Cursor, storage.IsDLQPos); err != nil {
			return nil, err
		}
	}
	limit := q.Limit
	if limit <= 0 {
		limit = DLQPageDefault
	}
	limit = min(limit, DLQPageMax)
	var entries []storage.DLQEntry
	err = e.store.View(func(tx *storage.Tx) error {
		var err error
		entries, err = tx.DLQ(storage.DLQQuery{Queue: q.Type, State: status, Since: q.Since, Before: before, Limit: limit + 1})
		return err
	})
	if err != nil {
		return nil, unavailable(err)
	}
	page := &DLQPage{Items: make([]DLQItem, 0, min(len(entries), limit))}
	for i, en := range entries {
		if i == limit {
			page.NextCursor = EncodeCursor(CursorDLQ, filters, entries[i-1].Pos)
			break
		}
		page.Items = append(page.Items, DLQItem{Record: en.Record, At: en.At})
	}
	return page, nil
}

// DLQGet returns one dead (or resolved) record.
func (e *Engine) DLQGet(ref DLQRef) (*DLQItem, error) {
	var en *storage.DLQEntry
	err := e.store.View(func(tx *storage.Tx) error {
		r, err := ref.record(tx)
		if err != nil {
			return err
		}
		en, err = tx.DLQEntryOf(r)
		return err
	})
	switch {
	case errors.Is(err, storage.ErrNotDead):
		if en.Record.Queue != "" { // an inbox's: GET /v1/events/{id} finds only outbound events
			return nil, switchyard.Errorf(switchyard.ENOTFOUND, "event %q is not in the DLQ of %s: it is %s", ref.ID, en.Record.QueueName(), en.Record.State)
		}
		return nil, switchyard.Errorf(switchyard.ENOTFOUND, "event %q is not in the DLQ: it is %s (GET /v1/events/{id} shows it)", ref.ID, en.Record.State)
	case err != nil:
		return nil, unavailable(err)
	}
	return &DLQItem{Record: en.Record, At: en.At}, nil
}

// DLQAction names an operator action on dead letters: in a bulk result,
// the API's paths and switchyard_dlq_actions_total{action}.
type DLQAction string

// The operator actions on dead letters.
const (
	DLQActionRetry   DLQAction = "retry"   // back to pending, its attempts reset
	DLQActionResolve DLQAction = "resolve" // kept, marked handled
	DLQActionDelete  DLQAction = "delete"  // removed
)

// DLQActions are every DLQAction.
var DLQActions = []DLQAction{DLQActionRetry, DLQActionResolve, DLQActionDelete}

// dlqAction is one operator action on a dead letter, run inside a write
// transaction on the record as read there.
type dlqAction struct {
	name DLQAction
	// check refuses a record the action does not apply to, before anything
	// is written.
	check func(r *storage.Record) error
	apply func(tx *storage.Tx, r *storage.Record, now time.Time) error
}

func (e *Engine) retryAction() dlqAction {
	return dlqAction{
		name: DLQActionRetry,
		check: func(r *storage.Record) error {
			if r.State != storage.StateDLQ && r.State != storage.StateResolved {
				return switchyard.Errorf(switchyard.ENOTINDLQ, "event %q is %s, not in the DLQ: nothing to retry", r.Event.ID, r.State)
			}
			if _, ok := e.policyOf(r.QueueName()); !ok {
				return switchyard.Errorf(switchyard.EUNKNOWNTYPE, "the configuration has no block for %q any more: a retried event would wait forever", r.QueueName())
			}
			return nil
		},
		apply: func(tx *storage.Tx, r *storage.Record, now time.Time) error {
			pol, _ := e.policyOf(r.QueueName())
			return tx.RetryDeadLetter(r, now, pol.ByKey())
		},
	}
}

func (e *Engine) resolveAction() dlqAction {
	return dlqAction{
		name: DLQActionResolve,
		check: func(r *storage.Record) error {
			switch r.State {
			case storage.StateDLQ:
				return nil
			case storage.StateResolved:
				return switchyard.Errorf(switchyard.ENOTINDLQ, "event %q is already resolved", r.Event.ID)
			}
			return switchyard.Errorf(switchyard.ENOTINDLQ, "event %q is %s, not in the DLQ: nothing to resolve", r.Event.ID, r.State)
		},
		apply: func(tx *storage.Tx, r *storage.Record, now time.Time) error {
			return tx.ResolveDeadLetter(r, now, e.config().DLQ.TTL)
		},
	}
}

func (e *Engine) deleteAction() dlqAction {
	return dlqAction{
		name: DLQActionDelete,
		check: func(r *storage.Record) error {
			if r.State != storage.StateDLQ && r.State != storage.StateResolved {
				return switchyard.Errorf(switchyard.ENOTINDLQ, "event %q is %s, not in the DLQ: only dead letters are deleted", r.Event.ID, r.State)
			}
			return nil
		},
		apply: func(tx *storage.Tx, r *storage.Record, _ time.Time) error {
			return tx.DeleteDeadLetter(r)
		},
	}
}

// DLQRetry puts a dead (or resolved) event back in its queue, due now, with
// its attempts reset; outputs already acknowledged stay delivered and are
// not sent again. One transaction; the queue's loop is woken.
func (e *Engine) DLQRetry(ctx context.Context, ref DLQRef) (*storage.Record, error) {
	it, err := e.dlqOne(ctx, ref, e.retryAction())
	if err != nil {
		return nil, err
	}
	e.wakeQueue(it.Record.QueueName())
	return it.Record, nil
}

// DLQResolve marks a dead letter resolved: it leaves the DLQ and is removed
// after dlq { ttl }.
func (e *Engine) DLQResolve(ctx context.Context, ref DLQRef) (*DLQItem, error) {
	return e.dlqOne(ctx, ref, e.resolveAction())
}

// DLQDelete removes a dead (or resolved) event for good.
func (e *Engine) DLQDelete(ctx context.Context, ref DLQRef) error {
	_, err := e.dlqOne(ctx, ref, e.deleteAction())
	return err
}

func (e *Engine) dlqOne(ctx context.Context, ref DLQRef, act dlqAction) (*DLQItem, error) {
	var out *DLQItem
	err := e.store.Update(ctx, func(tx *storage.Tx) error {
		r, err := ref.record(tx)
		if err != nil {
			return err
		}
		if err := act.check(r); err != nil {
			return err
		}
		now := e.now()
		if err := act.apply(tx, r, now); err != nil {
			return err
		}
		out = &DLQItem{Record: r, At: now}
		return nil
	})
	if err != nil {
		return nil, unavailable(err)
	}
	e.metrics.dlqAction(act.name, 1)
	return out, nil
}

// wakeQueue wakes the loop of a queue after events were put back in it. A
// pull inbox has no loop: its long polls are woken instead.
func (e *Engine) wakeQueue(q string) {
	pol, ok := e.policyOf(q)
	if !ok {
		e.wake(q) // a removed type's: its retiring loop, if still there, takes them; else they are noted
		return
	}
	if name, isInbox := strings.CutPrefix(q, inboxQueuePrefix); isInbox && len(pol.Routes) == 0 && len(pol.Plugins) == 0 {
		if in, ok := e.inboxes[name]; ok {
			in.notify()
		}
		return
	}
	e.wake(q) // under e.mu: a reload that removed the type since the look above leaves no loop made without a policy
}

// DLQFilter selects dead letters for a bulk action. At least one of Type,
// Since, IDs or All must be set: an empty filter is refused rather than
// taken to mean everything; All comes alone (but for Status).
type DLQFilter struct {
	Type   string        // the queue (event type or "inbox:<name>")
	Status storage.State // which index a filter walks: dlq (default) or resolved
	Since  time.Time     // entered the DLQ (or was resolved) at or after
	IDs    []string      // these events (in Type's queue when it is an inbox)
	Tenant string        // only this tenant's events ("" = any; with IDs, the default tenant's)
	Source string        // only events of this source ("" = any)
	All    bool          // everything in the index
}

// DLQBulkResult reports a bulk action.
type DLQBulkResult struct {
	Action   DLQAction
	Matched  int // records the filter selected
	Done     int // of those, how many the action applied to
	NotFound []string
	Skipped  []DLQSkip
}

// DLQSkip is a selected record the action did not apply to, and why: Code
// is the error code the action met (not_in_dlq, ...) or DLQSkipExcluded.
type DLQSkip struct {
	ID     string
	Code   switchyard.Code
	Reason string
}

// DLQSkipExcluded is the Code of a record named by its id that the rest of
// the filter excludes (its type, time, tenant or source): no error, and
// not a plugin's "filtered" verdict either.
const DLQSkipExcluded switchyard.Code = "excluded"

func (r *DLQBulkResult) add(o *DLQBulkResult) {
	r.Matched += o.Matched
	r.Done += o.Done
	r.NotFound = append(r.NotFound, o.NotFound...)
	r.Skipped = append(r.Skipped, o.Skipped...)
}

// DLQRetryMany retries every dead letter the filter selects.
func (e *Engine) DLQRetryMany(ctx context.Context, f DLQFilter) (*DLQBulkResult, error) {
	return e.dlqMany(ctx, f, e.retryAction())
}

// DLQResolveMany resolves every dead letter the filter selects.
func (e *Engine) DLQResolveMany(ctx context.Context, f DLQFilter) (*DLQBulkResult, error) {
	if f.Status == storage.StateResolved {
		return nil, switchyard.Errorf(switchyard.EINVALIDREQUEST, "status resolved: those are resolved already")
	}
	return e.dlqMany(ctx, f, e.resolveAction())
}

// DLQDeleteMany deletes every dead (or, with Status resolved, resolved)
// record the filter selects.
func (e *Engine) DLQDeleteMany(ctx context.Context, f DLQFilter) (*DLQBulkResult, error) {
	return e.dlqMany(ctx, f, e.deleteAction())
}

// dlqMany runs act over what f selects, dlqChunk records per transaction.
// Records that enter the DLQ while it runs are not included: a filter walk
// goes from the newest entry at the start towards older ones.
func (e *Engine) dlqMany(ctx context.Context, f DLQFilter, act dlqAction) (*DLQBulkResult, error) {
	named := f.Status != "" // the ids' status, when the request says it (bulk.one)
	status, err := checkStatus(f.Status)
	if err != nil {
		return nil, err
	}
	f.Status = status
	selects := f.Type != "" || !f.Since.IsZero() || f.Source != "" || f.Tenant != "" || len(f.IDs) > 0
	switch {
	case !selects && !f.All:
		return nil, switchyard.Errorf(switchyard.EINVALIDREQUEST, "a bulk %s needs a filter: type, since, source, tenant or ids (or \"all\": true for everything)", act.name)
	case selects && f.All:
		// Which one was meant is the server's guess: ids and filters
		// select, all would take everything.
		return nil, switchyard.Errorf(switchyard.EINVALIDREQUEST, "\"all\" takes every dead letter and comes alone: give it without ids, type, since, source or tenant (status may stay)")
	}
	if len(f.IDs) > DLQMaxIDs {
		return nil, switchyard.Errorf(switchyard.ETOOLARGE, "%d ids; at most %d per request", len(f.IDs), DLQMaxIDs)
	}
	b := &bulk{e: e, ctx: ctx, act: act, total: &DLQBulkResult{Action: act.name}, woken: make(map[string]bool), named: named}
	defer b.finish()
	if len(f.IDs) > 0 {
		// An id given twice names one dead letter once: it was counted
		// done and then not found (delete), or matched twice (retry).
		f.IDs = uniq(f.IDs)
		return b.total, b.byIDs(f)
	}
	return b.total, b.byFilter(f)
}

// bulk is one bulk DLQ action, applied in chunked transactions.
type bulk struct {
	e     *Engine
	ctx   context.Context
	act   dlqAction
	total *DLQBulkResult
	woken map[string]bool // queues that got events back (retry)
	named bool            // the request named a status: ids of the other are skipped
}

// finish wakes the queues a retry refilled and counts the action.
func (b *bulk) finish() {
	if b.act.name == DLQActionRetry {
		for q := range b.woken {
			b.e.wakeQueue(q)
		}
	}
	b.e.metrics.dlqAction(b.act.name, b.total.Done)
}

// chunk runs fn in one transaction and adds what it did to the total. The
// group commit may run fn more than once: each run starts afresh.
func (b *bulk) chunk(fn func(tx *storage.Tx, now time.Time, res *DLQBulkResult, queues map[string]bool) error) error {
	if err := b.ctx.Err(); err != nil {
		return err
	}
	var res *DLQBulkResult
	var queues map[string]bool
	err := b.e.store.Update(b.ctx, func(tx *storage.Tx) error {
		res, queues = &DLQBulkResult{}, make(map[string]bool)
		return fn(tx, b.e.now(), res, queues)
	})
	if err != nil {
		return unavailable(err)
	}
	b.total.add(res)
	for q := range queues {
		b.woken[q] = true
	}
	return nil
}

// apply does the action to one matched record, or records why not.
func (b *bulk) apply(tx *storage.Tx, r *storage.Record, now time.Time, res *DLQBulkResult, queues map[string]bool) error {
	res.Matched++
	if err := b.act.check(r); err != nil {
		skip := DLQSkip{ID: r.Event.ID, Code: switchyard.ErrorCode(err), Reason: err.Error()}
		var coded *switchyard.Error
		if errors.As(err, &coded) {
			skip.Reason = coded.Message
		}
		res.Skipped = append(res.Skipped, skip)
		return nil
	}
	if err := b.act.apply(tx, r, now); err != nil {
		return err
	}
	res.Done++
	queues[r.QueueName()] = true
	return nil
}

// byIDs applies the action to the given ids, dlqChunk at a time. With a
// type, the ids are looked up in that queue when it is an inbox's; a record
// the filter excludes is skipped.
func (b *bulk) byIDs(f DLQFilter) error {
	var queue string
	if strings.HasPrefix(f.Type, inboxQueuePrefix) {
		queue = f.Type
	}
	for start := 0; start < len(f.IDs); start += dlqChunk {
		ids := f.IDs[start:min(start+dlqChunk, len(f.IDs))]
		err := b.chunk(func(tx *storage.Tx, now time.Time, res *DLQBulkResult, queues map[string]bool) error {
			for _, id := range ids {
				all, err := DLQRef{Queue: queue, Tenant: f.Tenant, ID: id}.records(tx)
				if err != nil {
					return err
				}
				recs := slices.DeleteFunc(slices.Clone(all), func(r *storage.Record) bool { return f.otherSource(r) != "" })
				switch {
				case len(all) == 0:
					res.NotFound = append(res.NotFound, id)
					continue
				case len(recs) == 0: // there, of other sources only: excluded, as by a type or since
					res.Skipped = append(res.Skipped, DLQSkip{ID: id, Code: DLQSkipExcluded, Reason: f.otherSource(all[0])})
					continue
				}
				for _, r := range deadFirst(recs) {
					if err := b.one(tx, f, r, now, res, queues); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// one applies the action to r, a record a bulk request named by its id,
// unless the filter excludes it.
func (b *bulk) one(tx *storage.Tx, f DLQFilter, r *storage.Record, now time.Time, res *DLQBulkResult, queues map[string]bool) error {
	en, err := tx.DLQEntryOf(r)
	if err != nil && !errors.Is(err, storage.ErrNotDead) {
		return err
	}
	if dead := r.State == storage.StateDLQ || r.State == storage.StateResolved; dead && b.named && r.State != f.Status && b.act.name != DLQActionRetry {
		// In the other list than the one the request names: a delete of
		// the resolved list's selection deleted an entry dead again since
		// (a trial). A retry takes either: it loses nothing. Without a
		// status, ids name what they name (`router dlq delete r1 r2`).
		res.Skipped = append(res.Skipped, DLQSkip{ID: r.Event.ID, Code: switchyard.ENOTINDLQ,
			Reason: "it is " + string(r.State) + "; the request names status " + string(f.Status)})
		return nil
	}
	if reason := f.excludes(en.Record, en.At); reason != "" {
		res.Skipped = append(res.Skipped, DLQSkip{ID: r.Event.ID, Code: DLQSkipExcluded, Reason: reason})
		return nil
	}
	return b.apply(tx, en.Record, now, res, queues)
}

// byFilter applies the action to every dead letter the filter selects,
// walking the DLQ index dlqChunk entries at a time.
func (b *bulk) byFilter(f DLQFilter) error {
	var cursor []byte
	for {
		var n int
		var last []byte
		err := b.chunk(func(tx *storage.Tx, now time.Time, res *DLQBulkResult, queues map[string]bool) error {
			entries, err := tx.DLQ(storage.DLQQuery{Queue: f.Type, State: f.Status, Since: f.Since, Before: cursor, Limit: dlqChunk})
			if err != nil {
				return err
			}
			n, last = len(entries), nil
			for _, en := range entries {
				last = en.Pos
				if f.excludes(en.Record, en.At) != "" {
					continue // not selected: the index walk knows type and since, not source
				}
				if err := b.apply(tx, en.Record, now, res, queues); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil || n < dlqChunk {
			return err
		}
		cursor = last
	}
}

// excludes says why f does not select r (entered its state at at), or "".
func (f *DLQFilter) excludes(r *storage.Record, at time.Time) string {
	if f.Type != "" && r.QueueName() != f.Type {
		return "its type is " + r.QueueName() + ", not " + f.Type
	}
	if !f.Since.IsZero() && at.Before(f.Since) {
		return "it entered the DLQ before " + f.Since.UTC().Format(time.RFC3339)
	}
	if f.Tenant != "" && orDefault(r.Tenant) != orDefault(f.Tenant) {
		return "its tenant is " + orDefault(r.Tenant) + ", not " + f.Tenant
	}
	return f.otherSource(r)
}

// orDefault is tenant, or the default tenant for "" (a record stored
// without one, a filter's id list).
func orDefault(tenant string) string {
	if tenant == "" {
		return storage.DefaultTenant
	}
	return tenant
}

// otherSource says why r is not of the filter's source, or "" when it is
// (or the filter names none).
func (f *DLQFilter) otherSource(r *storage.Record) string {
	if f.Source != "" && r.Event.Source != f.Source {
		return "its source is " + r.Event.Source + ", not " + f.Source
	}
	return ""
}

// DLQTypeStats is one queue's dead letters: in the DLQ, and resolved.
type DLQTypeStats struct {
	Type     string
	DLQ      int
	Resolved int
}

// DLQStats counts dead and resolved records per queue.
func (e *Engine) DLQStats() ([]DLQTypeStats, error) {
	var out []DLQTypeStats
	err := e.store.View(func(tx *storage.Tx) error {
		for _, c := range tx.DLQCounts() {
			out = append(out, DLQTypeStats{Type: c.Queue, DLQ: c.Dead, Resolved: c.Resolved})
		}
		return nil
	})
	if err != nil {
		return nil, unavailable(err)
	}
	return out, nil
}

// uniq is ids without repeats, in their first order.
func uniq(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	return slices.DeleteFunc(slices.Clone(ids), func(id string) bool {
		if seen[id] {
			return true
		}
		seen[id] = true
		return false
	})
}
