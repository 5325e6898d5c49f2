package nats

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	"github.com/switchyard-router/switchyard/internal/logthrottle"
	"github.com/switchyard-router/switchyard/internal/stall"
)

const (
	// ClientName is the connection name the server shows for the router.
	ClientName = "switchyard"

	reconnectWait   = 500 * time.Millisecond
	reconnectJitter = 250 * time.Millisecond
	// stallWait is how long one PublishMsgAsync may block waiting for a free
	// in-flight slot (the library's own default is 200ms).
	stallWait = 200 * time.Millisecond
	// ackTimeoutMargin: the library's per-message ack timeout is set to
	// PublishTimeout plus this margin. Publish always gives up earlier; the
	// library timeout only reclaims the in-flight slot of an ack that never
	// comes, so such slots cannot leak and stall the publisher for good.
	ackTimeoutMargin = 5 * time.Second
)

// Sink publishes events to NATS. It implements switchyard.Sink and
// switchyard.HealthChecker.
//
// With JetStream (config jetstream = true, the default) a message counts as
// delivered only once a stream acknowledged it; every message carries
// Nats-Msg-Id (the output's MsgID), so JetStream itself drops a republished
// duplicate inside the stream's duplicates window, and the result's Position
// is the stream and sequence. With core NATS (jetstream = false) delivery is
// at most once: there is no broker acknowledgement, only a flush that proves
// the server read the bytes; a subscriber that is down or slow loses the
// message, and Position stays empty.
//
// Every message carries the CloudEvents NATS binding headers (ce-*,
// content-type) and the W3C trace context (traceparent, tracestate).
type Sink struct {
	name       string
	log        hclog.Logger
	nc         *natsgo.Conn
	js         jetstream.JetStream // publishes; nil in core NATS mode
	jsAdmin    jetstream.JetStream // creates streams (core mode too)
	timeout    time.Duration
	maxPending int
	// streams are the block's stream blocks: those the sink creates or
	// updates on each connection (SetStreams swaps them on a reload).
	streams atomic.Pointer[[]config.Stream]
	// streamsMu is held while the streams in force are read and set up on
	// the server (a reload, a connection, a restore): one set-up at a time,
	// so that one on the blocks before a reload cannot undo its.
	streamsMu sync.Mutex
	// behind is why the streams in force are not all set up, while
	// publishing goes on (they were once): Healthy says it.
	behind atomic.Pointer[error]

	mu             sync.Mutex
	streamsCreated bool  // every stream of the config exists
	streamsErr     error // why creating them failed, on the last connection
	everConnected  bool
	ready          func() // switchyard.ReadyNotifier

	closedCh chan struct{}
	opened   chan struct{} // closed when Open returns
	// restoring is set while a stream found gone is being created again
	// (restoreStreams).
	restoring  atomic.Bool
	restoreLog logthrottle.Throttle // its failures, at most one line a second
	// stall is set while JetStream leaves publishes unanswered (a hung
	// server, publishes refused in silence): Healthy says so.
	stall stall.Tracker
	// refusing is why JetStream last refused a message for want of room
	// or of its stream, until a message is acknowledged again: Healthy
	// says so, as the events wait without counting attempts.
	refusing atomic.Pointer[error]
	// checking is set while a ping checks whether the connection went
	// silent (checkSilent, pingIfIdle): one at a time.
	checking atomic.Bool
	// coreSending counts core NATS publishes in flight (publishCore): with
	// them, or JetStream acks awaited, the sink is busy, and its health
	// check leaves the connection alone (pingIfIdle).
	coreSending atomic.Int32
	// conn is the connection's state as its handlers last reported it.
	conn connWatch

	scratchPool sync.Pool // *scratch
}

var (
	_ switchyard.Sink          = (*Sink)(nil)
	_ switchyard.HealthChecker = (*Sink)(nil)
	_ switchyard.ReadyNotifier = (*Sink)(nil)
	_ switchyard.Fitter        = (*Sink)(nil)
)

// Open connects to the NATS server at url (a comma-separated list is
// accepted) and creates or updates every stream in cfg.Streams (in core
// NATS mode too: a stream captures core publishes as well). A server that
// cannot be reached does not fail Open: the router starts without its
// broker (after a power cut the node often boots before its network), the
// connection keeps trying every reconnectWait, and on connecting the sink
// creates the streams and tells the engine (OnReady), which publishes at
// once. Meanwhile Publish fails fast as unavailable and Healthy says why.
// Open fails only on what retrying cannot fix: a bad URL or credentials
// file, or a stream the server refuses. cfg is config's resolved form
// (config.NewNATS and config.Load set every default); Open defaults
// nothing.
func Open(ctx context.Context, cfg config.NATS, url string, logger hclog.Logger) (*Sink, error) {
	if cfg.PublishTimeout <= 0 || cfg.MaxPending <= 0 {
		return nil, fmt.Errorf("%s: publish_timeout %s, max_pending %d: the block is not resolved (config.NewNATS sets both)", cfg.SinkName(), cfg.PublishTimeout, cfg.MaxPending)
	}
	s := newSink(cfg, logger)
	defer close(s.opened) // connection handlers wait for Open to finish
	auth, err := ClientOptions(cfg, s.log)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.name, err)
	}
	nc, err := dial(url, append(s.connOptions(), auth...), s.conn.failed)
	if err != nil {
		return nil, fmt.Errorf("%s: connect %s: %w", s.name, url, err)
	}
	s.nc = nc
	s.conn.dialed(nc.Status())
	if err := s.openJetStream(cfg); err != nil {
		nc.Close()
		return nil, err
	}
	if !nc.IsConnected() {
		s.log.Warn("NATS is not reachable; the router runs without it and connects when it appears", "url", url, "error", s.conn.lastError())
		return s, nil
	}
	if err := s.ensureStreams(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	s.connectedOnce()
	return s, nil
}

