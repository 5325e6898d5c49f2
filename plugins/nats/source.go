package nats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/cloudevents"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/internal/backoff"
	"github.com/switchyard-router/switchyard/internal/every"
	"github.com/switchyard-router/switchyard/internal/logthrottle"
)

const (
	// DefaultAckWait is how long JetStream waits for an ack before it
	// redelivers (to this router or another on the same durable). While
	// receive runs longer than a third of it, the source tells JetStream
	// the messages are in progress.
	DefaultAckWait = 30 * time.Second
	// minMaxAckPending is the least MaxAckPending of an inbox consumer;
	// with a larger batch it is 8 batches, so several routers can each
	// have a pull outstanding.
	minMaxAckPending = 1024

	// fetchWait is how long a pull waits for a first message.
	fetchWait = 5 * time.Second
	// streamInfoWait bounds setup's read of the stream's info, which a
	// user denied it waits out (the server sends no reply).
	streamInfoWait = 2 * time.Second
	// ackTimeout bounds one double ack; ackAttempts how often it is tried.
	ackTimeout  = 2 * time.Second
	ackAttempts = 3
	// errorPause is the pause after a failed pull.
	errorPause = time.Second
)

// Receive backoff: after a failed receive the messages are nak'd with this
// delay (min, doubling to max).
var (
	receiveBackoff = backoff.Receive // a variable so tests can shorten it
)

var (
	_ switchyard.Source        = (*Source)(nil)
	_ switchyard.HealthChecker = (*Source)(nil)
)

// Source consumes an inbox's subject through a durable JetStream pull
// consumer (the inbox's durable, explicit acks). Several routers on one
// durable split the messages: each pull gets messages no other pull has
// outstanding.
//
// A batch is what the stream has for the durable once a first message is
// there (up to the inbox's batch_size); no pull is open while receive
// runs. Only after receive returned nil are they acknowledged, each with a
// double ack (the server confirms it; a failed ack is retried). When
// receive fails, the messages are nak'd with a growing delay, so JetStream
// redelivers them (the inbox drops what it stored already). See
// RATIONALE.md.
type Source struct {
	name         string // the inbox's name
	sink         string // "nats.<block name>"
	log          hclog.Logger
	nc           *natsgo.Conn
	js           jetstream.JetStream
	stream       string // under mu once Run may be setting it up
	ccfg         jetstream.ConsumerConfig
	ttl          time.Duration         // the inbox's dedup window, for checkRetention
	decoder      engine.InboundDecoder // with the inbox's id header
	batch        int
	ackWait      time.Duration
	writeTimeout time.Duration // the block's publish_timeout

	mu   sync.Mutex
	cons jetstream.Consumer

	// conn is the connection's state as its handlers last reported it,
	// and problem why the last setup or pull failed (nil once one
	// succeeds): what Healthy says.
	conn    connWatch
	problem atomic.Pointer[error]

	// lag is the messages the durable held past the last one pulled,
	// +1 (0: none pulled yet), and lagHeld those of a batch the inbox
	// refused, which wait out their nak's delay outside NumPending: Lag.
	lag, lagHeld atomic.Int64

	// Run's own (checkConsumer): when it last read the durable back, what
	// the durable had delivered then when it was as it should be, a replay
	// owed, and the throttle of a durable that cannot be set back.
	consumerCheckedAt time.Time
	goodDelivered     uint64
	owed              *replayRange
	driftLog          logthrottle.Throttle

	// kept says where the data file has the inbox's reading go on from;
	// floor and streamID are the durable's ack floor as the source last
	// read it, and the stream's creation time (keptread.go).
	kept      switchyard.KeptReads
	keep      func(context.Context, switchyard.Read) error
	floor     uint64
	keptFloor uint64 // the floor keep last kept
	streamID  [16]byte

	warnings []string

	running   atomic.Bool
	stop      chan struct{}
	runDone   chan struct{}
	closeOnce sync.Once
}

