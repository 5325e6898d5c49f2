package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/internal/logthrottle"
	"github.com/switchyard-router/switchyard/storage"
)

// An inbox's received events wait in the queue "inbox:<name>" and are
// delivered by an ordinary loop whose one route is the inbox's deliver sink
// ("inbox.<name>"), so inbound delivery gets the same adaptive polling,
// retries, backoff and DLQ as publishing. An inbox without a deliver block
// is pulled instead (GET /v1/subscriptions/{name}/messages).
const inboxQueuePrefix = config.InboxQueuePrefix

// inbox is one configured inbox.
type inbox struct {
	cfg    config.Inbox
	policy *config.Policy // the delivery loop's policy; routes to the deliver sink

	// lines: a pull inbox ordered by key lines up, at its first pull, what
	// was stored before it was (Engine.lineUp).
	lines keyLines

	// pull mode: leases of messages handed out and not yet acked, and a
	// channel closed (and replaced) whenever events arrive, for long polls.
	mu      sync.Mutex
	leases  map[string]time.Time
	arrived chan struct{}
	// acks counts the acks committed: a pull whose snapshot one committed
	// after looks at its events again (Engine.stillPending), or it could
	// hand out an event just acked once the ack let go of its lease.
	acks uint64

	// drops counts the redeliveries dropped and stores the events stored
	// since the last line that said so (noteReceived): a replay of a
	// stream logged a line per batch, a hundred in 0.4 s (a trial).
	drops, stores atomic.Int64
	dropLog       logthrottle.Throttle
	sayDropsLater logthrottle.Later

	// refused is the last refusal of a batch and when, nil once one is
	// taken: the inbox is not healthy while it is recent (InboxRefusal),
	// though its broker answers. A full storage budget refuses every
	// batch, and /readyz and switchyard_inbox_up said ok throughout (a
	// NATS trial).
	refused atomic.Pointer[refusal]
}

// refusal is a batch Receive refused: why, and when.
type refusal struct {
	err error
	at  time.Time
}

// refusalFresh is how long a refusal counts: longer than the longest
// pause before the batch comes again (the sources' receive backoff, 30 s
// at most) and a pull's wait. A batch that does not come again (purged,
// deleted by retention, taken by another router) leaves the inbox
// unhealthy no longer.
const refusalFresh = time.Minute

// dropLogEvery is how often an inbox that keeps dropping redeliveries
// says so.
var dropLogEvery = 10 * time.Second

// sayDrops logs the redeliveries in dropped, and the events it stored,
// since it last said so, at most every dropLogEvery; what it may not say
// yet it says once it may, whether or not another batch comes: a replay
// that ends is told in full (a trial's reset dropped 600 and the log said
// 50), an inbox gone idle too (a review).
func (e *Engine) sayDrops(in *inbox) {
	if in.drops.Load() == 0 {
		return
	}
	if _, ok := in.dropLog.Take("drops", e.now()); !ok {
		in.sayDropsLater.After(dropLogEvery, func() { e.sayDrops(in) })
		return
	}
	dropped, stored := in.drops.Swap(0), in.stores.Swap(0)
	e.log.Info("inbox dropped redeliveries (see GET /v1/inbox/{name}/dedup; said at most every 10 s)", "inbox", in.cfg.Name, "dropped", dropped, "stored", stored)
}

func newInbox(in config.Inbox) *inbox {
	pol := in.Policy
	pol.Plugins = in.Plugins
	pol.Routes = nil
	if in.Deliver.URL != "" {
		pol.Routes = []config.Route{{To: config.InboxSinkName(in.Name), Subject: "deliver"}}
	}
	ib := &inbox{cfg: in, policy: &pol, leases: make(map[string]time.Time), arrived: make(chan struct{}), dropLog: logthrottle.Throttle{Every: dropLogEvery}}
	ib.lines.stale.Store(pol.ByKey())
	return ib
}

func (in *inbox) pull() bool { return in.cfg.Deliver.URL == "" }

// notify wakes the long polls of a pull inbox.
func (in *inbox) notify() {
	in.mu.Lock()
	close(in.arrived)
	in.arrived = make(chan struct{})
	in.mu.Unlock()
}