// newSink is a sink on cfg's settings, not yet connected.
func newSink(cfg config.NATS, logger hclog.Logger) *Sink {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	s := &Sink{
		name:           cfg.SinkName(),
		timeout:        cfg.PublishTimeout,
		maxPending:     cfg.MaxPending,
		closedCh:       make(chan struct{}),
		opened:         make(chan struct{}),
		streamsCreated: len(cfg.Streams) == 0,
	}
	streams := slices.Clone(cfg.Streams)
	s.streams.Store(&streams)
	s.log = logger.Named(s.name)
	s.stall.Log = s.log
	return s
}

// declared are the stream blocks in force.
func (s *Sink) declared() []config.Stream { return *s.streams.Load() }

// connOptions are the connection's options (connWatch.options), with the
// streams set up on every (re)connection.
func (s *Sink) connOptions() []natsgo.Option {
	var closeOnce sync.Once
	return s.conn.options(ClientName, s.log, s.timeout,
		func(_ *natsgo.Conn, first bool) {
			what := "reconnected to NATS"
			if first {
				what = "connected to NATS"
			}
			go s.onConnect(what, first)
		},
		func() { closeOnce.Do(func() { close(s.closedCh) }) })
}

// asyncErrors logs the connection's asynchronous errors, at most one line a
// second, with the count of those held back (like_it_since_last): a
// permissions violation comes once per message, and at 100 events a second
// logged 1,201 lines in 37 seconds (a broker trial). A refusal of the
// credentials is the connection's last error (conn): nats.go reports the
// refusal of a reconnect only here.
//
// A refusal comes again at every reconnect (about one a second-odd: each
// let through a one-a-second throttle, 57 lines in 35 s in a trial): it is
// logged once a minute while it lasts. One after the connection came up
// again, or for another cause, is a new refusal, told at once (a review:
// a credential fixed, then broken again within the minute, went unsaid).
func asyncErrors(log hclog.Logger, conn *connWatch) natsgo.ErrHandler {
	var th logthrottle.Throttle
	refusals, ups := &logthrottle.Throttle{Every: time.Minute}, uint64(0)
	return func(_ *natsgo.Conn, sub *natsgo.Subscription, err error) {
		refused := sub == nil && authRefusal(err)
		key := "async"
		if refused {
			conn.failed(err)
			// nats.go calls this handler from one goroutine at a time.
			if now := conn.ups.Load(); now != ups {
				refusals, ups = &logthrottle.Throttle{Every: time.Minute}, now
			}
			key = err.Error() // each cause once a minute: two servers may alternate
		}
		take := th.Take
		if refused {
			take = refusals.Take
		}
		held, ok := take(key, time.Now())
		if !ok {
			return
		}
		if refused {
			log.Warn("NATS refuses the router's credentials; reconnecting (logged once a minute while it lasts)", "url", conn.lastURL(), "error", err, "like_it_since_last", held)
			return
		}
		args := []any{"error", err, "like_it_since_last", held}
		if sub != nil {
			args = append(args, "subject", sub.Subject)
		}
		log.Warn("NATS async error", args...)
	}
}

// reconnecting are the options of every connection the router makes: its
// name, and reconnect for ever, through authorization errors too. nats.go
// gives up after the same one twice: a user missing for a moment (a server
// reloaded with an edited account) closed the sink's and the inbox's
// connections for good, and a router started then never connected (a
// broker trial).
func reconnecting(name string) []natsgo.Option {
	return []natsgo.Option{
		natsgo.Name(name),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(reconnectWait),
		natsgo.ReconnectJitter(reconnectJitter, reconnectJitter),
		natsgo.IgnoreAuthErrorAbort(),
	}
}

// openJetStream makes the JetStream context (it needs no connection yet).
func (s *Sink) openJetStream(cfg config.NATS) error {
	if !cfg.JetStream && len(cfg.Streams) == 0 {
		return nil
	}
	js, err := jetstream.New(s.nc,
		jetstream.WithPublishAsyncMaxPending(s.maxPending),
		jetstream.WithPublishAsyncTimeout(s.timeout+ackTimeoutMargin),
	)
	if err != nil {
		return fmt.Errorf("%s: jetstream: %w", s.name, err)
	}
	s.jsAdmin = js
	if cfg.JetStream {
		s.js = js
	}
	return nil
}

// ensureStreams creates or updates the streams in force.
func (s *Sink) ensureStreams(ctx context.Context) error {
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	_, err := s.applyStreams(ctx, s.declared())
	return err
}

// applyStreams creates or updates each of streams, whatever the others
// did (a stream the server refuses does not keep the ones after it from
// being set up), and returns the names of those it created and the errors
// joined. s.streamsMu is held.
func (s *Sink) applyStreams(ctx context.Context, streams []config.Stream) (created []string, err error) {
	var errs []error
	for _, st := range streams {
		made, err := ensureStream(ctx, s.jsAdmin, st)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
			continue
		}
		if made {
			created = append(created, st.Name)
		}
		s.log.Debug("stream ready", "stream", st.Name, "subjects", st.Subjects)
	}
	if err = errors.Join(errs...); err != nil {
		s.streamsBehind(err)
		return created, err
	}
	s.mu.Lock()
	s.streamsCreated, s.streamsErr = true, nil
	s.mu.Unlock()
	s.behind.Store(nil)
	return created, nil
}

// streamsBehind notes that the streams in force could not all be set up:
// before they ever were, nothing is published (unavailable says why);
// after, publishing goes on and Healthy says what is behind.
func (s *Sink) streamsBehind(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.streamsCreated {
		s.streamsErr = err
		return
	}
	behind := fmt.Errorf("%s: publishing, but the streams in force are not all set up: %w", s.name, err)
	s.behind.Store(&behind)
}

