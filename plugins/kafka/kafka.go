// Package kafka is the Kafka sink of the router, on franz-go.
//
// One switchyard.Message becomes one record: topic = the message's destination,
// key = its partition key, value = the event data, headers = the CloudEvents
// Kafka binding (ce_*, content-type, traceparent/tracestate). Records go out
// with acks=all and, unless the config turns it off, the idempotent producer,
// so franz-go's own retries never duplicate a record.
//
// Publish never waits longer than the router's deadline (the smaller of the
// caller's deadline and the block's publish_timeout). A record without a
// broker answer by then comes back wrapping switchyard.ErrUnknownOutcome and the
// sink reports itself unhealthy until a later record is acknowledged. The
// records still in the client are cancelled with the deadline
// (kgo.AllowIdempotentProduceCancellation), so the next Publish is not
// queued behind them; see RATIONALE.md for why this and not the other
// recovery strategies. While the client cannot connect to any broker,
// Publish answers at once wrapping switchyard.ErrSinkUnavailable and hands
// nothing over (RATIONALE.md).
package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	kgo "github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/cloudevents"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/internal/stall"
)

// ErrStalled is what Healthy wraps while publishes are stalled: a Publish
// reached its deadline with records the broker had not answered, and no
// record has been acknowledged since (stall.ErrStalled).
var ErrStalled = stall.ErrStalled

var (
	_ switchyard.Sink          = (*Sink)(nil)
	_ switchyard.HealthChecker = (*Sink)(nil)
	_ switchyard.ReadyNotifier = (*Sink)(nil)
	_ switchyard.Fitter        = (*Sink)(nil)
)

// Sink publishes to one Kafka cluster (one kafka "<name>" block).
type Sink struct {
	maxRecordBytes int64 // max_record_bytes: the producer's batch limit
	name           string
	log            hclog.Logger
	timeout        time.Duration

	cl     *kgo.Client
	conn   *connState // why connecting to a broker last failed
	topics *topicCache
	// purging holds the topics being purged from producing (a topic made
	// again: classify), one purge at a time per topic.
	purging  sync.Map
	watching atomic.Bool   // watch is probing the cluster
	checking atomic.Bool   // checkSilent is asking whether any broker answers
	closed   chan struct{} // closed by Close

	// stall is set while the sink is unhealthy: a Publish hit its
	// deadline with records unanswered, and no record has been
	// acknowledged since.
	stall stall.Tracker

	closeOnce sync.Once
	closeErr  error
}

// Open builds the sink's client. It does not wait for the cluster: a router
// starts with its broker down and delivers once it is up (Healthy tells).
func Open(ctx context.Context, cfg config.Kafka, logger hclog.Logger) (*Sink, error) {
	return open(ctx, cfg, logger)
}

// open is Open with extra kgo options on top (tests shorten backoffs).
func open(_ context.Context, cfg config.Kafka, logger hclog.Logger, extra ...kgo.Opt) (*Sink, error) {
	if err := resolved(cfg); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	logger = logger.Named(cfg.SinkName())
	opts, err := ClientOptions(cfg, logger)
	if err != nil {
		return nil, err
	}
	popts, err := producerOptions(cfg)
	if err != nil {
		return nil, err
	}
	conn := newConnState(logger, cfg.SASL != nil)
	opts = append(append(opts, popts...), append(extra, kgo.WithHooks(conn))...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka %q: %w", cfg.Name, err)
	}
	s := &Sink{
		maxRecordBytes: cfg.MaxRecordBytes,
		name:           cfg.SinkName(),
		log:            logger,
		timeout:        cfg.PublishTimeout,
		cl:             cl,
		conn:           conn,
		topics:         newTopicCache(),
		stall:          stall.Tracker{Log: logger},
		closed:         make(chan struct{}),
	}
	conn.mu.Lock()
	conn.onDown = s.watch
	conn.mu.Unlock()
	return s, nil
}

// Name is how routes refer to the sink: "kafka.<name>".
func (s *Sink) Name() string { return s.name }

func (s *Sink) client() *kgo.Client { return s.cl }