// OpenSource connects to the NATS server at url and creates (or updates)
// the inbox's durable pull consumer on the stream that stores in.Subject.
// It fails when no stream stores the subject, or more than one does.
//
// A new durable starts with the oldest message of the stream (deliver
// all), like a new Kafka group at the earliest offset; one made again
// after it was deleted, where kept (nil: none) says the inbox got to,
// which the source has keep (nil: none) as it reads the durable's ack
// floor (keptread.go). Its filter is the inbox subject; a message is
// redelivered until it is acknowledged (no max_deliver).
func OpenSource(ctx context.Context, ncfg config.NATS, url string, in config.Inbox, logger hclog.Logger, kept switchyard.KeptReads, keep func(context.Context, switchyard.Read) error) (*Source, error) {
	return openSource(ctx, ncfg, url, in, logger, DefaultAckWait, kept, keep)
}

func openSource(ctx context.Context, ncfg config.NATS, url string, in config.Inbox, logger hclog.Logger, ackWait time.Duration, kept switchyard.KeptReads, keep func(context.Context, switchyard.Read) error) (*Source, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	sink := ncfg.SinkName()
	wrap := func(err error) error { return fmt.Errorf("inbox %q: %s: %w", in.Name, sink, err) }
	if in.Subject == "" {
		return nil, fmt.Errorf("inbox %q: no subject to consume from %s", in.Name, sink)
	}
	if in.Durable == "" || in.IDHeader == "" || in.Policy.BatchSize <= 0 {
		return nil, fmt.Errorf("inbox %q: durable %q, id_header %q, batch_size %d: the block is not resolved (config.NewInbox sets them)",
			in.Name, in.Durable, in.IDHeader, in.Policy.BatchSize)
	}
	if ncfg.PublishTimeout <= 0 { // it bounds the connection's writes
		return nil, fmt.Errorf("inbox %q: %s: publish_timeout %s: the block is not resolved (config.NewNATS sets it)", in.Name, sink, ncfg.PublishTimeout)
	}
	s := &Source{
		name:         in.Name,
		sink:         sink,
		log:          logger.Named("inbox." + in.Name),
		batch:        in.Policy.BatchSize,
		ackWait:      ackWait,
		writeTimeout: ncfg.PublishTimeout,
		ttl:          in.TTL,
		stop:         make(chan struct{}),
		runDone:      make(chan struct{}),
		ccfg:         consumerConfig(in, ackWait),
		driftLog:     logthrottle.Throttle{Every: time.Minute},
		kept:         kept,
		keep:         keep,
	}
	s.decoder = engine.InboundDecoder{Binding: cloudevents.NATS, IDHeader: in.IDHeader, Log: s.log, Noun: "message"}
	auth, err := ClientOptions(ncfg, s.log)
	if err != nil {
		return nil, wrap(err)
	}
	if s.nc, err = dial(url, append(auth, s.connOptions()...), func(err error) {
		s.conn.failed(err)
		s.log.Warn("NATS is not reachable; the inbox starts consuming when it appears", "url", url, "error", err)
	}); err != nil {
		return nil, wrap(fmt.Errorf("connect %s: %w", url, err))
	}
	s.conn.dialed(s.nc.Status())
	if s.js, err = jetstream.New(s.nc); err != nil {
		s.nc.Close()
		return nil, wrap(fmt.Errorf("jetstream: %w", err))
	}
	if !s.nc.IsConnected() {
		return s, nil // Run sets the consumer up once the server is there
	}
	if err := s.setup(ctx); err != nil {
		s.nc.Close()
		return nil, wrap(err)
	}
	return s, nil
}

// consumerConfig is the inbox's durable pull consumer: every message from
// the start of the stream, acked one by one, redelivered without limit.
func consumerConfig(in config.Inbox, ackWait time.Duration) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       in.Durable,
		Description:   "switchyard inbox " + in.Name,
		FilterSubject: in.Subject,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1,
		MaxAckPending: max(minMaxAckPending, 8*in.Policy.BatchSize),
	}
}

// connOptions are the inbox connection's options (connWatch.options),
// writes bounded by the block's publish_timeout as the sink's are.
func (s *Source) connOptions() []natsgo.Option {
	return s.conn.options(ClientName+"-inbox-"+s.name, s.log, s.writeTimeout,
		func(nc *natsgo.Conn, first bool) {
			if !first {
				s.log.Info("reconnected to NATS", "url", s.conn.lastURL())
			}
		}, nil)
}