// SetStreams makes streams the stream blocks in force (a reload), and sets
// them up on the server now (on a sink that never connected, a block the
// reload adds, they are set up whole when it does, as a start's are). A reload only adds: it creates streams and
// adds subjects to them; a stream on the server whose settings the blocks
// would change otherwise (storage, max_age, duplicates, replicas, fewer
// subjects) refuses it, before anything changes, as does a server not
// connected (nothing to check against): those take a restart, whose
// set-up applies the blocks whole. So a refused reload cannot drop what a
// stream holds. When the server refuses the set-up itself (subjects that
// overlap another stream), SetStreams puts back what it did (putBack) and
// returns why. undo does the same for a reload refused afterwards. A
// stream whose block is gone stays on the server, with what it holds: the
// sink no longer sets it up.
func (s *Sink) SetStreams(ctx context.Context, streams []config.Stream) (undo func(), err error) {
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	if s.nc == nil || !s.nc.IsConnected() {
		s.mu.Lock()
		ever := s.everConnected
		s.mu.Unlock()
		if !ever { // a block a reload adds, its server not up: set up whole when it is, as a start's
			streams = slices.Clone(streams)
			s.streams.Store(&streams)
			s.mu.Lock()
			s.streamsCreated = len(streams) == 0
			s.mu.Unlock()
			return func() {}, nil
		}
		return nil, fmt.Errorf("%s: not connected, so its stream blocks' changes cannot be checked against the server: reload once it is connected, or restart", s.name)
	}
	before, err := s.onlyAdds(ctx, streams)
	if err != nil {
		return nil, err
	}
	streams = slices.Clone(streams)
	old := s.streams.Swap(&streams)
	created, err := s.applyStreams(ctx, streams)
	putBack := func() {
		s.streams.Store(old)
		if err := s.putBack(created, before); err != nil {
			s.log.Warn("putting the streams back as they were failed", "error", err)
		}
	}
	if err != nil {
		putBack()
		return nil, err
	}
	return func() {
		s.streamsMu.Lock()
		defer s.streamsMu.Unlock()
		putBack()
	}, nil
}

// onlyAdds refuses streams whose set-up would change a stream on the
// server other than by adding subjects, and returns the configs of those
// the server has, as it has them (putBack restores them: hand edits too).
func (s *Sink) onlyAdds(ctx context.Context, streams []config.Stream) (before []jetstream.StreamConfig, err error) {
	for _, st := range streams {
		want, err := streamConfig(st)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		str, err := s.jsAdmin.Stream(ctx, st.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: read stream %q: %w", s.name, st.Name, err)
		}
		cur := str.CachedInfo().Config
		if changed := changedBeyondSubjects(cur, want); len(changed) > 0 {
			return nil, fmt.Errorf("%s: stream %q: the block changes its %s on the server: a reload only creates streams and adds subjects to them (so that a refused one drops nothing); a restart changes the rest",
				s.name, st.Name, strings.Join(changed, ", "))
		}
		before = append(before, cur)
	}
	return before, nil
}

// changedBeyondSubjects names the settings in which want differs from the
// stream's config cur, other than subjects it adds.
func changedBeyondSubjects(cur, want jetstream.StreamConfig) []string {
	var changed []string
	for _, c := range []struct {
		name string
		same bool
	}{
		{"storage", cur.Storage == want.Storage},
		{"max_age", cur.MaxAge == want.MaxAge},
		{"duplicates", cur.Duplicates == want.Duplicates || want.Duplicates == 0}, // 0: the server's default
		{"replicas", max(cur.Replicas, 1) == max(want.Replicas, 1)},
	} {
		if !c.same {
			changed = append(changed, c.name)
		}
	}
	for _, subject := range cur.Subjects {
		if !slices.Contains(want.Subjects, subject) {
			changed = append(changed, fmt.Sprintf("subjects (%q is gone)", subject))
			break
		}
	}
	return changed
}

// putBack undoes a SetStreams: it deletes the streams it created and that
// hold nothing yet (one that does is kept, and said: a route waiting for
// its subject may have published into it), then gives the others their
// configs as they were before (narrowing their subjects back keeps what
// they hold), on a budget of its own. s.streamsMu is held.
func (s *Sink) putBack(created []string, before []jetstream.StreamConfig) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	var errs []error
	for _, name := range created {
		str, err := s.jsAdmin.Stream(ctx, name)
		if err == nil && str.CachedInfo().State.Msgs > 0 {
			s.log.Warn("a stream made for a refused reload holds messages already: kept", "stream", name, "messages", str.CachedInfo().State.Msgs)
			continue
		}
		if err == nil {
			err = s.jsAdmin.DeleteStream(ctx, name)
		}
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, fmt.Errorf("delete stream %q, made for a refused reload: %w", name, err))
		}
	}
	for _, sc := range before {
		if _, err := s.jsAdmin.UpdateStream(ctx, sc); err != nil {
			errs = append(errs, fmt.Errorf("put stream %q back: %w", sc.Name, err))
		}
	}
	if len(errs) == 0 {
		s.behind.Store(nil) // what the refused set-up left behind is undone
	}
	return errors.Join(errs...)
}

// onConnect runs on every (re)connection: streams first (a broker that
// came up empty gets them), then the engine is told to publish.
//
// Setting the streams up can fail for a while (a cluster electing a stream
// leader after a node died): it is tried again every second while the
// connection is up. Until the streams were set up once, publishes wait;
// after that they go ahead meanwhile (the streams exist, only their update
// is pending).
func (s *Sink) onConnect(what string, initial bool) {
	<-s.opened
	if s.nc == nil || s.nc.IsClosed() {
		return // Open failed
	}
	s.mu.Lock()
	done := initial && s.everConnected
	s.mu.Unlock()
	if done {
		return // the first connection came at once: Open set it up
	}
	s.log.Info(what, "url", s.nc.ConnectedUrlRedacted())
	announced := false
	for logged := false; s.nc.IsConnected(); time.Sleep(time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		err := s.ensureStreams(ctx)
		cancel()
		if err == nil {
			if !announced {
				s.connectedOnce()
			}
			return
		}
		s.mu.Lock()
		created := s.streamsCreated
		s.mu.Unlock()
		if created && !announced {
			announced = true
			s.connectedOnce() // publishing goes on while the update is retried
		}
		if !logged {
			logged = true
			s.log.Warn("connected, but the streams cannot be set up yet; trying again every second", "error", err, "publishing", created)
		}
	}
}