// Publish sends msgs and waits for every acknowledgement, at most until the
// router's deadline: min(ctx's deadline, publish_timeout). It returns one
// Result per message, in order.
func (s *Sink) Publish(ctx context.Context, msgs []*switchyard.Message) []switchyard.Result {
	return s.Send(ctx, msgs)()
}

// Send is Publish in two steps (switchyard.Sender): every record is handed
// to the client, in order, before Send returns — franz-go keeps that order
// within a partition, so the next batch's records queue behind these —
// and the returned wait collects the acknowledgements (and produces again
// what another batch's cancellation failed, see foreignCancel).
func (s *Sink) Send(ctx context.Context, msgs []*switchyard.Message) (wait func() []switchyard.Result) {
	if len(msgs) == 0 {
		return func() []switchyard.Result { return []switchyard.Result{} }
	}
	start := time.Now()
	if ctx.Err() != nil {
		// Nothing was sent; the caller gave us no time. Not the
		// broker's fault, so no stall either.
		res := make([]switchyard.Result, len(msgs))
		for i := range res {
			res[i].Err = fmt.Errorf("%s: %w (%w)", s.name, switchyard.ErrUnknownOutcome, ctx.Err())
		}
		return func() []switchyard.Result { return res }
	}
	if s.conn.down() {
		res := s.unreachable(msgs)
		return func() []switchyard.Result { return res }
	}
	// Every record carries this context. With
	// AllowIdempotentProduceCancellation franz-go honours it even for a
	// batch already on the wire: when it ends (deadline, or wait
	// returning), the produce connection is dropped and the unanswered
	// batches are failed, after which franz-go bumps the producer epoch
	// so the sequence numbers stay valid. Nothing of this call stays
	// queued in front of a later one.
	pctx, cancel := context.WithTimeout(ctx, s.timeout)
	res, send := s.screen(pctx, msgs)
	if s.conn.down() { // gone down while screen asked about new topics
		cancel()
		res := s.unreachable(msgs)
		return func() []switchyard.Result { return res }
	}
	w := s.produce(pctx, msgs, send)
	return func() []switchyard.Result {
		defer cancel()
		send = s.collect(pctx, msgs, send, res, w, 1, start)
		for round := 2; len(send) > 0; round++ {
			send = s.collect(pctx, msgs, send, res, s.produce(pctx, msgs, send), round, start)
		}
		s.noteDeadline(pctx, res, time.Since(start))
		return res
	}
}

// unreachable answers msgs while no broker is reachable (connState.down):
// each is unavailable, nothing is handed to the client, so the caller
// learns it at once, instead of after the publish timeout with an unknown
// outcome, and the events wait without an attempt counted. The cluster is
// watched meanwhile (watch), since nothing produced means nothing that
// would dial a broker.
func (s *Sink) unreachable(msgs []*switchyard.Message) []switchyard.Result {
	s.watch()
	down := s.withConnError(fmt.Errorf("%s: no broker reachable: %w", s.name, switchyard.ErrSinkUnavailable))
	res := make([]switchyard.Result, len(msgs))
	for i, m := range msgs {
		if res[i].Err = s.validate(m); res[i].Err == nil {
			res[i].Err = down
		}
	}
	return res
}

// probeEvery is how often watch asks a cluster that is down whether a
// broker answers again.
const probeEvery = time.Second

// watch probes the cluster once a probeEvery while it is down, until a
// broker answers or the sink closes: nothing is produced meanwhile, so
// nothing else would dial, and the engine's loops may not be sending (a
// type whose other sinks are up has nothing of this one's due for up to
// 30 s). A broker that answers marks the cluster reachable, which calls
// the ready function (OnReady): the engine polls at once. One watch runs
// at a time; connState starts it when the cluster goes down.
func (s *Sink) watch() {
	if !s.watching.CompareAndSwap(false, true) {
		return
	}
	go func() {
		t := time.NewTicker(probeEvery)
		defer t.Stop()
		for s.conn.down() {
			select {
			case <-s.closed:
				return // watching stays set: no watch after Close
			case <-t.C:
			}
			s.probe()
		}
		s.watching.Store(false)
		if s.conn.down() {
			s.watch() // down again as this watch ended
		}
	}()
}