// setup finds the stream of the inbox's subject and creates or updates the
// durable consumer on it; OpenSource does it when the server is there, Run
// when it comes.
func (s *Source) setup(ctx context.Context) error {
	stream, err := streamFor(ctx, s.js, s.ccfg.FilterSubject)
	if err != nil {
		return err
	}
	// The stream's info tells it from one made again (its creation
	// time), and its retention; a user the server does not let read it
	// still consumes (its durables made again read from the start).
	st, serr := s.streamInfo(ctx, stream)
	s.mu.Lock()
	s.stream = stream
	s.mu.Unlock()
	tell, drifted := func() {}, false
	switch old, err := s.js.Consumer(ctx, stream, s.ccfg.Durable); {
	case err == nil:
		if drift := consumerDrift(s.ccfg, old.CachedInfo()); len(drift) > 0 {
			drifted = true
			s.log.Warn("the inbox's durable consumer differs from the inbox's configuration (an edit of the inbox block, or someone else's change): set to the inbox's; had its filter or max_deliver been changed, the server may have passed over messages of the inbox's subject after ack_floor_stream_seq",
				"durable", s.ccfg.Durable, "stream", stream, "changed", strings.Join(drift, "; "), "ack_floor_stream_seq", old.CachedInfo().AckFloor.Stream)
		}
		s.adoptStart(old.CachedInfo().Config)
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		tell = s.startMadeAgain(stream, st, nil)
	default:
		s.resetStart() // not known whether it is there: made, it reads from the start
	}
	if err := s.ensureConsumer(ctx); err != nil {
		return err
	}
	tell()
	s.made(streamIDOf(st))
	if drifted {
		s.floor = 0 // a changed durable's floor may be past what it passed over
	}
	s.consumerCheckedAt, s.goodDelivered = time.Now(), s.consumer().CachedInfo().Delivered.Stream
	s.warnings = s.checkRetention(st, serr, s.ttl)
	for _, w := range s.warnings {
		s.log.Warn(w)
	}
	s.log.Info("consuming", "stream", stream, "durable", s.ccfg.Durable, "subject", s.ccfg.FilterSubject, "url", s.nc.ConnectedUrlRedacted())
	return nil
}

// streamFor finds the one stream that stores subject.
func streamFor(ctx context.Context, js jetstream.JetStream, subject string) (string, error) {
	l := js.StreamNames(ctx, jetstream.WithStreamListSubject(subject))
	var names []string
	for n := range l.Name() {
		names = append(names, n)
	}
	if err := l.Err(); err != nil {
		return "", fmt.Errorf("find the stream of subject %q: %w", subject, err)
	}
	switch len(names) {
	case 0:
		return "", fmt.Errorf("no JetStream stream stores subject %q (add a stream block whose subjects cover it): %w",
			subject, jetstream.ErrStreamNotFound)
	case 1:
		return names[0], nil
	default:
		slices.Sort(names)
		return "", fmt.Errorf("subject %q is stored by several streams (%s); a consumer reads one stream: narrow the inbox subject",
			subject, strings.Join(names, ", "))
	}
}

// streamInfo reads the info of stream, within streamInfoWait: a request
// the server denies the user is never answered. nil with the error when
// it cannot.
func (s *Source) streamInfo(ctx context.Context, stream string) (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, streamInfoWait)
	defer cancel()
	sh, err := s.js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	return sh.CachedInfo(), nil
}

// checkRetention warns when the stream (st, or why it could not be read)
// keeps messages longer than the inbox's dedup window: a durable renamed
// in the config, or deleted where the data file kept nothing of it,
// starts over at the oldest message, and what is older than the window
// would not be recognised as a duplicate.
func (s *Source) checkRetention(st *jetstream.StreamInfo, err error, ttl time.Duration) []string {
	if ttl <= 0 {
		return nil
	}
	if err != nil {
		return []string{fmt.Sprintf("inbox %q: cannot read stream %q to compare its max_age with the dedup window, nor to tell it from one made again: %v", s.name, s.stream, err)}
	}
	consequence := "a durable created anew (renamed in the config, or deleted before the inbox took a batch) starts at the oldest message, and messages older than the window would not be recognised as duplicates"
	switch age := st.Config.MaxAge; {
	case age == 0:
		return []string{fmt.Sprintf("inbox %q: stream %q keeps messages without age limit (max_age 0), longer than the dedup window (ttl %s): %s",
			s.name, s.stream, ttl, consequence)}
	case age > ttl:
		return []string{fmt.Sprintf("inbox %q: the dedup window (ttl %s) is shorter than the max_age of stream %q (%s): %s",
			s.name, ttl, s.stream, age, consequence)}
	}
	return nil
}