// connectedOnce logs the mode on the first connection and tells the engine
// the sink is reachable.
func (s *Sink) connectedOnce() {
	s.mu.Lock()
	first := !s.everConnected
	s.everConnected = true
	s.mu.Unlock()
	if first {
		mode := "jetstream"
		if s.js == nil {
			mode = "core (at most once)"
		}
		s.log.Info("NATS sink ready", "url", s.nc.ConnectedUrlRedacted(), "mode", mode)
	}
	s.notifyReady()
}

// notifyReady tells the engine the sink can publish (OnReady's function).
func (s *Sink) notifyReady() {
	s.mu.Lock()
	ready := s.ready
	s.mu.Unlock()
	if ready != nil {
		ready()
	}
}

// OnReady registers the function called whenever the sink (re)connects
// (switchyard.ReadyNotifier).
func (s *Sink) OnReady(fn func()) {
	s.mu.Lock()
	s.ready = fn
	s.mu.Unlock()
}

// ensureStream creates the stream or updates it to match st.
func ensureStream(ctx context.Context, js jetstream.JetStream, st config.Stream) (created bool, err error) {
	sc, err := streamConfig(st)
	if err != nil {
		return false, err
	}
	if created, err = createOrUpdate(ctx, js, sc); err != nil {
		return created, fmt.Errorf("create or update stream %q (subjects %v): %w", st.Name, st.Subjects, err)
	}
	return created, nil
}

// streamConfig is a stream block as JetStream spells it.
func streamConfig(st config.Stream) (jetstream.StreamConfig, error) {
	sc := jetstream.StreamConfig{
		Name:       st.Name,
		Subjects:   st.Subjects,
		Replicas:   st.Replicas,
		MaxAge:     st.MaxAge,
		Duplicates: st.Duplicates,
	}
	switch strings.ToLower(st.Storage) {
	case "file":
		sc.Storage = jetstream.FileStorage
	case "memory":
		sc.Storage = jetstream.MemoryStorage
	default:
		return sc, fmt.Errorf("stream %q: unknown storage %q (want \"file\" or \"memory\")", st.Name, st.Storage)
	}
	return sc, nil
}

// createOrUpdate creates the stream, or updates what the block sets of an
// existing one (subjects, storage, replicas, max_age, duplicates) and
// leaves the rest as it is. Sending the block's config alone would reset
// every limit an operator set by hand (max_msgs, max_bytes, discard,
// max_msg_size) at each reconnection, without a word (a broker trial).
// created says whether it created the stream.
func createOrUpdate(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) (created bool, err error) {
	st, err := js.Stream(ctx, sc.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err = js.CreateStream(ctx, sc); !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return err == nil, err
		}
		st, err = js.Stream(ctx, sc.Name) // another router made it meanwhile: update it
	}
	if err != nil {
		return false, err
	}
	cur := st.CachedInfo().Config
	cur.Subjects, cur.Storage, cur.Replicas, cur.MaxAge, cur.Duplicates = sc.Subjects, sc.Storage, sc.Replicas, sc.MaxAge, sc.Duplicates
	_, err = js.UpdateStream(ctx, cur)
	return false, err
}

// Name is how routes refer to the sink (config.NATS.SinkName).
func (s *Sink) Name() string { return s.name }

// Healthy reports an error unless the connection to the server is up.
func (s *Sink) Healthy(ctx context.Context) error {
	if err := s.unavailable(); err != nil {
		return err
	}
	if s.pingIfIdle(ctx) {
		return s.conn.notConnected(s.name)
	}
	if p := s.refusing.Load(); p != nil {
		return *p
	}
	if p := s.behind.Load(); p != nil {
		return *p
	}
	return s.stall.Err(s.name)
}

// busy says whether publishes are in flight: core NATS ones, bytes not
// yet written, or JetStream acks awaited.
func (s *Sink) busy() bool {
	if s.coreSending.Load() > 0 {
		return true
	}
	if n, err := s.nc.Buffered(); err == nil && n > 0 {
		return true
	}
	return s.js != nil && s.js.PublishAsyncPending() > 0
}

// healthPing bounds the ping a health check sends (within the check's own
// second: cmd/router's healthWait).
const healthPing = 800 * time.Millisecond

// pingIfIdle pings the server of an idle sink, within ctx and healthPing,
// and reconnects when nothing comes back (reconnectIfSilent): true then. A sink with
// nothing to publish learned of a silent server only from its next
// publish, which then waited its publish_timeout: /readyz said ok for
// minutes while the inbox on the same server said not connected (a
// trial). A busy sink is left alone: its ping would wait behind the
// publishes' bytes on a slow link and force a reconnect of a connection
// that works (a review: 20 checks out of 20 under load, every publish
// failed), and its publishes' own wait finds a silence (checkSilent).
func (s *Sink) pingIfIdle(ctx context.Context) bool {
	if s.busy() || !s.checking.CompareAndSwap(false, true) {
		return false
	}
	defer s.checking.Store(false)
	wait := healthPing
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)*4/5)
	}
	return wait > 0 && reconnectIfSilent(ctx, s.nc, wait, s.log, s.conn.going)
}