// inboxMetrics count what the inboxes receive and drop.
type inboxMetrics struct {
	received *prometheus.CounterVec
	skips    *prometheus.CounterVec
}

// newInboxMetrics makes the inboxes' series, each inbox's at 0 from the
// start (as typeSeries does a type's).
func newInboxMetrics(inboxes []config.Inbox) *inboxMetrics {
	m := &inboxMetrics{
		received: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_inbox_received_total",
			Help: "Consumed messages stored by an inbox (new ids)."}, []string{"inbox"}),
		skips: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_inbox_dedup_skips_total",
			Help: "Consumed messages an inbox acknowledged and dropped, by reason."}, []string{"inbox", "reason"}),
	}
	for _, in := range inboxes {
		m.received.WithLabelValues(in.Name)
		for _, r := range storage.SkipReasons {
			m.skips.WithLabelValues(in.Name, string(r))
		}
	}
	return m
}

func (m *inboxMetrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.received, m.skips} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// policyOf returns the policy of a queue: an event type's, or an inbox's.
func (e *Engine) policyOf(queue string) (*config.Policy, bool) {
	if name, ok := strings.CutPrefix(queue, inboxQueuePrefix); ok {
		in, ok := e.inboxes[name]
		if !ok {
			return nil, false
		}
		return in.policy, true
	}
	return e.config().Policy(queue)
}

func (e *Engine) inbox(name string) (*inbox, error) {
	in, ok := e.inboxes[name]
	if !ok {
		return nil, switchyard.Errorf(switchyard.ENOTFOUND, "no inbox %q in the configuration", name)
	}
	return in, nil
}

// ReceiveResult counts what Receive did with a batch.
type ReceiveResult struct {
	Stored  int // new ids, stored for delivery
	Skipped int // redeliveries (and rejected messages), acknowledged and dropped
}

// Receive stores a consumed batch for inbox name: every message whose id the
// inbox has not seen within its ttl is stored and its id recorded, in one
// transaction; a redelivery is dropped and written to the dedup audit. Only
// after Receive returns nil may the source acknowledge the batch to the
// broker. A refusal (a full storage budget, a failed commit) is kept a
// while for the inbox's health (InboxRefusal).
func (e *Engine) Receive(ctx context.Context, name string, msgs []switchyard.Inbound) (ReceiveResult, error) {
	in, err := e.inbox(name)
	if err != nil {
		return ReceiveResult{}, err
	}
	res, err := e.receive(ctx, in, msgs)
	in.noteRefusal(err, e.now())
	if err != nil {
		return ReceiveResult{}, fmt.Errorf("inbox %s: %w", name, err)
	}
	return res, nil
}