// probe asks every broker once whether it answers (anyBrokerAnswers),
// within the publish timeout, and marks the cluster reachable if one does.
func (s *Sink) probe() {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if anyBrokerAnswers(ctx, s.client()) == nil {
		s.conn.reachable()
	}
}

// anyBrokerAnswers sends an ApiVersions request to every broker the client
// knows (discovered and seeds), all at once, and returns nil as soon as one
// answers, else the first error. Not kgo's Ping, which asks one broker
// after another: a first broker that drops packets would spend the whole
// deadline on its dial while the others could have answered.
func anyBrokerAnswers(ctx context.Context, cl *kgo.Client) error {
	brokers := append(cl.DiscoveredBrokers(), cl.SeedBrokers()...)
	answers := make(chan error, len(brokers))
	for _, b := range brokers {
		go func() {
			_, err := b.Request(ctx, kmsg.NewPtrApiVersionsRequest())
			answers <- err
		}()
	}
	var first error
	for range brokers {
		err := <-answers
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	if first == nil {
		first = errors.New("no broker known")
	}
	return first
}

// screen answers the messages that cannot be produced (invalid, or to a
// topic the cluster refused) and returns the indexes of the others.
func (s *Sink) screen(ctx context.Context, msgs []*switchyard.Message) (res []switchyard.Result, send []int) {
	refused := s.checkNewTopics(ctx, msgs)
	res = make([]switchyard.Result, len(msgs))
	send = make([]int, 0, len(msgs))
	for i, m := range msgs {
		if err := s.validate(m); err != nil {
			res[i].Err = err
			continue
		}
		if err, bad := refused[m.Topic]; bad {
			res[i].Err = s.classify(m.Topic, err)
			continue
		}
		send = append(send, i)
	}
	return res, send
}

// produce hands msgs[send] to the client, in order, and returns the
// waiter their promises resolve.
func (s *Sink) produce(ctx context.Context, msgs []*switchyard.Message, send []int) *waiter {
	w := newWaiter(len(send))
	cl := s.client()
	for j, i := range send {
		cl.Produce(ctx, s.record(msgs[i]), func(r *kgo.Record, err error) {
			// Promises run serially inside franz-go: no blocking here.
			if err != nil && isContextErr(err) && ctx.Err() == nil {
				w.resolve(j, switchyard.Result{Err: &foreignCancel{err}})
				return
			}
			w.resolve(j, s.result(r, err))
		})
	}
	return w
}

// collect waits for every answer of what produce sent, or the deadline,
// records each result in res, and returns the indexes to produce again:
// records another batch's cancellation failed (see foreignCancel), up to
// maxRounds.
func (s *Sink) collect(ctx context.Context, msgs []*switchyard.Message, send []int, res []switchyard.Result, w *waiter, round int, start time.Time) (again []int) {
	// Every broker refusing a connection after the records were handed
	// over ends the wait too: waiting out the deadline would hold up every
	// other output of the batch, and a broker that answers again wakes the
	// engine anyway (RATIONALE.md).
	wentDown := s.conn.wentDown()
	select {
	case <-w.done:
	case <-ctx.Done():
	case <-wentDown:
	}
	down := false
	select { // asked apart: with done ready too, the select above may pick either
	case <-wentDown:
		down = true
	default:
	}
	got := w.finish(func(j int) switchyard.Result {
		return switchyard.Result{Err: s.withConnError(fmt.Errorf("%s: topic %q: no acknowledgement after %s: %w",
			s.name, msgs[send[j]].Topic, time.Since(start).Round(time.Millisecond), switchyard.ErrUnknownOutcome))}
	})
	for j, i := range send {
		var fc *foreignCancel
		if errors.As(got[j].Err, &fc) {
			if round < maxRounds && ctx.Err() == nil && !down {
				again = append(again, i)
				continue
			}
			got[j].Err = s.classify(msgs[i].Topic, fc.err)
		}
		res[i] = got[j]
	}
	return again
}

// noteDeadline marks the sink stalled by the records left unanswered when
// the publish deadline passed. Only a deadline does: a cancelled caller
// (shutdown) says nothing about the broker.
func (s *Sink) noteDeadline(ctx context.Context, res []switchyard.Result, waited time.Duration) {
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return
	}
	var missed int64
	for _, r := range res {
		if r.Err != nil && errors.Is(r.Err, switchyard.ErrUnknownOutcome) {
			missed++
		}
	}
	s.stall.Missed(missed, waited, s.timeout)
	if missed > 0 {
		s.checkSilent()
	}
}

