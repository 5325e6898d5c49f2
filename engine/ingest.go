package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/cloudevents"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/storage"
)

// IngestRequest is one POST /v1/events, decoded: one event or a batch.
type IngestRequest struct {
	Tenant string
	// Operator is true for the operator's own clients (the unix socket,
	// trusted by its file mode, and admin tokens) and false for a tenant's
	// token on the TCP listener: only those are held to the catch-all's
	// max_types_per_tenant.
	Operator bool
	Endpoint string // scopes the Idempotency-Key: "POST /v1/events"
	Key      string // the Idempotency-Key header; "" = none
	Digest   []byte // of the whole request, compared when Key is reused
	Events   []IngestEvent
	// keyOldExpiry is the expiry of an expired record under Key, as lookup
	// found it (zero: none), so that the write replaces it without reading
	// it again (storage.Tx.ReplaceIdempotency). Set by Ingest's lookup: a
	// request is built for one Ingest call.
	keyOldExpiry time.Time
	// newTypes are the types of the request the catch-all has no loop for
	// yet, each holding a slot until the request ends (admitType,
	// settleTypes).
	newTypes []string
	// Render builds the response the client gets, from the outcome of each
	// event in order. It is stored with the idempotency record and replayed
	// byte-identical, so it must be deterministic.
	Render func(outcomes []Outcome) Response
}

// IngestEvent is one event of a request.
type IngestEvent struct {
	Event switchyard.Event
	// ClientID is true when the client chose the id: (source, id) is then a
	// natural idempotency key, compared by Digest. When false, the id is one
	// the router has just made (api.finish: a UUIDv7) and is stored without
	// looking for an event that already has it (storage.Tx.InsertNewEvent).
	ClientID bool
	Digest   []byte // of the event as the client sent it
	// RouterTime is true when the client sent no time and the router
	// filled it in (api.finish): a resend then carries another.
	RouterTime bool
	// oldExpiry: as IngestRequest.keyOldExpiry, for the event's (source, id).
	oldExpiry time.Time
}

// Outcome is what happened to one event of a request.
type Outcome struct {
	ID        string
	Duplicate bool // the same event was already stored: nothing written
}

// Response is a stored HTTP response.
type Response struct {
	Status      int
	ContentType string
	Body        []byte
	Replayed    bool // served from the idempotency record
}

// inFlight tracks idempotency scopes whose first request is between its
// checks and its commit, so that a concurrent duplicate waits for it (or
// gets 409) instead of racing it into the data file.
type inFlight struct {
	mu     sync.Mutex
	scopes map[string]*flight
}

type flight struct {
	digest []byte
	done   chan struct{}
}

// acquire registers every scope, or returns the first flight that holds one
// of them.
func (f *inFlight) acquire(scopes []string, digests [][]byte) (*flight, []byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, s := range scopes {
		if fl, ok := f.scopes[s]; ok {
			return fl, digests[i], false
		}
	}
	fl := &flight{done: make(chan struct{})}
	for i, s := range scopes {
		f.scopes[s] = &flight{digest: digests[i], done: fl.done}
	}
	return fl, nil, true
}

func (f *inFlight) leave(scopes []string, fl *flight) {
	f.mu.Lock()
	for _, s := range scopes {
		delete(f.scopes, s)
	}
	f.mu.Unlock()
	close(fl.done)
}

// stayedOut is enterFlight's leave for a request that holds no scope.
func stayedOut() {}

// Scope keys: an Idempotency-Key is scoped by tenant and endpoint; a
// client-chosen event id by tenant and source (CloudEvents: source+id is
// unique).
func keyScope(tenant, endpoint, key string) string {
	return "k\x00" + tenant + "\x00" + endpoint + "\x00" + key
}

// fitsRoutes refuses an event that a route of its type could never carry
// (a sink's size limits; docs/decisions/poison-events.md). Only a type
// without plugins is checked: a plugin's outputs are known only when it
// runs, and the sink's refusal then sends the event to the DLQ at once.
//
// m is the caller's, reused from event to event: handed to a sink through
// an interface, a Message of its own per event and route was an
// allocation each.
func (e *Engine) fitsRoutes(tenant string, ev *switchyard.Event, m *switchyard.Message) error {
	pol, ok := e.policy(ev.Type)
	if !ok || len(pol.Plugins) > 0 {
		return nil
	}
	sinks := e.sinks()
	for _, r := range pol.Routes {
		f, ok := sinks[r.To].(switchyard.Fitter)
		if !ok {
			continue
		}
		// The message id the loop will give it (storage.Record.MsgID).
		*m = switchyard.Message{Event: ev, Topic: r.Target(), Key: ev.PartitionKey(), MsgID: storage.EventKey(tenant, ev.ID)}
		if err := f.Fits(m); err != nil {
			return switchyard.Errorf(switchyard.EROUTELIMIT, "event %q can never be published to %s: %v", ev.ID, r.Destination(), err)
		}
	}
	return nil
}