// unavailable says why nothing can be published now: not connected (with
// the last connection error: a refused password, a server not there), or
// the streams not set up. nil when publishing can go ahead.
func (s *Sink) unavailable() error {
	if err := s.conn.notConnected(s.name); err != nil {
		return err
	}
	if st := s.nc.Status(); st != natsgo.CONNECTED {
		last := s.nc.LastError()
		if last == nil {
			last = s.conn.lastError()
		}
		if last != nil {
			return fmt.Errorf("%s: not connected (connection %s; last error: %v)", s.name, st, last)
		}
		return fmt.Errorf("%s: not connected (connection %s)", s.name, st)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.streamsErr != nil:
		return fmt.Errorf("%s: connected, but the streams are not set up: %w", s.name, s.streamsErr)
	case !s.streamsCreated:
		return fmt.Errorf("%s: connected; setting up the streams", s.name)
	}
	return nil
}

// Close drains the connection (in-flight acknowledgements are still
// processed) and closes it; when ctx ends first the connection is closed at
// once.
func (s *Sink) Close(ctx context.Context) error {
	if err := s.nc.Drain(); err != nil {
		// Closed already, or reconnecting (Drain then closes the connection).
		s.nc.Close()
		return nil
	}
	select {
	case <-s.closedCh:
		return nil
	case <-ctx.Done():
		s.nc.Close()
		return fmt.Errorf("%s: drain: %w", s.name, ctx.Err())
	}
}

// Publish sends msgs and waits for their acknowledgements (JetStream) or a
// flush (core NATS). It returns one Result per message, in order, once every
// message has an outcome or the deadline passed: the earlier of ctx's
// deadline and now + publish_timeout. A message still unanswered then gets
// an error wrapping switchyard.ErrUnknownOutcome.
//
// Errors: a message that cannot ever be accepted (payload over the server's
// or stream's limit, invalid subject, no event) is switchyard.Permanent; a
// subject no stream listens to, a connection that is down and other broker
// errors are plain (retryable) errors.
func (s *Sink) Publish(ctx context.Context, msgs []*switchyard.Message) []switchyard.Result {
	return s.Send(ctx, msgs)()
}

// Send is Publish in two steps (switchyard.Sender): every message is
// written to the connection before Send returns; the returned wait collects
// the acknowledgements. On core NATS, Send does it all.
func (s *Sink) Send(ctx context.Context, msgs []*switchyard.Message) (wait func() []switchyard.Result) {
	res := make([]switchyard.Result, len(msgs))
	done := func() []switchyard.Result { return res }
	if len(msgs) == 0 {
		return done
	}
	ctx, cancel := s.bound(ctx)
	// Fail fast while disconnected: nothing is sent, so the outcome is known.
	// (nats.go would otherwise buffer the messages for after the reconnect
	// and the batch would wait out its whole deadline.)
	if why := s.unavailable(); why != nil {
		cancel()
		err := fmt.Errorf("%w: %w", why, switchyard.ErrSinkUnavailable)
		for i := range res {
			res[i].Err = err
		}
		return done
	}
	if s.js == nil {
		s.publishCore(ctx, msgs, res)
		cancel()
		return done
	}
	start := time.Now()
	sc := s.sendJetStream(ctx, msgs, res)
	return func() []switchyard.Result {
		s.awaitJetStream(ctx, sc, msgs, res, start)
		s.putScratch(sc)
		cancel()
		return res
	}
}

// bound limits ctx to the publish timeout unless it already ends earlier.
func (s *Sink) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= s.timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

// sendJetStream sends every message without waiting: the acks of the
// whole batch are in flight together. The futures are in the returned
// scratch, which awaitJetStream reads.
func (s *Sink) sendJetStream(ctx context.Context, msgs []*switchyard.Message, res []switchyard.Result) *scratch {
	sc := s.getScratch(len(msgs))
	for i, m := range msgs {
		nm, err := s.prepare(ctx, sc, m)
		if err != nil {
			res[i].Err = err
			continue
		}
		f, err := s.publishAsync(ctx, nm)
		if err != nil {
			res[i].Err = s.sendError(m, err)
			continue
		}
		sc.futs[i] = f
	}
	return sc
}

// awaitJetStream collects the acknowledgements of what sendJetStream sent,
// until ctx is done; what has not arrived by then is an unknown outcome.
func (s *Sink) awaitJetStream(ctx context.Context, sc *scratch, msgs []*switchyard.Message, res []switchyard.Result, start time.Time) {
	done := ctx.Done()
	var acked, refused bool
	var missed int64
	defer func() {
		if acked && !refused {
			s.refusing.Store(nil)
		}
		if acked {
			s.stall.Acked()
		} else if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			s.stall.Missed(missed, time.Since(start), s.timeout) // a cancelled caller says nothing of the broker
			if missed > 0 {
				s.checkSilent()
			}
		}
	}()
	for i, f := range sc.futs {
		if f == nil {
			continue
		}
		var (
			ack *jetstream.PubAck
			err error
		)
		if done != nil {
			select {
			case ack = <-f.Ok():
			case err = <-f.Err():
			case <-done:
				done = nil // from here on only collect what has already arrived
			}
		}
		if done == nil && ack == nil && err == nil {
			select {
			case ack = <-f.Ok():
			case err = <-f.Err():
			default:
				err = fmt.Errorf("%s: subject %q: no acknowledgement before the deadline (%v): %w",
					s.name, msgs[i].Topic, ctx.Err(), switchyard.ErrUnknownOutcome)
			}
		}
		if err != nil {
			res[i].Err = s.ackError(msgs[i], err)
			switch {
			case errors.Is(res[i].Err, switchyard.ErrUnknownOutcome):
				missed++
			case errors.Is(res[i].Err, switchyard.ErrSinkUnavailable):
				why := res[i].Err // a copy: res is the caller's
				s.refusing.Store(&why)
				refused = true
			}
			continue
		}
		// A duplicate (ack.Duplicate) is a success: the stream already holds
		// the message and the ack names its original sequence.
		res[i].Position = switchyard.Position{Stream: ack.Stream, Sequence: ack.Sequence}
		acked = true
	}
}