// checkSilent asks every broker whether it answers (a probe, within half
// the publish timeout) after a publish left records unanswered at its
// deadline. A broker that answers is slow, or the records wait for a
// partition's leader: the stall says so. So is one that sent anything else
// meanwhile (connState.lives): the probe's request may wait behind a
// produce stuck on a full socket on kgo's one goroutine per broker, and
// go unanswered in time on a slow link. When none answers, the cluster's
// connections went silent (its host went dark, a NAT on the way forgot
// them: nothing resets them), and it counts as down (connState.silent):
// Publish answers at once, and the watch finds the cluster when it answers
// again. franz-go alone notices only at its request timeouts, and a new
// connection's: 55 s in TestSilentClusterIsFoundDown, each publish waiting
// its timeout meanwhile. One check at a time, on a goroutine of its own.
func (s *Sink) checkSilent() {
	if !s.checking.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.checking.Store(false)
		wait := s.timeout / 2
		seen := s.conn.lives.Load()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if anyBrokerAnswers(ctx, s.client()) == nil {
			return
		}
		select {
		case <-s.closed:
		default:
			s.conn.silent(fmt.Errorf("no broker answered a request in %s, nor anything else, after a publish went unanswered: the connections went silent", wait), seen)
		}
	}()
}

// maxRounds bounds how often one Publish re-produces records that another
// Publish's cancellation failed.
const maxRounds = 4

// foreignCancel marks a record franz-go failed with a context error while
// this Publish's own context was still alive. franz-go fails every buffered
// record of a partition when it cancels the batch at the head, and judges
// the whole batch by its first record's context: so when an earlier Publish
// hits its deadline, records of a later Publish in the same partition fail
// with the earlier one's context error. Those are produced again, in their
// original order, within this Publish's own budget. (A re-produced record
// might already be in the log, if it rode in the abandoned request: a
// duplicate that receivers drop by ce_id, the same as the engine's resend.)
type foreignCancel struct{ err error }

func (e *foreignCancel) Error() string { return e.err.Error() }
func (e *foreignCancel) Unwrap() error { return e.err }

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

func (s *Sink) validate(m *switchyard.Message) error {
	switch {
	case m == nil || m.Event == nil:
		return switchyard.Permanentf("%s: message without an event", s.name)
	case m.Topic == "":
		return switchyard.Permanentf("%s: event %s: no destination topic", s.name, m.Event.ID)
	}
	return nil
}

// record maps a message onto the CloudEvents Kafka binding.
func (s *Sink) record(m *switchyard.Message) *kgo.Record {
	hs := cloudevents.Kafka.Headers(m.Event)
	headers := make([]kgo.RecordHeader, len(hs))
	for i, h := range hs {
		headers[i] = kgo.RecordHeader{Key: h.Name, Value: []byte(h.Value)}
	}
	r := &kgo.Record{Topic: m.Topic, Value: m.Event.Data, Headers: headers}
	if m.Key != "" {
		r.Key = []byte(m.Key)
	}
	return r
}

func (s *Sink) result(r *kgo.Record, err error) switchyard.Result {
	if err != nil {
		return switchyard.Result{Err: s.classify(r.Topic, err)}
	}
	s.stall.Acked()
	return switchyard.Result{Position: switchyard.Position{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}}
}

// checkNewTopics returns the topics of msgs that the broker refuses (missing,
// not authorized, invalid), asking it about topics we have not seen yet. If
// the cluster cannot be asked, it returns what it knows and lets the produce
// find out.
func (s *Sink) checkNewTopics(ctx context.Context, msgs []*switchyard.Message) map[string]error {
	now := time.Now()
	var refused map[string]error
	var ask []string
	seen := map[string]bool{}
	for _, m := range msgs {
		if m == nil || m.Topic == "" || seen[m.Topic] {
			continue
		}
		seen[m.Topic] = true
		known, err := s.topics.lookup(m.Topic, now)
		switch {
		case !known:
			ask = append(ask, m.Topic)
		case err != nil:
			if refused == nil {
				refused = map[string]error{}
			}
			refused[m.Topic] = err
		}
	}
	if len(ask) == 0 {
		return refused
	}
	// Leave at least half of the budget to the produce itself.
	mctx, cancel := context.WithTimeout(ctx, s.timeout/2)
	defer cancel()
	res, err := s.describeTopics(mctx, ask)
	if err != nil {
		s.log.Debug("cannot check topics before producing; producing anyway", "topics", ask, "error", err)
		return refused
	}
	for t, err := range res {
		if err != nil {
			if refused == nil {
				refused = map[string]error{}
			}
			refused[t] = err
		}
	}
	return refused
}