// Warnings returns what OpenSource found worth a warning (also logged): a
// stream that keeps messages longer than the dedup window.
func (s *Source) Warnings() []string { return slices.Clone(s.warnings) }

// ensureConsumer creates or updates the durable.
func (s *Source) ensureConsumer(ctx context.Context) error {
	cons, err := s.js.CreateOrUpdateConsumer(ctx, s.stream, s.ccfg)
	if err != nil {
		return fmt.Errorf("create or update durable consumer %q on stream %q: %w", s.ccfg.Durable, s.stream, err)
	}
	s.mu.Lock()
	s.cons = cons
	s.mu.Unlock()
	return nil
}

func (s *Source) consumer() jetstream.Consumer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cons
}

// Name is the inbox's name.
func (s *Source) Name() string { return s.name }

// Stream is the stream the inbox consumes ("" until the server is there).
func (s *Source) Stream() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stream
}

// Run consumes until ctx ends (or Close is called), then returns nil. It
// returns an error only when called twice.
func (s *Source) Run(ctx context.Context, receive func(ctx context.Context, msgs []switchyard.Inbound) error) error {
	if !s.running.CompareAndSwap(false, true) {
		return fmt.Errorf("inbox %q: Run called twice", s.name)
	}
	defer close(s.runDone)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()

	var pause time.Duration
	var lastLog time.Time
	for ctx.Err() == nil {
		if s.consumer() == nil { // started without its server
			if err := s.setup(ctx); err != nil {
				if down := s.conn.notConnected("NATS"); down != nil {
					err = down // the cause (a refused password, an unknown CA), not the wait it made fail
				}
				s.failing(ctx, fmt.Errorf("cannot start consuming yet: %w", err))
				if ctx.Err() == nil && time.Since(lastLog) >= 30*time.Second {
					lastLog = time.Now()
					s.log.Warn("cannot start consuming yet; trying again", "error", err)
				}
				backoff.Sleep(ctx, errorPause)
				continue
			}
			s.failing(ctx, nil) // set up: why it could not be is past
		}
		err := s.pull(ctx, receive, &pause)
		s.failing(ctx, err)
		if err == nil || ctx.Err() != nil {
			continue
		}
		s.pullFailed(ctx, err, &lastLog)
		backoff.Sleep(ctx, errorPause)
	}
	return nil
}

// pullFailed deals with a failed pull: a durable gone is created again,
// on the stream that stores the subject now (found again when the old one
// is gone too); anything else is logged, at most every 30 s (lastLog).
func (s *Source) pullFailed(ctx context.Context, err error, lastLog *time.Time) {
	// A pull on a deleted durable fails one of three ways, depending on
	// when it was deleted: gone, not found, or nobody answering the pull
	// request at all.
	gone := errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, natsgo.ErrNoResponders)
	if !gone {
		if time.Since(*lastLog) >= 30*time.Second {
			*lastLog = time.Now()
			s.log.Warn("pull failed", "error", err)
		}
		return
	}
	tell, id := func() {}, s.streamID
	switch old, lerr := s.js.Consumer(ctx, s.Stream(), s.ccfg.Durable); {
	case lerr == nil: // there after all (the server did not answer the pull): as it is
		s.adoptStart(old.CachedInfo().Config)
	case errors.Is(lerr, jetstream.ErrConsumerNotFound):
		// The stream may have been made again under its name: its id
		// says whether the floor read from the old one holds.
		st, _ := s.streamInfo(ctx, s.Stream())
		tell, id = s.startMadeAgain(s.Stream(), st, err), streamIDOf(st)
	default:
		s.resetStart() // not known whether it is there: made, it reads from the start
	}
	cerr := s.ensureConsumer(ctx)
	switch {
	case errors.Is(cerr, jetstream.ErrStreamNotFound):
		cerr = s.setup(ctx) // the stream gone too: the one that stores the subject now
	case cerr == nil:
		tell()
		s.made(id)
	}
	if cerr != nil && time.Since(*lastLog) >= 30*time.Second {
		*lastLog = time.Now()
		s.log.Error("durable consumer gone, and it cannot be created again yet", "durable", s.ccfg.Durable, "error", cerr)
	}
}