// publishAsync is PublishMsgAsync with the stall (too many messages in
// flight) handled: it retries until a slot frees or ctx ends.
//
// Library retries on "no responders" are off (noRetry): the library would
// republish the *nats.Msg later, and encode reuses it (and its header map)
// for the next message as soon as PublishMsgAsync returns. The engine
// retries failed messages itself.
func (s *Sink) publishAsync(ctx context.Context, nm *natsgo.Msg) (jetstream.PubAckFuture, error) {
	for {
		var (
			f   jetstream.PubAckFuture
			err error
		)
		// The library's stall wait is not bound by ctx; shorten it near the
		// deadline so Publish returns on time.
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < stallWait {
			wait := time.Until(dl)
			if wait <= 0 {
				// The deadline passed; ctx may not be marked done yet.
				return nil, context.DeadlineExceeded
			}
			f, err = s.js.PublishMsgAsync(nm, noRetry, jetstream.WithStallWait(wait))
		} else {
			f, err = s.js.PublishMsgAsync(nm, noRetry)
		}
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			return f, err
		}
		// No slot freed within the stall wait: the broker is slow to ack.
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !s.nc.IsConnected() {
			// An outage, not the event's failure: no attempt counted
			// (a review: returned bare, it counted one).
			return nil, fmt.Errorf("%w: %w", errNotConnected, err)
		}
	}
}

// noRetry turns off the library's republish on "no responders".
var noRetry = jetstream.WithRetryAttempts(0)

// scratch is per-Publish-call working memory, pooled across calls.
type scratch struct {
	futs []jetstream.PubAckFuture
	// msg, hdr and vals are reused for every message: nats.go serializes a
	// message into its write buffer before PublishMsg/PublishMsgAsync
	// returns, and nothing reads them afterwards (see publishAsync).
	msg  natsgo.Msg
	hdr  natsgo.Header
	vals []string
	hs   []switchyard.Header
}

func (s *Sink) getScratch(n int) *scratch {
	sc, _ := s.scratchPool.Get().(*scratch)
	if sc == nil {
		sc = &scratch{hdr: make(natsgo.Header, 16)}
	}
	if cap(sc.futs) < n {
		sc.futs = make([]jetstream.PubAckFuture, n)
	}
	sc.futs = sc.futs[:n]
	return sc
}

func (s *Sink) putScratch(sc *scratch) {
	clear(sc.futs) // drop references to futures
	clear(sc.vals)
	clear(sc.hs)
	clear(sc.hdr)
	sc.msg = natsgo.Msg{}
	s.scratchPool.Put(sc)
}

// encode maps m onto the NATS CloudEvents binding: subject = destination,
// data = the event's data, headers = ce-* attributes, content-type, trace
// context and Nats-Msg-Id. The returned message is valid until the next call.
func (sc *scratch) encode(sink string, m *switchyard.Message) (*natsgo.Msg, error) {
	if m == nil || m.Event == nil {
		return nil, switchyard.Permanentf("%s: message without an event", sink)
	}
	if m.Topic == "" {
		return nil, switchyard.Permanentf("%s: event %s: no subject to publish to", sink, m.Event.ID)
	}
	sc.hs = cloudevents.NATS.AppendHeaders(sc.hs[:0], m.Event)
	hs := sc.hs
	clear(sc.hdr)
	if cap(sc.vals) < len(hs)+1 {
		sc.vals = make([]string, len(hs)+1)
	}
	vals := sc.vals[:len(hs)+1]
	for i, x := range hs {
		vals[i] = x.Value
		if old, ok := sc.hdr[x.Name]; ok {
			sc.hdr[x.Name] = append(old[:len(old):len(old)], x.Value)
			continue
		}
		sc.hdr[x.Name] = vals[i : i+1 : i+1]
	}
	id := m.MsgID
	if id == "" {
		id = m.Event.ID
	}
	// What jetstream.WithMsgID does, without a per-message option.
	vals[len(hs)] = id
	sc.hdr[jetstream.MsgIDHeader] = vals[len(hs):]
	sc.msg = natsgo.Msg{Subject: m.Topic, Header: sc.hdr, Data: m.Event.Data}
	return &sc.msg, nil
}

// errNotConnected: the connection dropped in the middle of a batch.
var errNotConnected = fmt.Errorf("not connected: %w", switchyard.ErrSinkUnavailable)

// canSend stops a batch from being sent once its deadline passed or the
// connection dropped (nats.go would buffer the rest for after a reconnect,
// and the batch would only wait out its deadline).
func (s *Sink) canSend(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	default:
	}
	if st := s.conn.get(); st != natsgo.CONNECTED {
		return fmt.Errorf("%w (connection %s)", errNotConnected, st)
	}
	if st := s.nc.Status(); st != natsgo.CONNECTED {
		return fmt.Errorf("%w (connection %s)", errNotConnected, st)
	}
	return nil
}