// Healthy returns an error while no broker is reachable as far as the
// client knows (at once: a ping would wait on connections gone silent
// until the caller's deadline, and the watch is probing), while publishes
// are stalled (a deadline passed without an acknowledgement and none came
// since), or when no broker answers (anyBrokerAnswers) within ctx.
func (s *Sink) Healthy(ctx context.Context) error {
	if connErr := s.conn.lastError(); connErr != nil && s.conn.down() {
		return fmt.Errorf("%s: no broker reachable: %w", s.name, connErr)
	}
	if err := s.stall.Err(s.name); err != nil {
		return err
	}
	if err := anyBrokerAnswers(ctx, s.client()); err != nil {
		if connErr := s.conn.lastError(); connErr != nil {
			return fmt.Errorf("%s: no broker reachable: %w", s.name, connErr)
		}
		return fmt.Errorf("%s: no broker reachable: %w", s.name, err)
	}
	s.conn.reachable()
	return nil
}

// Close flushes what is buffered (bounded by ctx) and closes the client.
// Records still unanswered when ctx ends are failed; their Publish calls
// have already returned or return at once.
func (s *Sink) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		close(s.closed)
		cl := s.client()
		if err := cl.Flush(ctx); err != nil {
			s.closeErr = fmt.Errorf("%s: flush: %w", s.name, err)
		}
		cl.Close()
	})
	return s.closeErr
}

// waiter collects the promises of one Publish. After finish, late promises
// are dropped: the results slice belongs to the caller.
type waiter struct {
	mu     sync.Mutex
	res    []switchyard.Result
	set    []bool
	left   int
	closed bool
	done   chan struct{}
}

func newWaiter(n int) *waiter {
	w := &waiter{res: make([]switchyard.Result, n), set: make([]bool, n), left: n, done: make(chan struct{})}
	if n == 0 {
		close(w.done) // nothing to wait for
	}
	return w
}

func (w *waiter) resolve(i int, r switchyard.Result) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.set[i] {
		return
	}
	w.res[i], w.set[i] = r, true
	w.left--
	if w.left == 0 {
		close(w.done)
	}
}

func (w *waiter) finish(unresolved func(i int) switchyard.Result) []switchyard.Result {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for i, ok := range w.set {
		if !ok {
			w.res[i] = unresolved(i)
		}
	}
	return w.res
}

// recordOverhead bounds what Kafka's record batch format adds around one
// record: the batch header (61 bytes) and the record's own varints and
// attributes, with room to spare.
const recordOverhead = 128

// Fits tells whether the producer could ever send m (switchyard.Fitter): the
// record — key, value and headers — in one batch of at most
// max_record_bytes. (A topic's own max.message.bytes, if lower, is the
// broker's to refuse: that refusal is permanent, and the event goes to the
// DLQ at once.)
func (s *Sink) Fits(m *switchyard.Message) error {
	if m == nil || m.Event == nil {
		return nil
	}
	size := func(bytes, headers int) int {
		return recordOverhead + len(m.Key) + len(m.Event.Data) + bytes + headers*10
	}
	// An upper bound first: it fits nearly always (Binding.SizeBound).
	if int64(size(cloudevents.Kafka.SizeBound(m.Event))) <= s.maxRecordBytes {
		return nil
	}
	if n := size(cloudevents.Kafka.Size(m.Event)); int64(n) > s.maxRecordBytes {
		return fmt.Errorf("%s: the record takes about %d bytes (%d of data), over max_record_bytes of %d", s.name, n, len(m.Event.Data), s.maxRecordBytes)
	}
	return nil
}