// failing records why the last setup or pull failed, or that it worked
// (nil), for Healthy; one that its context ended says nothing.
func (s *Source) failing(ctx context.Context, err error) {
	switch {
	case ctx.Err() != nil:
	case err == nil:
		s.problem.Store(nil)
	default:
		s.problem.Store(&err)
	}
}

// Healthy says whether the inbox consumes: connected (as the connection's
// handlers last said: nc.Status waits during a reconnect's dial), its
// consumer set up, its last pull not failed.
func (s *Source) Healthy(context.Context) error {
	name := fmt.Sprintf("inbox %q: %s", s.name, s.sink)
	if err := s.conn.notConnected(name); err != nil {
		return err
	}
	if p := s.problem.Load(); p != nil {
		return fmt.Errorf("%s: %w", name, *p)
	}
	if s.consumer() == nil {
		return fmt.Errorf("%s: connected; setting up the consumer", name)
	}
	return nil
}

// pull takes one batch: it waits (up to fetchWait) for a first message,
// then takes what else is available at once, up to the batch size, and
// hands the batch to receive. No pull request is open while receive runs,
// so no message waits in the client with its ack wait running unseen.
// After a failed receive it waits out the backoff (the batch was nak'd
// with that delay).
func (s *Source) pull(ctx context.Context, receive func(context.Context, []switchyard.Inbound) error, pause *time.Duration) error {
	cons := s.consumer()
	fctx, cancel := context.WithTimeout(ctx, fetchWait)
	defer cancel()
	mb, err := cons.Fetch(1, jetstream.FetchContext(fctx))
	if err != nil {
		return err
	}
	msgs, err := collect(mb)
	if len(msgs) == 0 {
		s.noteLag(nil, err)
		if err == nil && ctx.Err() == nil {
			// Nothing came: an idle stream, or a connection gone
			// silent, which nothing else would notice for minutes, or
			// a consumer changed not to give the inbox's messages.
			if !reconnectIfSilent(ctx, s.nc, fetchWait/2, s.log, s.conn.going) {
				s.checkConsumer(ctx, receive)
			}
		}
		return err
	}
	if s.batch > 1 {
		if mb, err := cons.FetchNoWait(s.batch - 1); err == nil {
			rest, _ := collect(mb)
			msgs = append(msgs, rest...)
		}
	}
	s.noteLag(msgs, nil)
	if ctx.Err() != nil {
		// Shutting down: give them back at once, for another router.
		nakAll(msgs, 0)
		return nil
	}
	if err := s.handle(ctx, msgs, receive, pause); err != nil {
		s.lagHeld.Store(int64(len(msgs))) // nak'd: not in NumPending while they wait
		backoff.Sleep(ctx, *pause)
		return nil
	}
	s.lagHeld.Store(0)
	s.checkConsumer(ctx, receive)
	return nil
}

// collect reads a fetch to its end. The end of the wait and "no messages"
// are no errors.
func collect(mb jetstream.MessageBatch) ([]jetstream.Msg, error) {
	var msgs []jetstream.Msg
	for m := range mb.Messages() {
		msgs = append(msgs, m)
	}
	err := mb.Error()
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, jetstream.ErrNoMessages) {
		err = nil
	}
	return msgs, err
}