// receive is Receive's work on the inbox found.
func (e *Engine) receive(ctx context.Context, in *inbox, msgs []switchyard.Inbound) (ReceiveResult, error) {
	name := in.cfg.Name
	now := e.now()
	for i := range msgs {
		if ev := &msgs[i].Event; storage.CheckTime(ev.Time) != nil {
			// A time the data file cannot hold is left out, with a
			// warning, as the lenient decoder leaves out one that does
			// not parse: never stored as another time, never a reason to
			// wedge.
			e.log.Warn("inbox: an event's time is outside what the router stores; left out", "inbox", name, "id", ev.ID, "time", ev.Time, "origin", msgs[i].Origin)
			ev.Time = time.Time{}
		}
	}
	if err := e.space.check(); err != nil {
		// Past the storage budget an inbox takes nothing, as ingest
		// does: unacknowledged, the messages wait in the broker.
		return ReceiveResult{}, err
	}
	var res ReceiveResult
	var skips []storage.Skip
	reads := readsTo(msgs)
	err := e.store.Update(ctx, func(tx *storage.Tx) error {
		// A group commit may run this again: start afresh each time.
		res, skips = ReceiveResult{}, skips[:0]
		batch := make(map[inboxEvent]string, len(msgs))
		for i := range msgs {
			skip, err := in.receiveOne(tx, &msgs[i], batch, now)
			if err != nil {
				return err
			}
			if skip == nil {
				res.Stored++
				continue
			}
			if err := tx.AddSkip(name, skip); err != nil {
				return err
			}
			skips = append(skips, *skip)
			res.Skipped++
		}
		for _, r := range reads {
			if err := tx.KeepRead(name, in.cfg.ReadsAs(), r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return ReceiveResult{}, fmt.Errorf("store batch: %w", err)
	}
	e.noteReceived(in, res, skips)
	return res, nil
}

// readsTo is where the batch msgs takes each partition's reading to: the
// latest Read of each.
func readsTo(msgs []switchyard.Inbound) []switchyard.Read {
	var reads []switchyard.Read
	for _, m := range msgs {
		if m.Read.Topic == "" {
			continue
		}
		i := slices.IndexFunc(reads, func(r switchyard.Read) bool { return r.Topic == m.Read.Topic && r.Partition == m.Read.Partition })
		switch {
		case i < 0:
			reads = append(reads, m.Read)
		case m.Read.Next > reads[i].Next:
			reads[i] = m.Read
		}
	}
	return reads
}

// InboxRead is where inbox name's reading of a partition (Kafka) or stream
// (JetStream), as its group or durable, goes on from: the latest Read of
// the batches it took (Receive keeps it with each); false when it kept
// none (a group or durable of another name reads from the start, as a new
// one does).
func (e *Engine) InboxRead(name, topic string, partition int32) (r switchyard.Read, ok bool, err error) {
	in, err := e.inbox(name)
	if err != nil {
		return r, false, err
	}
	err = e.store.View(func(tx *storage.Tx) error {
		r, ok, err = tx.InboxRead(name, in.cfg.ReadsAs(), topic, partition)
		return err
	})
	return r, ok, err
}

// KeepInboxRead keeps r as where inbox name's reading goes on from, as
// Receive does with each batch it takes (a later one of the same id
// stands): a JetStream source keeps its durable's ack floor so when it
// reads a new one.
func (e *Engine) KeepInboxRead(ctx context.Context, name string, r switchyard.Read) error {
	in, err := e.inbox(name)
	if err != nil {
		return err
	}
	return e.store.Update(ctx, func(tx *storage.Tx) error { return tx.KeepRead(name, in.cfg.ReadsAs(), r) })
}

// noteRefusal keeps err as the inbox's last refusal; nil (a batch taken)
// clears it.
func (in *inbox) noteRefusal(err error, now time.Time) {
	if err == nil {
		if in.refused.Load() != nil {
			in.refused.Store(nil)
		}
		return
	}
	in.refused.Store(&refusal{err: err, at: now})
}

// InboxRefusal says why inbox name takes no batch while its last refusal
// is under refusalFresh old; nil otherwise, and for a name no inbox has.
// The inbox's health is its source's (connected, fetching) and this.
func (e *Engine) InboxRefusal(name string) error {
	in, ok := e.inboxes[name]
	if !ok {
		return nil
	}
	r := in.refused.Load()
	if r == nil || e.now().Sub(r.at) >= refusalFresh {
		return nil
	}
	return fmt.Errorf("inbox %q: the last batch was not taken (it comes again after a pause): %w", name, r.err)
}

// receiveOne stores one consumed message in the inbox's queue and
// remembers its source and id, or returns why it was dropped: no id where one is
// required, a duplicate in this batch, an id seen within the window, or a
// record that already stands for it.
func (in *inbox) receiveOne(tx *storage.Tx, m *switchyard.Inbound, batch map[inboxEvent]string, now time.Time) (*storage.Skip, error) {
	name, queue, ev := in.cfg.Name, config.InboxQueueName(in.cfg.Name), inboxEvent{m.Event.Source, m.Event.ID}
	skip := &storage.Skip{ID: ev.id, Source: ev.source, At: now, Origin: m.Origin}
	switch seen, err := tx.InboxSeen(name, queue, ev.source, ev.id, now); {
	case m.IDTooLong && in.cfg.MissingID == config.MissingIDReject:
		skip.Reason = storage.SkipIDTooLong
	case m.IDDerived && in.cfg.MissingID == config.MissingIDReject:
		skip.Reason = storage.SkipNoID
	case batch[ev] != "":
		skip.Reason, skip.FirstOrigin, skip.FirstAt = storage.SkipDuplicateInBatch, batch[ev], now
	case err == nil:
		skip.Reason, skip.FirstOrigin, skip.FirstAt = storage.SkipDuplicate, seen.Origin, seen.ReceivedAt
	case !errors.Is(err, storage.ErrNotFound):
		return nil, err
	}
	if skip.Reason != "" {
		return skip, nil
	}
	switch _, err := tx.InboxRecord(queue, ev.source, ev.id); {
	case err == nil:
		// Stored before, its id since forgotten: the record (waiting or
		// delivered) already stands for it.
		skip.Reason = storage.SkipDuplicate
		return skip, nil
	case !errors.Is(err, storage.ErrNotFound):
		return nil, err
	}
	rec := &storage.Record{Event: m.Event, Tenant: storage.DefaultTenant, Queue: queue, CreatedAt: now, UpdatedAt: now}
	if err := tx.InsertNewEvent(rec, in.policy.ByKey()); err != nil {
		return nil, err
	}
	if err := tx.PutInboxSeen(name, ev.source, ev.id, &storage.Seen{Origin: m.Origin, ReceivedAt: now, ExpiresAt: now.Add(in.cfg.TTL)}); err != nil {
		return nil, err
	}
	batch[ev] = m.Origin
	return nil, nil
}

// inboxEvent names an event an inbox receives: CloudEvents' source and id
// (docs/decisions/inbox-identity.md).
type inboxEvent struct{ source, id string }

// noteReceived logs and counts a stored batch's drops and stores, and
// wakes whoever delivers the inbox.
func (e *Engine) noteReceived(in *inbox, res ReceiveResult, skips []storage.Skip) {
	name := in.cfg.Name
	for _, s := range skips {
		e.log.Debug("inbox dropped a redelivery", "inbox", name, "id", s.ID, "reason", s.Reason, "origin", s.Origin, "first", s.FirstOrigin)
		e.inboxMetrics.skips.WithLabelValues(name, string(s.Reason)).Inc()
	}
	// A batch without a redelivery counts its stores too while drops
	// wait to be told.
	if len(skips) > 0 || in.drops.Load() > 0 {
		in.drops.Add(int64(len(skips)))
		in.stores.Add(int64(res.Stored))
		e.sayDrops(in)
	}
	e.inboxMetrics.received.WithLabelValues(name).Add(float64(res.Stored))
	if res.Stored > 0 {
		if in.pull() {
			in.notify()
		} else {
			e.wake(config.InboxQueueName(name))
		}
	}
}

// Skips is GET /v1/inbox/{name}/dedup: the audit of dropped redeliveries,
// newest first.
func (e *Engine) Skips(name string, before time.Time, limit int) ([]storage.Skip, error) {
	if _, err := e.inbox(name); err != nil {
		return nil, err
	}
	var out []storage.Skip
	err := e.store.View(func(tx *storage.Tx) (err error) {
		out, err = tx.Skips(name, before, limit)
		return err
	})
	return out, err
}

// notPulled is the error of a pull or an ack on an inbox that delivers.
func notPulled(in *inbox) error {
	return switchyard.Errorf(switchyard.EINVALIDREQUEST, "inbox %q delivers to %s; it is not pulled", in.cfg.Name, in.cfg.Deliver.URL)
}

// Pull is GET /v1/subscriptions/{name}/messages: up to max due events of a
// pull inbox, each leased for lease; it waits up to wait for the first. An
// answer stops short of max once its events hold maxBatchOutputBytes, as a
// batch does (the first whatever its size): a thousand events of 1 MB were
// read and answered at once.
func (e *Engine) Pull(ctx context.Context, name string, max int, wait, lease time.Duration) ([]*storage.Record, error) {
	in, err := e.inbox(name)
	if err != nil {
		return nil, err
	}
	if !in.pull() {
		return nil, notPulled(in)
	}
	if lease <= 0 { // a lease of 0 holds nothing: every pull would hand the same events out
		return nil, switchyard.Errorf(switchyard.EINVALIDREQUEST, "lease must be a positive duration such as 30s")
	}
	if err := in.lines.lineUp(ctx, e, config.InboxQueueName(in.cfg.Name)); err != nil {
		return nil, err
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		in.mu.Lock()
		arrived, acks := in.arrived, in.acks
		in.mu.Unlock()
		now := e.now()
		var recs []*storage.Record
		err := e.store.View(func(tx *storage.Tx) (err error) {
			recs, err = tx.Due(config.InboxQueueName(name), now, 0, storage.Limit{Events: max, Bytes: e.maxBatchOutputs()}, in.policy.ByKey(), func(key []byte) bool {
				in.mu.Lock()
				defer in.mu.Unlock()
				until, ok := in.leases[string(key)]
				return ok && now.Before(until)
			})
			return err
		})
		if err != nil {
			return nil, err
		}
		out, err := e.leaseOut(in, recs, acks, now, lease)
		if err != nil {
			return nil, err
		}
		if len(out) > 0 {
			return out, nil
		}
		select {
		case <-arrived:
		case <-deadline.C:
			return nil, nil
		case <-ctx.Done():
			return nil, nil
		}
	}
}

// leaseOut leases the events of recs, read in a snapshot taken when
// in.acks was acks, that no other pull has leased since, and returns them.
func (e *Engine) leaseOut(in *inbox, recs []*storage.Record, acks uint64, now time.Time, lease time.Duration) ([]*storage.Record, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for in.acks != acks { // an ack committed since the snapshot
		acks = in.acks
		in.mu.Unlock()
		var err error
		recs, err = e.stillPending(recs)
		in.mu.Lock()
		if err != nil {
			return nil, err
		}
	}
	out := recs[:0]
	for _, r := range recs {
		// Another pull may have leased it since the snapshot.
		if until, ok := in.leases[r.Key()]; ok && now.Before(until) {
			continue
		}
		in.leases[r.Key()] = now.Add(lease)
		out = append(out, r)
	}
	return out, nil
}

// stillPending is the records of recs whose events are still pending.
func (e *Engine) stillPending(recs []*storage.Record) ([]*storage.Record, error) {
	out := recs[:0]
	err := e.store.View(func(tx *storage.Tx) error {
		for _, r := range recs {
			now, err := tx.Record(r.Key())
			if errors.Is(err, storage.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if now.State == storage.StatePending {
				out = append(out, r)
			}
		}
		return nil
	})
	return out, err
}

// Acks names the pulled events an ack marks delivered: by the ack ids
// their pull gave (storage.InboxRef; one record each), or by their event
// ids, which name one record only while no two sources share the id.
type Acks struct {
	AckIDs []string
	IDs    []string
}

// AckResult is what an ack did.
type AckResult struct {
	Acked int // records marked delivered
	// Ambiguous are the event ids that several pending records hold (two
	// sources chose the same id): none of them was acked; their ack ids
	// would say which.
	Ambiguous []string
}

// Ack is POST /v1/subscriptions/{name}/ack: the pulled events are
// delivered. Unknown or already acked events are ignored (an ack is
// idempotent).
func (e *Engine) Ack(ctx context.Context, name string, acks Acks) (AckResult, error) {
	in, err := e.inbox(name)
	if err != nil {
		return AckResult{}, err
	}
	if !in.pull() { // an ack would mark delivered what was never POSTed (a review)
		return AckResult{}, notPulled(in)
	}
	now := e.now()
	var recs []*storage.Record
	var ambiguous []string
	err = e.store.Update(ctx, func(tx *storage.Tx) error {
		var err error // a group commit may run this again: recs start afresh
		if recs, ambiguous, err = in.acked(tx, acks); err != nil {
			return err
		}
		for _, rec := range recs {
			if err := tx.MarkDelivered(rec, now, e.config().Outbox.TTL); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return AckResult{}, err
	}
	in.mu.Lock()
	in.acks++
	for _, rec := range recs {
		delete(in.leases, rec.Key())
	}
	in.mu.Unlock()
	return AckResult{Acked: len(recs), Ambiguous: ambiguous}, nil
}

// acked is the pending records acks names, and the event ids among them
// that name several. An ack id names its record. An event id names the
// pending record of that id a pull handed out (since this process
// started), never one no pull did: an ack sent again after another
// source's event with the same id came in would mark that one delivered
// unseen (a review).
func (in *inbox) acked(tx *storage.Tx, acks Acks) (recs []*storage.Record, ambiguous []string, err error) {
	queue := config.InboxQueueName(in.cfg.Name)
	seen := make(map[string]bool, len(acks.AckIDs)+len(acks.IDs))
	take := func(r *storage.Record) {
		if r.State == storage.StatePending && !seen[r.Key()] {
			seen[r.Key()] = true
			recs = append(recs, r)
		}
	}
	for _, ref := range acks.AckIDs {
		switch r, err := tx.InboxRecordByRef(queue, ref); {
		case err == nil:
			take(r)
		case !errors.Is(err, storage.ErrNotFound):
			return nil, nil, err
		}
	}
	for _, id := range acks.IDs {
		all, err := tx.InboxRecords(queue, id)
		if err != nil {
			return nil, nil, err
		}
		pending := slices.DeleteFunc(all, func(r *storage.Record) bool { return r.State != storage.StatePending || !in.handedOut(r.Key()) })
		switch len(pending) {
		case 0:
		case 1:
			take(pending[0])
		default:
			ambiguous = append(ambiguous, id)
		}
	}
	return recs, ambiguous, nil
}

// handedOut says whether a pull has handed out the record under key and
// no ack has taken it back since (its lease may have run out).
func (in *inbox) handedOut(key string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	_, ok := in.leases[key]
	return ok
}

// ClaimRequest is POST /v1/inbox/{consumer}/claims.
type ClaimRequest struct {
	Tenant, Consumer, ID string
	Lease                time.Duration
	Mode                 storage.ClaimMode // "": effectively once
	// Operator: from the operator's own clients (as IngestRequest's),
	// held to no tenant block.
	Operator bool
}

// Claim arbitrates an id for a service without a database of its own.
// Effectively once: the first claim gets a lease (created = true); a
// claim while the lease holds gets EINPROGRESS with the time left; once
// completed, every claim gets the stored result; an expired lease can be
// claimed again. At most once: the claim is committed as completed at
// once, so a redelivery is skipped even if the effect then failed.
func (e *Engine) Claim(ctx context.Context, req ClaimRequest) (c *storage.Claim, created bool, err error) {
	// A new claim is a record as an event is: it counts against the
	// tenant's rate (a tenant made thousands a second, held to no block,
	// and filled the budget for every tenant: a trial). A claim of an id
	// the store holds makes none and is not charged: a redelivery asking
	// for a stored result gets it while the bucket is empty (a review).
	var taken charge
	if !e.claimStored(req) {
		if taken, err = e.charge(ask{req.Tenant, req.Operator, 1, "claim"}); err != nil {
			return nil, false, err
		}
	}
	c, created, err = e.claim(ctx, req)
	if !created && (err == nil || givesBack(err)) {
		taken.give()
	}
	return c, created, err
}

// claimStored reports whether the store holds a claim for req's id, for a
// request a tenant block bounds (a lookup the others need not pay).
func (e *Engine) claimStored(req ClaimRequest) bool {
	if req.Operator {
		return false
	}
	if _, held := e.config().TenantLimit(req.Tenant); !held {
		return false
	}
	err := e.store.View(func(tx *storage.Tx) error {
		_, err := tx.Claim(req.Tenant, req.Consumer, req.ID, e.now())
		return err
	})
	return err == nil
}

// claim is Claim once the tenant may make one.
func (e *Engine) claim(ctx context.Context, req ClaimRequest) (c *storage.Claim, created bool, err error) {
	if err := checkClaimRef(req.Consumer, req.ID); err != nil {
		return nil, false, err
	}
	switch req.Mode {
	case "":
		req.Mode = storage.ClaimEffectivelyOnce
	case storage.ClaimEffectivelyOnce, storage.ClaimAtMostOnce:
	default:
		return nil, false, switchyard.Errorf(switchyard.EINVALIDREQUEST, "mode %q: use %s or %s", req.Mode, storage.ClaimEffectivelyOnce, storage.ClaimAtMostOnce)
	}
	if req.Lease <= 0 {
		req.Lease = 30 * time.Second
	}
	now := e.now()
	ttl := e.claimTTL(req.Consumer)
	err = e.store.Update(ctx, func(tx *storage.Tx) error {
		c, created = nil, false
		old, err := tx.Claim(req.Tenant, req.Consumer, req.ID, now)
		switch {
		case err == nil && old.State == storage.ClaimCompleted:
			c = old
			return nil
		case err == nil && now.Before(old.LeaseUntil):
			return &switchyard.Error{Code: switchyard.EINPROGRESS, Message: fmt.Sprintf("id %q is claimed until %s", req.ID, old.LeaseUntil.Format(time.RFC3339)),
				RetryAfter: old.LeaseUntil.Sub(now)}
		case err != nil && !errors.Is(err, storage.ErrNotFound):
			return err
		case err != nil: // none yet
			if err := e.space.check(); err != nil {
				return err // a new claim takes room; an expired lease claimed again does not
			}
		}
		// The claim outlives its lease: were it to expire first, the next
		// claim would be a new one while this lease holds.
		expires := now.Add(ttl)
		if lease := now.Add(req.Lease); lease.After(expires) {
			expires = lease
		}
		c = &storage.Claim{State: storage.ClaimHeld, Mode: req.Mode, ClaimedAt: now, LeaseUntil: now.Add(req.Lease), ExpiresAt: expires, TracksEarlier: true}
		if old != nil { // its lease ran out
			c.Follow(old)
		}
		if req.Mode == storage.ClaimAtMostOnce {
			c.State, c.CompletedAt, c.LeaseUntil = storage.ClaimCompleted, now, time.Time{}
		}
		created = true
		return tx.PutClaim(req.Tenant, req.Consumer, req.ID, c)
	})
	if err != nil {
		return nil, false, unavailable(err)
	}
	return c, created, nil
}

// maxResultWhileFull is the largest claim result taken past the storage
// budget: the effect has run, and a service that cannot complete it would
// see the claim expire and the effect run again elsewhere.
const maxResultWhileFull = 4096

// Complete records the result of a claimed id: later claims get it. token
// is the claim's (storage.Claim.Token), from the claim that took the
// lease: a holder whose lease ran out, and whose id was claimed again
// since, cannot complete it over the new holder (ECONFLICT: its effect may
// run twice; the new holder's result is the one kept). Completing again
// with the same token gives the stored claim.
func (e *Engine) Complete(ctx context.Context, tenant, consumer, id, token string, result json.RawMessage) (*storage.Claim, error) {
	if err := checkClaimRef(consumer, id); err != nil {
		return nil, err
	}
	now := e.now()
	var c *storage.Claim
	err := e.store.Update(ctx, func(tx *storage.Tx) error {
		old, err := heldBy(tx, tenant, consumer, id, token, now)
		if err != nil {
			return err
		}
		if old.State == storage.ClaimCompleted {
			c = old
			return nil
		}
		if len(result) > maxResultWhileFull {
			if err := e.space.check(); err != nil {
				return err // a large result takes room; a small one completes the effect
			}
		}
		c = old
		c.State, c.CompletedAt, c.Result, c.LeaseUntil = storage.ClaimCompleted, now, result, time.Time{}
		return tx.PutClaim(tenant, consumer, id, c)
	})
	if err != nil {
		return nil, unavailable(err)
	}
	return c, nil
}

// Release gives a claimed id back, so a redelivery runs the effect again.
// A completed id cannot be released, nor one claimed again since token's
// lease ran out (that would free the new holder's lease). An id no longer
// claimed is released already.
func (e *Engine) Release(ctx context.Context, tenant, consumer, id, token string) error {
	if err := checkClaimRef(consumer, id); err != nil {
		return err
	}
	now := e.now()
	err := e.store.Update(ctx, func(tx *storage.Tx) error {
		old, err := heldBy(tx, tenant, consumer, id, token, now)
		if switchyard.ErrorCode(err) == switchyard.ENOTFOUND {
			return nil
		}
		if err != nil {
			return err
		}
		if old.State == storage.ClaimCompleted {
			return switchyard.Errorf(switchyard.ECONFLICT, "id %q is completed; it cannot be released", id)
		}
		return tx.DeleteClaim(tenant, consumer, id)
	})
	return unavailable(err)
}

// heldBy is the claim of id when token is its token: ENOTFOUND when there
// is none, EINVALIDREQUEST without a token, ECONFLICT when it is another claim's
// (the token's lease ran out, and the id was claimed again).
func heldBy(tx *storage.Tx, tenant, consumer, id, token string, now time.Time) (*storage.Claim, error) {
	c, err := tx.Claim(tenant, consumer, id, now)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		// First: a release of an id no longer claimed is done, token or
		// not, as it was before tokens.
		return nil, switchyard.Errorf(switchyard.ENOTFOUND, "id %q is not claimed", id)
	case err != nil:
		return nil, err
	case token == "":
		return nil, switchyard.Errorf(switchyard.EINVALIDREQUEST, "token: the claim's token (from the claim that took the lease) is needed")
	case c.Token() != token && c.ClaimedAfter(token):
		return nil, switchyard.Errorf(switchyard.ECONFLICT, "id %q was claimed again after the lease of this token ran out: another holder has it (its effect may have run twice), and its result is the one kept", id)
	case c.Token() != token:
		return nil, switchyard.Errorf(switchyard.ECONFLICT, "token %q is not the token of id %q's claim, nor of an earlier claim of it: the claim is held under the token its claim request returned", token, id)
	}
	return c, nil
}

// checkClaimRef says why consumer and id cannot name a claim.
func checkClaimRef(consumer, id string) error {
	switch {
	case id == "" || consumer == "":
		return switchyard.Errorf(switchyard.EINVALIDREQUEST, "a claim needs a consumer and an id")
	case strings.ContainsRune(consumer, 0) || strings.ContainsRune(id, 0):
		// NUL separates the parts of a claim's key: "a\x00b" would read
		// back as consumer "a", id "b…".
		return switchyard.Errorf(switchyard.EINVALIDREQUEST, "a claim's consumer and id hold no NUL character")
	case len(consumer) > MaxTypeLen:
		return switchyard.Errorf(switchyard.EINVALIDREQUEST, "a claim's consumer is at most %d bytes", MaxTypeLen)
	case len(id) > switchyard.MaxInboundIDLen:
		return switchyard.Errorf(switchyard.EINVALIDREQUEST, "a claim's id is at most %d bytes", switchyard.MaxInboundIDLen)
	}
	return nil
}

// claimTTL is how long a consumer's claims are kept: its inbox's ttl when
// the consumer names an inbox, else the idempotency window.
func (e *Engine) claimTTL(consumer string) time.Duration {
	if in, ok := e.inboxes[consumer]; ok {
		return in.cfg.TTL
	}
	return e.config().Idempotency.Window
}

// InboxStatus is an inbox as operators see it; its queue's counts are in
// Stats under config.InboxQueueName(Name).
type InboxStatus struct {
	Name    string
	From    string // the sink it consumes from, "kafka.main"
	Reads   string // the topics or subject it reads
	Deliver string // the URL it delivers to; "" = a pull subscription
	Leased  int    // pull: events handed out and not yet acked, lease still running
}

// Inboxes returns every configured inbox, by name.
func (e *Engine) Inboxes() []InboxStatus {
	now := e.now()
	out := make([]InboxStatus, 0, len(e.inboxes))
	for name, in := range e.inboxes {
		st := InboxStatus{Name: name, From: in.cfg.From, Reads: in.cfg.Subject, Deliver: in.cfg.Deliver.URL}
		if len(in.cfg.Topics) > 0 {
			st.Reads = strings.Join(in.cfg.Topics, ", ")
		}
		in.mu.Lock()
		for _, until := range in.leases {
			if now.Before(until) {
				st.Leased++
			}
		}
		in.mu.Unlock()
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b InboxStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Claims lists the dedup arbiter's unexpired claims of consumer ("" =
// every consumer), a page of up to limit from cursor ("" = the first),
// and the cursor of the page after ("" at the end).
func (e *Engine) Claims(consumer, cursor string, limit int) (claims []storage.ListedClaim, next string, err error) {
	var after, nextKey []byte
	if cursor != "" {
		if after, err = DecodeCursor(CursorClaims, consumer, cursor, storage.IsClaimKey); err != nil {
			return nil, "", err
		}
	}
	err = e.store.View(func(tx *storage.Tx) error {
		claims, nextKey, err = tx.Claims(consumer, e.now(), after, limit)
		return err
	})
	if nextKey != nil {
		next = EncodeCursor(CursorClaims, consumer, nextKey)
	}
	return claims, next, err
}