// admitType checks that events of type t may be stored: t has a block of
// its own, or the catch-all "*" takes it. A type the catch-all has not
// seen yet is admitted only while it holds fewer than max_types, and, for
// a tenant's client (not the operator's), while that tenant has added
// fewer than max_types_per_tenant. It then holds its slot, under the lock
// (concurrent requests cannot overshoot), until the request ends:
// settleTypes keeps it if the request stored an event of it.
func (e *Engine) admitType(t string, req *IngestRequest) error {
	if _, ok := e.config().Events[t]; ok {
		return nil // a declared type: no lock on the hot path
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	cfg := e.config() // again under the lock, which a reload takes to apply
	if _, ok := cfg.Events[t]; ok {
		return nil
	}
	if _, ok := cfg.Events["*"]; !ok {
		return switchyard.Errorf(switchyard.EUNKNOWNTYPE, "no event block in the configuration for type %q", t)
	}
	if _, ok := e.loops[t]; ok || slices.Contains(req.newTypes, t) {
		return nil
	}
	if p, ok := e.pending[t]; ok {
		p.requests++ // another request's new type: its slot is taken already
	} else {
		if err := e.catchAllRoom(cfg, t, req); err != nil {
			return err
		}
		e.pending[t] = &pendingType{tenant: req.tenantShare(), requests: 1}
	}
	req.newTypes = append(req.newTypes, t)
	return nil
}

// pendingType is a new catch-all type that requests in flight hold a slot
// for.
type pendingType struct {
	tenant   string // whose share it counts against; "" = the operator's
	requests int
}

// tenantShare is the tenant whose max_types_per_tenant the request's new
// types count against: "" for the operator's clients, which have none.
func (req *IngestRequest) tenantShare() string {
	if req.Operator {
		return ""
	}
	return req.Tenant
}

// settleTypes ends the request's hold on its new types: one it stored an
// event of (stored counts them per type; nil when nothing was stored)
// gets its loop and keeps its slot, counted against the share that
// admitType checked (the tenant that first asked for it); the others give
// theirs back once no request in flight holds them. A type whose "*" block
// a reload removed meanwhile gets no loop: its events wait, as those of a
// removed type do (warnRemoved).
func (e *Engine) settleTypes(req *IngestRequest, stored map[string]int) {
	types := req.newTypes
	req.newTypes = nil // once only, even if a second call comes (the deferred one)
	if len(types) == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range types {
		p := e.pending[t]
		if p == nil {
			continue
		}
		if _, ok := e.loops[t]; !ok && stored[t] > 0 {
			if _, ok := e.policyOf(t); ok {
				e.startLoopLocked(t)
				if p.tenant != "" {
					e.addedBy[t] = p.tenant
				}
			} else {
				e.orphans[t] = true // for the reload that takes it again
				e.log.Warn("a reload removed the catch-all while events of a new type were being stored: they wait until a block or the catch-all takes the type again (a reload)", "type", t)
			}
		}
		if p.requests--; p.requests == 0 {
			delete(e.pending, t)
		}
	}
}

// catchAllRoom says whether the catch-all may take the new type t for
// req: the types it holds against max_types, and, for a tenant's client,
// those its tenant's clients added in this run against
// max_types_per_tenant. Called with e.mu held.
func (e *Engine) catchAllRoom(cfg *config.Config, t string, req *IngestRequest) error {
	use := e.catchAllLocked(cfg)
	if use.Types >= cfg.MaxTypes {
		return switchyard.Errorf(switchyard.ETOOMANYTYPES, "the catch-all event \"*\" block already holds %d types (its max_types%s); type %q needs a block of its own, or a higher max_types", use.Types, heldInFlight(use.InFlight), t)
	}
	if mine := use.ByTenant[req.Tenant]; !req.Operator && mine >= cfg.MaxTypesPerTenant {
		return switchyard.Errorf(switchyard.ETOOMANYTYPES, "tenant %q has already added %d types to the catch-all event \"*\" block (its max_types_per_tenant); type %q needs a block of its own, or a higher max_types_per_tenant", req.Tenant, mine, t)
	}
	return nil
}

// heldInFlight says, in a refusal, how many of the types counted are held by
// requests in flight: those slots come back if the requests fail.
func heldInFlight(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d of them new types of requests still in flight", n)
}

// CatchAllUse is what the catch-all "*" block holds: the types it took,
// against max_types, and how many of them each tenant's tokens added in
// this run, against max_types_per_tenant.
type CatchAllUse struct {
	Types, MaxTypes, MaxTypesPerTenant int
	ByTenant                           map[string]int
	// InFlight of Types are new types that requests still in flight hold
	// (admitType): each keeps its slot only if its request stores it.
	InFlight int
}

// CatchAll reports the catch-all's use; ok is false without a "*" block.
func (e *Engine) CatchAll() (u CatchAllUse, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	cfg := e.config()
	if _, ok := cfg.Events["*"]; !ok {
		return u, false
	}
	return e.catchAllLocked(cfg), true
}

// catchAllLocked counts the types the catch-all holds: those with a loop,
// or held by a request in flight (admitType), but no block of their own (a
// reload may have given one a block) that are no inbox's queue. Called
// with e.mu held.
func (e *Engine) catchAllLocked(cfg *config.Config) CatchAllUse {
	u := CatchAllUse{MaxTypes: cfg.MaxTypes, MaxTypesPerTenant: cfg.MaxTypesPerTenant, ByTenant: map[string]int{}}
	count := func(t, by string) {
		if _, own := cfg.Events[t]; own || strings.HasPrefix(t, inboxQueuePrefix) {
			return
		}
		u.Types++
		if by != "" {
			u.ByTenant[by]++
		}
	}
	for t := range e.loops {
		count(t, e.addedBy[t])
	}
	for t, p := range e.pending {
		if _, ok := e.loops[t]; !ok {
			before := u.Types
			count(t, p.tenant)
			u.InFlight += u.Types - before
		}
	}
	return u
}

func idScope(tenant, source, id string) string {
	return "i\x00" + tenant + "\x00" + source + "\x00" + id
}

// Ingest stores the events of one request durably and returns the response
// to give. It returns only after the data file is fsynced: a Response with
// a 2xx status is the promise that the events are on disk.
func (e *Engine) Ingest(ctx context.Context, req *IngestRequest) (*Response, error) {
	taken, err := e.charge(ask{req.Tenant, req.Operator, len(req.Events), "events"})
	if err != nil {
		return nil, err
	}
	resp, err := e.ingest(ctx, req)
	if err != nil && givesBack(err) {
		taken.give() // only the events of requests answered count against the rate
	}
	return resp, err
}

// ingest is Ingest once the request's tenant may store its events.
func (e *Engine) ingest(ctx context.Context, req *IngestRequest) (*Response, error) {
	e.ingesting.Add(1)
	defer e.ingesting.Add(-1)
	defer e.settleTypes(req, nil) // refused, replayed: its new types take no slot
	if err := e.admit(req); err != nil {
		return nil, err
	}
	scopes, digests := req.scopes()
	leave, err := e.enterFlight(ctx, scopes, digests)
	if err != nil {
		return nil, err
	}
	defer leave()

	now := e.now()
	outcomes := make([]Outcome, len(req.Events))
	for i := range req.Events {
		outcomes[i].ID = req.Events[i].Event.ID
	}
	// Only a request with a scope can have been seen before: the common
	// case (no key, router-assigned ids) skips the read transaction.
	if len(scopes) > 0 {
		if resp, err := e.replay(ctx, req, now, outcomes); resp != nil || err != nil {
			return resp, err
		}
	}
	if err := e.space.check(); err != nil {
		return nil, err
	}
	resp := req.Render(outcomes)
	types := typeCounts.Get().(map[string]int)
	defer func() { clear(types); typeCounts.Put(types) }()
	err = e.store.Update(ctx, func(tx *storage.Tx) error {
		clear(types)
		return e.storeRequest(tx, req, outcomes, &resp, now, types)
	})
	if err != nil && !errors.Is(err, storage.ErrUnconfirmed) {
		return nil, unavailable(err)
	}
	// Stored, or applied and not yet confirmed (storage.ErrUnconfirmed,
	// told below): the events are in the file, their types need loops.
	e.settleTypes(req, types)
	for t, n := range types {
		e.yield.stored.Add(int64(n))
		e.metrics.ingestedType(t, n)
		e.wake(t)
	}
	if err != nil {
		return nil, unavailable(err)
	}
	return &resp, nil
}

// replay is the stored answer to a request seen before (nil: none), given
// once it is on disk (confirmed).
func (e *Engine) replay(ctx context.Context, req *IngestRequest, now time.Time, outcomes []Outcome) (*Response, error) {
	var resp *Response
	err := e.store.View(func(tx *storage.Tx) error {
		var err error
		resp, err = req.lookup(tx, now, outcomes)
		return err
	})
	if err == nil && resp != nil {
		if err = e.confirmed(ctx); err != nil && !errors.Is(err, storage.ErrUnconfirmed) {
			err = fmt.Errorf("%w: %w", storage.ErrUnconfirmed, err) // stored, not on the disk
		}
	}
	if err != nil {
		return nil, unavailable(err)
	}
	return resp, nil
}

// confirmed makes sure the data file's last commit is on disk before a
// replay promises what the first answer did: while a commit is applied but
// unconfirmed (storage.ErrUnconfirmed), the record replayed may be one no
// sync has covered yet, and one more commit covers it.
func (e *Engine) confirmed(ctx context.Context) error {
	w, ok := e.store.(interface{ Writable() error })
	if !ok || !errors.Is(w.Writable(), storage.ErrUnconfirmed) {
		return nil
	}
	return e.store.Update(ctx, func(*storage.Tx) error { return nil })
}

// typeCounts are Ingest's counts of the events stored per type, reused: a
// map per request was an allocation of every single-event request.
var typeCounts = sync.Pool{New: func() any { return make(map[string]int, 1) }}

// admit checks a request before anything is looked up or stored: every
// event's type is one the router takes and can carry. (Whether the data
// file has room is asked after the replay lookup, since a replay stores
// nothing and a full budget does not refuse it.)
func (e *Engine) admit(req *IngestRequest) error {
	m := new(switchyard.Message)
	for i := range req.Events {
		ev := &req.Events[i].Event
		if strings.HasPrefix(ev.Type, inboxQueuePrefix) {
			return switchyard.Errorf(switchyard.EINVALID, "event types starting with %q are the router's own", inboxQueuePrefix)
		}
		if ev.Type == "*" {
			return switchyard.Errorf(switchyard.EINVALID, `type "*" names the catch-all event block, not a type`)
		}
		if err := e.admitType(ev.Type, req); err != nil {
			return err
		}
		if err := e.fitsRoutes(req.Tenant, ev, m); err != nil {
			return err
		}
	}
	return nil
}

// enterFlight registers the request's scopes as in flight. When the same
// request (same digest) is in flight already, it waits for it, up to
// IdempotencyWait, so that this one replays its outcome; another body
// under a scope in flight is refused at once. The returned leave must be
// called once the request is done.
func (e *Engine) enterFlight(ctx context.Context, scopes []string, digests [][]byte) (leave func(), err error) {
	if len(scopes) == 0 {
		return stayedOut, nil // nothing to hold: no key, router-made ids
	}
	for {
		fl, digest, ok := e.inflight.acquire(scopes, digests)
		if ok {
			return func() { e.inflight.leave(scopes, fl) }, nil
		}
		if !bytes.Equal(fl.digest, digest) {
			return nil, switchyard.Errorf(switchyard.EIDEMREUSE, "the idempotency key or event id is in use by a request with another body")
		}
		wait := time.NewTimer(e.opts.IdempotencyWait)
		select {
		case <-fl.done:
			wait.Stop()
		case <-wait.C:
			return nil, &switchyard.Error{Code: switchyard.EINPROGRESS, Message: "a request with this idempotency key is still in flight", RetryAfter: time.Second}
		case <-ctx.Done():
			wait.Stop()
			return nil, ctx.Err()
		}
	}
}

// storeRequest writes one request in tx: each new event with its queue entry
// (and, for a client-chosen id, its idempotency record), then the request's
// own idempotency record with the response it gets. types counts the
// events stored per type.
func (e *Engine) storeRequest(tx *storage.Tx, req *IngestRequest, outcomes []Outcome, resp *Response, now time.Time, types map[string]int) error {
	window := e.config().Idempotency.Window
	// The records live until they are encoded, within this call: one
	// allocation for the request's, not one per event.
	recs := make([]storage.Record, len(req.Events))
	for i := range req.Events {
		if outcomes[i].Duplicate {
			continue
		}
		ev := &req.Events[i]
		pol, _ := e.policy(ev.Event.Type)
		rec := &recs[i]
		*rec = storage.Record{Event: ev.Event, Tenant: req.Tenant, IdempotencyKey: req.Key, CreatedAt: now, UpdatedAt: now}
		insert := tx.InsertEvent
		if !ev.ClientID {
			insert = tx.InsertNewEvent // the router made the id (api.finish): it is new
		}
		if err := insert(rec, pol.ByKey()); err != nil {
			if errors.Is(err, storage.ErrExists) && ev.ClientID && stillStored(tx, req.Tenant, ev) {
				// Past its idempotency window, but the event is still
				// here (pending, dead-lettered, or kept after delivery):
				// a resend, reported as a duplicate.
				outcomes[i].Duplicate = true
				*resp = req.Render(outcomes)
				continue
			}
			if errors.Is(err, storage.ErrExists) {
				return switchyard.Errorf(switchyard.EIDCONFLICT, "event id %q is already stored for another event (of another source, or with other content): an event needs an id of its own", ev.Event.ID)
			}
			return err
		}
		types[ev.Event.Type]++
		if ev.ClientID {
			// lookup read the scope; enterFlight keeps other writes to it out.
			if err := tx.ReplaceIdempotency(idScope(req.Tenant, ev.Event.Source, ev.Event.ID), &storage.IdemRecord{
				Digest: ev.Digest, EventIDs: []string{ev.Event.ID}, CreatedAt: now, ExpiresAt: now.Add(window),
			}, ev.oldExpiry); err != nil {
				return err
			}
		}
	}
	if req.Key == "" || resp.Status >= 300 {
		return nil
	}
	return tx.ReplaceIdempotency(keyScope(req.Tenant, req.Endpoint, req.Key), &storage.IdemRecord{
		Digest: req.Digest, Status: resp.Status, ContentType: resp.ContentType, Body: resp.Body,
		EventIDs: req.ids(), CreatedAt: now, ExpiresAt: now.Add(window),
	}, req.keyOldExpiry)
}

// stillStored reports whether the data file holds ev as this tenant sent
// it: the same id, source and content (the trace context aside, and the
// time aside when the client sent none and the router filled it in).
func stillStored(tx *storage.Tx, tenant string, ev *IngestEvent) bool {
	stored, err := tx.Record(storage.EventKey(tenant, ev.Event.ID))
	if err != nil {
		return false
	}
	return sameEvent(&stored.Event, &ev.Event, !ev.RouterTime)
}

// sameEvent reports whether stored and sent are one event, as the
// idempotency digest (cloudevents.Digest) defines it: every attribute, the
// extensions but the trace context, and the data; the time only when
// withTime, and as an instant (the file keeps it in UTC).
func sameEvent(stored, sent *switchyard.Event, withTime bool) bool {
	a, b := *stored, *sent
	a.Time, b.Time = a.Time.UTC(), b.Time.UTC()
	if !withTime {
		a.Time = b.Time
	}
	return bytes.Equal(cloudevents.Digest(&a), cloudevents.Digest(&b))
}

// idemReadFailed is the error for a lookup whose idempotency record could
// not be read. A record that does not decode is internal: retrying cannot
// help (unlike unavailable), the operator must look at the data file.
func idemReadFailed(err error) error {
	if errors.Is(err, storage.ErrCorrupt) {
		return &switchyard.Error{Code: switchyard.EINTERNAL, Message: "a stored idempotency record of this request cannot be read (see router db check); nothing was stored", Err: err}
	}
	return fmt.Errorf("read idempotency record: %w", err)
}

// unavailable passes coded errors through and turns storage failures into
// 503 storage_unavailable: the request had no effect and may be retried,
// unless the disk did not confirm a write it took (storage.ErrUnconfirmed).
// Unavailable is unavailable, for the API's errors that did not come
// through the engine's own calls (a lost data file met elsewhere).
func Unavailable(err error) error { return unavailable(err) }

func unavailable(err error) error {
	if err == nil {
		return nil
	}
	var coded *switchyard.Error
	if errors.As(err, &coded) {
		return err
	}
	if errors.Is(err, storage.ErrFileLost) {
		// Until a restart: a client retrying every second gains nothing.
		// The message leaves the paths out (a tenant's client reads it:
		// a security trial); the log and an admin's /readyz have them.
		return &switchyard.Error{Code: switchyard.EUNAVAILABLE, Message: storage.ErrFileLost.Error() + "; nothing was stored until the router is restarted (its log and /readyz say more)", RetryAfter: time.Minute, Err: err}
	}
	if errors.Is(err, storage.ErrUnconfirmed) {
		// Applied, not yet durable: "nothing was stored" would have a
		// client without a key send a second copy.
		return &switchyard.Error{Code: switchyard.EUNAVAILABLE, Message: "the disk did not confirm the write (its sync failed): the request may have taken effect; look before doing it again (an ingest sent again with the same Idempotency-Key answers as the first did if it was stored; without a key, a resend may store a second copy)", RetryAfter: time.Second, Err: err}
	}
	return &switchyard.Error{Code: switchyard.EUNAVAILABLE, Message: "the data file cannot be used; nothing was stored", RetryAfter: time.Second, Err: err}
}

// scopes lists the idempotency scopes a request takes, with the digest
// each must match.
func (req *IngestRequest) scopes() ([]string, [][]byte) {
	var scopes []string
	var digests [][]byte
	if req.Key != "" {
		scopes = append(scopes, keyScope(req.Tenant, req.Endpoint, req.Key))
		digests = append(digests, req.Digest)
	}
	for i := range req.Events {
		if ev := &req.Events[i]; ev.ClientID {
			scopes = append(scopes, idScope(req.Tenant, ev.Event.Source, ev.Event.ID))
			digests = append(digests, ev.Digest)
		}
	}
	return scopes, digests
}

func (req *IngestRequest) ids() []string {
	ids := make([]string, len(req.Events))
	for i := range req.Events {
		ids[i] = req.Events[i].Event.ID
	}
	return ids
}

// lookup checks the request against what is stored. It returns the stored
// response when the Idempotency-Key was seen with the same request, an
// error when a key or an id is reused for something else, and otherwise
// marks in outcomes the events that are already stored.
func (req *IngestRequest) lookup(tx *storage.Tx, now time.Time, outcomes []Outcome) (*Response, error) {
	if req.Key != "" {
		var rec *storage.IdemRecord
		var err error
		rec, req.keyOldExpiry, err = tx.LiveIdempotency(keyScope(req.Tenant, req.Endpoint, req.Key), now)
		switch {
		case err == nil && !bytes.Equal(rec.Digest, req.Digest):
			return nil, switchyard.Errorf(switchyard.EIDEMREUSE, "idempotency key %q was used with another request (its body, or a ce-* header or content type that makes the event, differs)", req.Key)
		case err == nil:
			return &Response{Status: rec.Status, ContentType: rec.ContentType, Body: rec.Body, Replayed: true}, nil
		case !errors.Is(err, storage.ErrNotFound):
			return nil, idemReadFailed(err)
		}
	}
	dups := 0
	for i := range req.Events {
		ev := &req.Events[i]
		if !ev.ClientID {
			continue
		}
		rec, oldExpiry, err := tx.LiveIdempotency(idScope(req.Tenant, ev.Event.Source, ev.Event.ID), now)
		ev.oldExpiry = oldExpiry
		switch {
		case err == nil && !bytes.Equal(rec.Digest, ev.Digest):
			return nil, switchyard.Errorf(switchyard.EIDEMREUSE, "event %q from source %q was already accepted with other content", ev.Event.ID, ev.Event.Source)
		case err == nil:
			outcomes[i].Duplicate = true
			dups++
		case !errors.Is(err, storage.ErrNotFound):
			return nil, idemReadFailed(err)
		}
	}
	if dups == len(req.Events) && req.Key == "" {
		// Every event is a repeat: the request as a whole is a replay, and
		// gets the response the first one got.
		first := make([]Outcome, len(outcomes))
		for i := range outcomes {
			first[i].ID = outcomes[i].ID
		}
		r := req.Render(first)
		r.Replayed = true
		return &r, nil
	}
	return nil, nil
}