// handle receives one batch and acks it, or naks it with the next pause.
func (s *Source) handle(ctx context.Context, msgs []jetstream.Msg, receive func(context.Context, []switchyard.Inbound) error, pause *time.Duration) error {
	in := make([]switchyard.Inbound, len(msgs))
	for i, m := range msgs {
		in[i] = s.decode(m)
	}
	stop := s.keepInProgress(msgs)
	err := receive(ctx, in)
	stop()
	if err != nil {
		*pause = receiveBackoff.Next(*pause)
		delay := *pause
		if ctx.Err() != nil {
			delay = 0
		}
		nakAll(msgs, delay)
		s.log.Warn("inbox could not take the batch; not acknowledged, redelivered after a pause",
			"messages", len(msgs), "retry_in", delay, "error", err)
		return err
	}
	*pause = 0
	s.ackAll(ctx, msgs)
	return nil
}

// keepInProgress tells JetStream every third of the ack wait that msgs are
// still being worked on, until stop is called: a slow store must not make
// the server hand them to another router.
func (s *Source) keepInProgress(msgs []jetstream.Msg) (stop func()) {
	return every.Start(s.ackWait/3, func() {
		for _, m := range msgs {
			_ = m.InProgress()
		}
	})
}

// ackAll double-acks every message, in parallel, retrying a failed ack. An
// ack that fails for good only means a redelivery after the ack wait; this
// router's inbox drops it, another router's would deliver it again.
func (s *Source) ackAll(ctx context.Context, msgs []jetstream.Msg) {
	actx := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	var failed atomic.Int32
	var lastErr atomic.Value
	for _, m := range msgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			for range ackAttempts {
				c, cancel := context.WithTimeout(actx, ackTimeout)
				err = m.DoubleAck(c)
				cancel()
				if err == nil || errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
					return
				}
				if errors.Is(err, natsgo.ErrConnectionClosed) {
					break
				}
			}
			failed.Add(1)
			lastErr.Store(err)
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		s.log.Warn("acknowledgements failed; those messages will be redelivered after the ack wait (this inbox drops them as duplicates)",
			"messages", n, "ack_wait", s.ackWait, "error", lastErr.Load())
	}
}

func nakAll(msgs []jetstream.Msg, delay time.Duration) {
	for _, m := range msgs {
		if delay > 0 {
			_ = m.NakWithDelay(delay)
		} else {
			_ = m.Nak()
		}
	}
}

// decode maps a message onto an Inbound by the CloudEvents NATS binding.
func (s *Source) decode(m jetstream.Msg) switchyard.Inbound {
	h := m.Headers()
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	hs := make([]switchyard.Header, 0, len(names))
	for _, k := range names {
		for _, v := range h[k] {
			hs = append(hs, switchyard.Header{Name: k, Value: v})
		}
	}
	origin := s.sink + ":" + s.stream
	if md, err := m.Metadata(); err == nil {
		origin = s.sink + ":" + md.Stream + "#" + strconv.FormatUint(md.Sequence.Stream, 10)
	}
	in := s.decoder.Decode(hs, m.Data(), origin)
	in.Read = switchyard.Read{Topic: s.stream, Next: int64(s.floor) + 1, ID: s.streamID}
	return in
}

// Close stops Run (waiting for it, at most until ctx ends) and closes the
// connection. Messages fetched but not acknowledged are redelivered by
// JetStream (nak'd at once when Run had them in hand, else after the ack
// wait).
func (s *Source) Close(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		close(s.stop)
		if s.running.Load() {
			select {
			case <-s.runDone:
			case <-ctx.Done():
				err = fmt.Errorf("inbox %q: consumer still receiving when the close deadline passed: %w", s.name, ctx.Err())
			}
		}
		s.nc.Close()
	})
	return err
}

// noteLag keeps what the durable held past a pull's last message (its
// NumPending), or nothing pending after a pull that waited and found none.
func (s *Source) noteLag(msgs []jetstream.Msg, err error) {
	switch {
	case len(msgs) > 0:
		if md, merr := msgs[len(msgs)-1].Metadata(); merr == nil {
			s.lag.Store(int64(md.NumPending) + 1)
		}
	case err == nil:
		s.lag.Store(1)
	}
}

// Lag is the messages the inbox's durable held past the last one it
// pulled, as that pull saw them, and those of a batch it refused (a
// review: they did not count, and the empty pulls while they waited read
// 0).
func (s *Source) Lag() (int64, bool) {
	n := s.lag.Load()
	return max(0, n-1) + s.lagHeld.Load(), n > 0
}