// sendError classifies an error from encoding a message or handing it to
// the connection.
func (s *Sink) sendError(m *switchyard.Message, err error) error {
	switch {
	case switchyard.IsPermanent(err):
		return err
	case errors.Is(err, natsgo.ErrMaxPayload):
		// Fits says it in full (headers and data), where it can.
		if ferr := s.Fits(m); ferr != nil {
			return switchyard.Permanentf("subject %q: %v: %w", m.Topic, ferr, err)
		}
		return switchyard.Permanentf("%s: subject %q: the message (data %d bytes, and its headers) is over the server's max_payload (%d): %w",
			s.name, m.Topic, len(m.Event.Data), s.nc.MaxPayload(), err)
	case errors.Is(err, natsgo.ErrBadSubject):
		return switchyard.Permanentf("%s: invalid subject %q: %w", s.name, m.Topic, err)
	case errors.Is(err, natsgo.ErrConnectionClosed) || errors.Is(err, natsgo.ErrConnectionDraining) || errors.Is(err, natsgo.ErrConnectionReconnecting):
		// The connection went while the batch was sent: an outage, no
		// attempt counted.
		return fmt.Errorf("%s: subject %q: not sent: %w: %w", s.name, m.Topic, errNotConnected, err)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		// Not sent (the publisher stalled, too many publishes in flight, or
		// the batch took too long): the router may retry freely and need not
		// count an attempt.
		return fmt.Errorf("%s: subject %q: not sent before the deadline (%v): %w",
			s.name, m.Topic, err, switchyard.ErrUnknownOutcome)
	default:
		return fmt.Errorf("%s: subject %q: not sent: %w", s.name, m.Topic, err)
	}
}

// ackError classifies an error that came back instead of an ack.
func (s *Sink) ackError(m *switchyard.Message, err error) error {
	if errors.Is(err, switchyard.ErrUnknownOutcome) {
		return err
	}
	var apiErr *jetstream.APIError
	switch stream := StreamCapturing(s.declared(), m.Topic); {
	case errors.Is(err, jetstream.ErrNoStreamResponse) && stream != "":
		// The block's stream was there, and is gone (deleted by hand, a
		// server that lost its store): made again, the message waits.
		go s.restoreStreams()
		return fmt.Errorf("%s: the stream %q for subject %q is gone; it is being created again: %w: %w",
			s.name, stream, m.Topic, err, switchyard.ErrSinkUnavailable)
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		return fmt.Errorf("%s: no JetStream stream for subject %q (add a stream block whose subjects match it): %w",
			s.name, m.Topic, err)
	case errors.As(err, &apiErr) && slices.Contains(jsErrCodesFull, apiErr.ErrorCode):
		// The stream or the account is full (max_msgs or max_bytes with
		// discard new, the account's storage), or its store failed: no
		// fault of the message's. It waits, as an event does for the
		// router's own full disk, and counts no attempt.
		return fmt.Errorf("%s: subject %q: JetStream cannot store now: %w: %w", s.name, m.Topic, err, switchyard.ErrSinkUnavailable)
	case errors.Is(err, natsgo.ErrDisconnected), errors.Is(err, jetstream.ErrAsyncPublishTimeout):
		// Sent, but the connection dropped (or the ack never came) before
		// the stream answered: it may or may not have stored the message.
		return fmt.Errorf("%s: subject %q: %v before the acknowledgement: %w",
			s.name, m.Topic, err, switchyard.ErrUnknownOutcome)
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum:
		return switchyard.Permanentf("%s: subject %q: message of %d bytes over the stream's max_msg_size: %w",
			s.name, m.Topic, len(m.Event.Data), err)
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeHeaderExceedsMaximum:
		return switchyard.Permanentf("%s: subject %q: headers over JetStream's limit of %d bytes: %w",
			s.name, m.Topic, maxJetStreamHeaders, err)
	default:
		return fmt.Errorf("%s: subject %q: JetStream refused the message: %w", s.name, m.Topic, err)
	}
}

// prepare encodes m into the scratch message, if the connection can send
// now; an error is m's result.
func (s *Sink) prepare(ctx context.Context, sc *scratch, m *switchyard.Message) (*natsgo.Msg, error) {
	nm, err := sc.encode(s.name, m)
	if err == nil {
		err = s.canSend(ctx)
	}
	if err != nil {
		return nil, s.sendError(m, err)
	}
	return nm, nil
}

// publishCore publishes on core NATS: at most once, no broker ack. One flush
// at the end proves the server read every message of the batch.
func (s *Sink) publishCore(ctx context.Context, msgs []*switchyard.Message, res []switchyard.Result) {
	s.coreSending.Add(1)
	defer s.coreSending.Add(-1)
	sc := s.getScratch(0)
	defer s.putScratch(sc)
	sent := 0
	for i, m := range msgs {
		nm, err := s.prepare(ctx, sc, m)
		if err != nil {
			res[i].Err = err
			continue
		}
		if err := s.nc.PublishMsg(nm); err != nil {
			res[i].Err = s.sendError(m, err)
			continue
		}
		sent++
	}
	if sent == 0 {
		return
	}
	if err := s.nc.FlushWithContext(ctx); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%s: flush not confirmed before the deadline (%v): %w", s.name, err, switchyard.ErrUnknownOutcome)
			if errors.Is(ctx.Err(), context.DeadlineExceeded) { // a cancelled caller says nothing of the server
				s.checkSilent()
			}
		} else {
			// The connection dropped mid-flush: the messages may or may not
			// have reached the server.
			err = fmt.Errorf("%s: flush: %v: %w", s.name, err, switchyard.ErrUnknownOutcome)
		}
		for i := range res {
			if res[i].Err == nil {
				res[i].Err = err
			}
		}
	}
}

// checkSilent pings the server after a publish left unanswered at its
// deadline (no acknowledgement came, or the flush was not confirmed):
// reconnectIfSilent, waiting half the publish timeout. A server that
// answers is slow, or refuses in silence: the stall says so. One check at
// a time, on a goroutine of its own.
func (s *Sink) checkSilent() {
	if !s.checking.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.checking.Store(false)
		reconnectIfSilent(context.Background(), s.nc, s.timeout/2, s.log, s.conn.going)
	}()
}

// reconnectIfSilent pings the server, and reconnects if no answer comes
// within wait while nothing else came from the server either and the
// connection counts as up: the server is gone from this connection,
// although its socket is open. Its host went dark, or a NAT on the way
// forgot the connection, and nothing resets it; nats.go's own pings, every
// two minutes, would notice after two missed. A server that sent anything
// meanwhile (acknowledgements on a slow link, where the ping waits behind
// the batch) is kept. Before the reconnect, going is called with why (nil
// is allowed). While the connection is down, the sink answers unavailable
// at once, and the connection comes back by dialling
// (TestSilentConnectionIsFound, TestSourceFindsASilentConnection). It
// reports whether it reconnected; an ended ctx ends the wait, and says
// nothing of the server.
func reconnectIfSilent(ctx context.Context, nc *natsgo.Conn, wait time.Duration, log hclog.Logger, going func(error)) bool {
	in := nc.Stats().InBytes
	pctx, cancel := context.WithTimeout(ctx, wait)
	err := nc.FlushWithContext(pctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil || nc.Stats().InBytes != in || nc.Status() != natsgo.CONNECTED {
		return false
	}
	why := fmt.Errorf("no answer to a ping in %s, nor anything else from the server: the connection went silent", wait)
	if going != nil {
		going(why)
	}
	log.Warn("the connection to NATS went silent (no answer to a ping): reconnecting", "waited", wait)
	if err := nc.ForceReconnect(); err != nil {
		log.Warn("cannot reconnect to NATS", "error", err)
	}
	return true
}

// jsErrCodesFull are JetStream's refusals for want of room or of a working
// store (nats-server's JSAccountResourcesExceededErr 10002,
// JSInsufficientResourcesErr 10023, JSMemoryResourcesExceededErr 10028,
// JSStorageResourcesExceededErr 10047, JSStreamStoreFailedF 10077: "maximum
// messages exceeded" and the like). Before, each counted an attempt, and a
// full stream dead-lettered every event (a broker trial).
var jsErrCodesFull = []jetstream.ErrorCode{10002, 10023, 10028, 10047, 10077}

// restoreStreams creates the configured streams again, one restore at a
// time, and tells the engine to publish once they are there.
func (s *Sink) restoreStreams() {
	if !s.restoring.CompareAndSwap(false, true) {
		return
	}
	defer s.restoring.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	created, err := s.createGone(ctx)
	if err != nil {
		if held, ok := s.restoreLog.Take("restore", time.Now()); ok {
			s.log.Warn("a stream is gone, and creating it again failed; trying at the next publish", "error", err, "like_it_since_last", held)
		}
		return
	}
	if len(created) > 0 {
		s.log.Warn("a stream was gone: created again (what it held before is not)", "streams", created)
	}
	s.notifyReady()
}

// createGone creates the streams in force that are gone, and leaves those
// there as they are: updating one (read, then written back) could undo an
// operator's change made in between, as a second restore, asked for by
// another message of the same batch, did when it ran after the first
// (TestStreamTroublesCountNoAttempt, about one run in thirty).
func (s *Sink) createGone(ctx context.Context) (created []string, err error) {
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	var errs []error
	for _, st := range s.declared() {
		switch err := s.createIfGone(ctx, st); {
		case err == nil:
			created = append(created, st.Name)
		case !errors.Is(err, errStreamThere):
			errs = append(errs, fmt.Errorf("%s: stream %q: %w", s.name, st.Name, err))
		}
	}
	return created, errors.Join(errs...)
}

// errStreamThere is createIfGone finding the stream there.
var errStreamThere = errors.New("the stream is there")

// createIfGone creates st unless the server has it (errStreamThere): one
// made again meanwhile, by another router or an operator, is left as it is.
func (s *Sink) createIfGone(ctx context.Context, st config.Stream) error {
	if _, err := s.jsAdmin.Stream(ctx, st.Name); !errors.Is(err, jetstream.ErrStreamNotFound) {
		if err == nil {
			err = errStreamThere
		}
		return err
	}
	sc, err := streamConfig(st)
	if err == nil {
		_, err = s.jsAdmin.CreateStream(ctx, sc)
	}
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		err = errStreamThere
	}
	return err
}

// JetStream refuses a message whose headers exceed 64 KiB
// (nats-server's JSStreamHeaderExceedsMaximumErr, error code 10097).
const (
	maxJetStreamHeaders                               = 64 << 10
	jsErrCodeHeaderExceedsMaximum jetstream.ErrorCode = 10097
)

// Fits tells whether the server could ever take m (switchyard.Fitter): its
// headers against JetStream's 64 KiB, headers and data together against
// the max_payload the server announced (unknown until the first
// connection: then only the publish can tell, and its refusal is
// permanent). The sizes are those of the wire format: "NATS/1.0\r\n",
// one "name: value\r\n" per header, a blank line.
func (s *Sink) Fits(m *switchyard.Message) error {
	if m == nil || m.Event == nil {
		return nil
	}
	id := m.MsgID
	if id == "" {
		id = m.Event.ID
	}
	hdrSize := func(bytes, headers int) int {
		return len("NATS/1.0\r\n\r\n") + len(jetstream.MsgIDHeader) + len(": \r\n") + len(id) +
			bytes + headers*len(": \r\n")
	}
	limit := s.nc.MaxPayload()
	// An upper bound first: it fits nearly always, and costs a few
	// additions where Size reads every value (ingest sizes every event).
	if hdr := hdrSize(cloudevents.NATS.SizeBound(m.Event)); hdr <= maxJetStreamHeaders && (limit <= 0 || int64(hdr+len(m.Event.Data)) <= limit) {
		return nil
	}
	hdr := hdrSize(cloudevents.NATS.Size(m.Event))
	if s.js != nil && hdr > maxJetStreamHeaders {
		return fmt.Errorf("%s: the headers take %d bytes, over JetStream's limit of %d", s.name, hdr, maxJetStreamHeaders)
	}
	if limit > 0 && int64(hdr+len(m.Event.Data)) > limit {
		return fmt.Errorf("%s: the message takes %d bytes (%d of headers, %d of data), over the server's max_payload of %d",
			s.name, hdr+len(m.Event.Data), hdr, len(m.Event.Data), limit)
	}
	return nil
}
