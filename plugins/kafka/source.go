package kafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kerr"
	kgo "github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/cloudevents"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/internal/backoff"
	"github.com/switchyard-router/switchyard/internal/grace"
)

const (
	// leaveGrace is the least time an inbox's Close gets to leave its
	// group, past the stop's time if need be (the router's other inboxes
	// may have spent it): a member that leaves hands its partitions on at
	// once; one that does not holds them for its session timeout.
	leaveGrace = time.Second

	// commitTimeout bounds the synchronous offset commit after a stored
	// batch (it runs even while the router shuts down).
	commitTimeout = 10 * time.Second
	// retention checks: how long one may take, and how often Run retries
	// one that could not reach the cluster.
	retentionCheckTimeout = 10 * time.Second
	retentionRetry        = 30 * time.Second
	// errorLogEvery rate-limits the log line of a repeating fetch error.
	errorLogEvery = 30 * time.Second
)

// Receive backoff: after a failed receive the source waits before it reads
// the same records again (min, doubling to max).
var (
	receiveBackoff = backoff.Receive // a variable so tests can shorten it
	// fetchErrorPause is the pause after a poll that returned only errors.
	fetchErrorPause = time.Second
)

var (
	_ switchyard.Source        = (*Source)(nil)
	_ switchyard.HealthChecker = (*Source)(nil)
)

// Source consumes an inbox's topics as a member of a Kafka consumer group
// (the inbox's group): several routers in one group split the partitions.
//
// Every poll is handed to receive as one batch, in offset order per
// partition. Only after receive returned nil are the batch's offsets
// committed, synchronously; until then the group cannot rebalance
// (kgo.BlockRebalanceOnPoll), so a partition never moves between "stored"
// and "committed". When receive fails, nothing is committed and the
// consumer rewinds to the batch's first offset per partition, so the same
// records come again after a backoff (the inbox drops what it stored
// already). A new group starts at the earliest offset; one that lost its
// offsets, where the inbox got to (keptread.go). See RATIONALE.md.
type Source struct {
	name    string // the inbox's name
	sink    string // "kafka.<block name>"
	log     hclog.Logger
	cl      *kgo.Client
	conn    *connState // why connecting to a broker last failed
	topics  []string
	group   string
	decoder engine.InboundDecoder // with the inbox's id header
	batch   int
	ttl     time.Duration
	kept    switchyard.KeptReads // where the inbox got to, for a group without offsets (keptread.go)
	ids     map[string][16]byte  // the topics' ids, as the last poll gave them (Run's own)
	idsAsk  map[string]time.Time // when the cluster was last asked a topic's id the fetches lacked (Run's own)

	readOnMu sync.Mutex
	readOnAt map[topicPartition]int64 // offsets read on from, to commit (keptread.go)
	clSet    chan struct{}            // closed once cl is set: the group may call readOn before

	warnedMu sync.Mutex
	warned   map[string]struct{} // unmarked offsets told (offsetmark.go)

	mu       sync.Mutex
	warnings []string

	// problem is why the last poll brought only errors, nil once one
	// brings records or a partition answers: what Healthy says.
	problem atomic.Pointer[pollError]

	running   atomic.Bool
	runSince  atomic.Int64  // when Run began (unix nanoseconds): how long a join has waited
	join      joinWatch     // a JoinGroup in flight, and since when
	again     madeAgain     // topics re-added, whose partitions start from their start (Run's own)
	lag       lagBook       // records each partition held past what was read
	stop      chan struct{} // closed by Close: Run returns
	runDone   chan struct{} // closed when Run returned
	closeOnce sync.Once
}

// OpenSource builds the consumer of inbox in on the cluster of kcfg. Like
// Open it does not wait for the cluster; consuming starts with Run. kept
// (nil: none) says where the inbox got to in a partition its group has no
// offset for.
func OpenSource(ctx context.Context, kcfg config.Kafka, in config.Inbox, logger hclog.Logger, kept switchyard.KeptReads) (*Source, error) {
	return openSource(ctx, kcfg, in, logger, kept)
}

// openSource is OpenSource with extra kgo options on top (tests shorten
// group timings).
func openSource(_ context.Context, kcfg config.Kafka, in config.Inbox, logger hclog.Logger, kept switchyard.KeptReads, extra ...kgo.Opt) (*Source, error) {
	if err := resolved(kcfg); err != nil {
		return nil, fmt.Errorf("inbox %q: %w", in.Name, err)
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	sink := kcfg.SinkName()
	if len(in.Topics) == 0 {
		return nil, fmt.Errorf("inbox %q: no topics to consume from %s", in.Name, sink)
	}
	if in.Group == "" || in.IDHeader == "" || in.Policy.BatchSize <= 0 {
		return nil, fmt.Errorf("inbox %q: group %q, id_header %q, batch_size %d: the block is not resolved (config.NewInbox sets them)",
			in.Name, in.Group, in.IDHeader, in.Policy.BatchSize)
	}
	s := &Source{
		name:     in.Name,
		sink:     sink,
		log:      logger.Named("inbox." + in.Name),
		topics:   slices.Clone(in.Topics),
		group:    in.Group,
		batch:    in.Policy.BatchSize,
		warned:   make(map[string]struct{}),
		ids:      make(map[string][16]byte),
		idsAsk:   make(map[string]time.Time),
		readOnAt: make(map[topicPartition]int64),
		kept:     kept,
		clSet:    make(chan struct{}),
		ttl:      in.TTL,
		stop:     make(chan struct{}),
		runDone:  make(chan struct{}),
	}
	s.decoder = engine.InboundDecoder{Binding: cloudevents.Kafka, IDHeader: in.IDHeader, Log: s.log, Noun: "record"}
	opts, err := ClientOptions(kcfg, s.log)
	if err != nil {
		return nil, fmt.Errorf("inbox %q: %w", in.Name, err)
	}
	s.conn = newConnState(s.log, kcfg.SASL != nil) // why a broker cannot be reached, logged once: a refused credential, say
	opts = append(append(opts, s.groupOptions(in)...), append(extra, kgo.WithHooks(s.conn, &s.join))...)
	if s.cl, err = kgo.NewClient(opts...); err != nil {
		return nil, fmt.Errorf("inbox %q: %s: %w", in.Name, sink, err)
	}
	close(s.clSet)
	return s, nil
}

// groupOptions are the consumer group's options: offsets committed only by
// the source after a stored batch, from the start of a new group, and the
// group's changes logged.
func (s *Source) groupOptions(in config.Inbox) []kgo.Opt {
	var opts []kgo.Opt
	if in.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(in.InstanceID))
	}
	if in.ReadCommitted {
		// Records of aborted transactions never reach the inbox. Off by
		// default, as in Kafka's own consumer: see RATIONALE.md.
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	if in.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(in.SessionTimeout))
	}
	return append(opts,
		kgo.ConsumerGroup(s.group),
		kgo.ConsumeTopics(in.Topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnOffsetsFetched(s.offsetsFetched), // offsetmark.go
		kgo.AdjustFetchOffsetsFn(s.readOn),     // keptread.go
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			s.log.Info("partitions assigned", "group", s.group, "partitions", fmtPartitions(m))
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			s.lag.drop(m)
			s.dropReadOn(m)
			if len(m) > 0 {
				s.log.Info("partitions revoked", "group", s.group, "partitions", fmtPartitions(m))
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			s.lag.drop(m)
			s.dropReadOn(m)
			if len(m) > 0 {
				s.log.Warn("partitions lost (records received since the last commit come again)", "group", s.group, "partitions", fmtPartitions(m))
			}
		}),
	)
}

// Name is the inbox's name.
func (s *Source) Name() string { return s.name }

// Run consumes until ctx ends (or Close is called), then returns nil. It
// returns an error only when called twice.
func (s *Source) Run(ctx context.Context, receive func(ctx context.Context, msgs []switchyard.Inbound) error) error {
	if !s.running.CompareAndSwap(false, true) {
		return fmt.Errorf("inbox %q: Run called twice", s.name)
	}
	s.runSince.Store(time.Now().UnixNano())
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
	go s.checkRetentionLoop(ctx)

	pause := time.Duration(0)
	lastErr := map[string]time.Time{}
	for ctx.Err() == nil {
		fetches := s.cl.PollRecords(ctx, s.batch)
		if fetches.IsClientClosed() {
			s.cl.AllowRebalance()
			return nil
		}
		// Before fetchErrors, which may re-add a topic: the records of the
		// poll that re-adds it are the old topic's (a review lost them).
		back := s.again.fromStart(s.cl, fetches, time.Now())
		polled, failed := s.fetchErrors(ctx, fetches, lastErr)
		s.polled(fetches, polled, failed)
		s.noteTopicIDs(ctx, fetches)
		s.commitReadOn(ctx)
		recs := fetches.Records()
		if len(back) > 0 {
			s.log.Warn("a topic made again was to be read from past its start (an offset the old topic's consumer committed by name): reading it from its start", "partitions", len(back))
			recs = without(recs, back)
		}
		if len(recs) == 0 {
			s.cl.AllowRebalance()
			if failed && !polled {
				backoff.Sleep(ctx, fetchErrorPause)
			}
			continue
		}
		err := s.handle(ctx, recs, receive)
		s.lag.note(fetches, err != nil)
		if err != nil {
			pause = receiveBackoff.Next(pause)
			s.log.Warn("inbox could not take the batch; not committed, reading it again after a pause",
				"records", len(recs), "retry_in", pause, "error", err)
			backoff.Sleep(ctx, pause)
			continue
		}
		pause = 0
	}
	return nil
}

// pollError is the first error of a poll that brought only errors, and
// when it came.
type pollError struct {
	err error
	at  time.Time
}

// pollErrorFresh is how long Healthy reports a poll's errors: a poll that
// fails is tried again after fetchErrorPause, so an error older than this
// has not come again, although an idle consumer may not have polled
// anything since.
const pollErrorFresh = 10 * time.Second

// polled records, for Healthy, whether a poll brought only errors: the
// first of them, or nil once a partition answers.
func (s *Source) polled(fetches kgo.Fetches, answered, failed bool) {
	switch {
	case answered || len(fetches.Records()) > 0:
		s.problem.Store(nil)
	case failed:
		var err error
		fetches.EachError(func(t string, p int32, e error) {
			if err == nil {
				err = fmt.Errorf("%s: %w", s.fetchPlace(t, p), e)
			}
		})
		s.problem.Store(&pollError{err, time.Now()})
	}
}

// Healthy says whether the inbox consumes: no poll brought only errors
// lately, and a broker answers (anyBrokerAnswers, within ctx: /readyz
// gives a second).
func (s *Source) Healthy(ctx context.Context) error {
	if p := s.problem.Load(); p != nil && time.Since(p.at) < pollErrorFresh {
		return fmt.Errorf("inbox %q: %s: %w", s.name, s.sink, p.err)
	}
	if err := anyBrokerAnswers(ctx, s.cl); err != nil {
		if why := s.conn.lastError(); why != nil {
			err = why // the connection's own failure: EOF alone hid a refused credential (a Kafka trial)
		}
		return fmt.Errorf("inbox %q: %s: no broker reachable: %w", s.name, s.sink, err)
	}
	if s.running.Load() && !s.joined() {
		// Its brokers answer, but it reads nothing yet (an adversarial
		// trial: after a SIGKILL, /readyz said ok for the 45 s the group
		// waited for the member that stopped).
		since := time.Since(time.Unix(0, s.runSince.Load())).Round(time.Second)
		return fmt.Errorf("inbox %q: %s: not in group %q yet (joining for %s): it reads nothing until the group takes it in; after an unclean stop the group first waits session_timeout for the member that stopped (instance_id avoids that wait)", s.name, s.sink, s.group, since)
	}
	if d := s.join.waiting(); d > 0 {
		return fmt.Errorf("inbox %q: %s: joining group %q again for %s: it reads only the partitions it kept until the rebalance ends; the group waits for every member, and one that stopped without leaving (a router killed) until its session_timeout, holding its partitions (instance_id avoids that wait)", s.name, s.sink, s.group, d.Round(time.Second))
	}
	return nil
}

// handle receives one polled batch and commits it, or rewinds. It always
// allows the blocked rebalance before it returns.
func (s *Source) handle(ctx context.Context, recs []*kgo.Record, receive func(context.Context, []switchyard.Inbound) error) error {
	defer s.cl.AllowRebalance()
	msgs := make([]switchyard.Inbound, len(recs))
	for i, r := range recs {
		msgs[i] = s.decode(r)
	}
	if err := receive(ctx, msgs); err != nil {
		s.rewind(recs)
		return err
	}
	// Stored: commit even if the router is shutting down right now, so
	// the batch is not consumed again after the restart.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	if err := s.cl.CommitRecords(markCommits(cctx), recs...); err != nil {
		// The batch is stored; it will be consumed again (here or by
		// another member) and the inbox drops it then.
		s.log.Warn("offset commit failed; the stored batch will be redelivered and dropped as duplicates",
			"records", len(recs), "error", err)
	}
	return nil
}

// rewind sets the fetch position of every partition in recs back to its
// first record in recs, so the next poll returns them again.
func (s *Source) rewind(recs []*kgo.Record) {
	to := map[string]map[int32]kgo.EpochOffset{}
	for _, r := range recs {
		ps := to[r.Topic]
		if ps == nil {
			ps = map[int32]kgo.EpochOffset{}
			to[r.Topic] = ps
		}
		if at, ok := ps[r.Partition]; !ok || r.Offset < at.Offset {
			ps[r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset}
		}
	}
	s.cl.SetOffsets(to)
}

// decode maps a record onto an Inbound by the CloudEvents Kafka binding. A
// record key becomes the partitionkey extension unless a ce_partitionkey
// header says otherwise.
func (s *Source) decode(r *kgo.Record) switchyard.Inbound {
	hs := make([]switchyard.Header, 0, len(r.Headers)+1)
	hasKey := false
	for _, h := range r.Headers {
		hs = append(hs, switchyard.Header{Name: h.Key, Value: string(h.Value)})
		if strings.EqualFold(h.Key, cloudevents.Kafka.Prefix()+"partitionkey") {
			hasKey = true
		}
	}
	if !hasKey && len(r.Key) > 0 {
		hs = append(hs, switchyard.Header{Name: cloudevents.Kafka.Prefix() + "partitionkey", Value: string(r.Key)})
	}
	origin := s.sink + ":" + r.Topic + "/" + strconv.FormatInt(int64(r.Partition), 10) + "@" + strconv.FormatInt(r.Offset, 10)
	m := s.decoder.Decode(hs, r.Value, origin)
	m.Read = switchyard.Read{Topic: r.Topic, Partition: r.Partition, Next: r.Offset + 1, ID: s.ids[r.Topic]}
	return m
}

// noteTopicIDs keeps the topics' ids a poll gave. A fetch gives them
// from Kafka 3.1 (Fetch v13); for a topic whose records came without one
// the cluster's metadata is asked, at most a minute apart (Kafka 2.8–3.0
// gives ids there only; before 2.8 none: they stay zero, and a group that
// lost its offsets reads from the start).
func (s *Source) noteTopicIDs(ctx context.Context, fetches kgo.Fetches) {
	var ask []string
	for _, f := range fetches {
		for _, t := range f.Topics {
			switch {
			case t.TopicID != ([16]byte{}):
				s.ids[t.Topic] = t.TopicID
			case s.ids[t.Topic] == ([16]byte{}) && len(t.Partitions) > 0 && time.Since(s.idsAsk[t.Topic]) >= time.Minute && !slices.Contains(ask, t.Topic):
				ask = append(ask, t.Topic)
			}
		}
	}
	if len(ask) == 0 {
		return
	}
	for _, topic := range ask {
		s.idsAsk[topic] = time.Now()
	}
	mctx, cancel := context.WithTimeout(ctx, retentionCheckTimeout)
	defer cancel()
	if ids, err := s.topicIDsNow(mctx, ask); err == nil {
		for topic, id := range ids {
			if id != ([16]byte{}) {
				s.ids[topic] = id
			}
		}
	}
}

// fetchErrors logs the errors of a poll (each distinct one at most every
// errorLogEvery). polled says whether any partition answered without error.
func (s *Source) fetchErrors(ctx context.Context, fs kgo.Fetches, last map[string]time.Time) (polled, failed bool) {
	for _, f := range fs {
		for _, t := range f.Topics {
			for _, p := range t.Partitions {
				if p.Err == nil {
					polled = true
					continue
				}
				if ctx.Err() != nil && (errors.Is(p.Err, context.Canceled) || errors.Is(p.Err, context.DeadlineExceeded)) {
					continue
				}
				failed = true
				if errors.Is(p.Err, kerr.UnknownTopicID) {
					s.readd(t.Topic, t.TopicID, last)
				}
				key := t.Topic + "/" + p.Err.Error()
				if now := time.Now(); now.Sub(last[key]) >= errorLogEvery {
					last[key] = now
					s.log.Warn("fetch error", "at", s.fetchPlace(t.Topic, p.Partition), "error", p.Err)
				}
			}
		}
	}
	return polled, failed
}

// fetchPlace names where a poll error came from: a topic's partition, or,
// for an error that names no topic (franz-go reports a failed group join
// so), the consumer group.
func (s *Source) fetchPlace(topic string, partition int32) string {
	if topic == "" {
		return fmt.Sprintf("consumer group %q", s.group)
	}
	return fmt.Sprintf("fetching %s/%d", topic, partition)
}

// readd purges topic from consuming and adds it again, at most every
// readdEvery: a topic deleted and made again has a new id, and franz-go
// fetches by the old one (UNKNOWN_TOPIC_ID) until the topic is purged and
// added back, its documented way. Before, an inbox never read a topic made
// again until the router restarted (a broker trial). In a group this
// rebalances; the offsets the group committed for the old topic are no
// longer there, so it starts where ConsumeResetOffset says. Its warning is
// said at most every errorLogEvery: that throttle was the re-add's too, and
// a topic made again a second time within 30 s went unread for the rest
// of them (a trial).
func (s *Source) readd(topic string, oldID [16]byte, last map[string]time.Time) {
	key, now := "readd/"+topic, time.Now()
	if now.Sub(last[key]) < readdEvery {
		return
	}
	last[key] = now
	if said := "readd-said/" + topic; now.Sub(last[said]) >= errorLogEvery {
		last[said] = now
		s.log.Warn("the topic was deleted and made again: consuming it anew", "topic", topic)
	}
	s.again.add(topic, oldID, now)
	s.cl.PurgeTopicsFromConsuming(topic)
	s.cl.AddConsumeTopics(topic)
}

// readdEvery is how often a topic's fetches failing by its old id re-add
// it: long enough for the client to rebalance onto the new topic (about a
// second, seen) before the errors of fetches already in flight could
// re-add it again.
const readdEvery = 3 * time.Second

// Warnings returns the startup warnings found so far: a dedup window
// shorter than a topic's retention, a topic that does not exist. The check
// runs when Run starts (and again every 30s until it could reach the
// cluster); each warning is also logged once.
func (s *Source) Warnings() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.warnings)
}

func (s *Source) checkRetentionLoop(ctx context.Context) {
	for {
		cctx, cancel := context.WithTimeout(ctx, retentionCheckTimeout)
		warnings, err := s.CheckRetention(cctx)
		cancel()
		if err == nil {
			s.mu.Lock()
			s.warnings = warnings
			s.mu.Unlock()
			for _, w := range warnings {
				s.log.Warn(w)
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		s.log.Debug("cannot check topic retention yet", "error", err)
		if !backoff.Sleep(ctx, retentionRetry) {
			return
		}
	}
}

// CheckRetention compares the inbox's dedup window (ttl) with the
// retention of every topic it consumes (DescribeConfigs: retention.ms and
// cleanup.policy). A topic that keeps records longer than the window gets
// a warning: a redelivery of a record older than the window (a group reset
// to the earliest offset, a restart after a long outage) would not be
// recognised as a duplicate. A missing topic gets one too. The error is
// for a cluster that could not be asked.
func (s *Source) CheckRetention(ctx context.Context) ([]string, error) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	for _, t := range s.topics {
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType = kmsg.ConfigResourceTypeTopic
		r.ResourceName = t
		r.ConfigNames = []string{"retention.ms", "cleanup.policy"}
		req.Resources = append(req.Resources, r)
	}
	resp, err := req.RequestWith(ctx, s.cl)
	if err != nil {
		return nil, fmt.Errorf("inbox %q: describe topic configs: %w", s.name, err)
	}
	var out []string
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				out = append(out, fmt.Sprintf("inbox %q: topic %q does not exist on %s (yet); consuming starts once it does", s.name, r.ResourceName, s.sink))
			} else {
				out = append(out, fmt.Sprintf("inbox %q: cannot read the configuration of topic %q: %v", s.name, r.ResourceName, err))
			}
			continue
		}
		var retention, policy string
		for _, c := range r.Configs {
			if c.Value == nil {
				continue
			}
			switch c.Name {
			case "retention.ms":
				retention = *c.Value
			case "cleanup.policy":
				policy = *c.Value
			}
		}
		if w := s.retentionWarning(r.ResourceName, retention, policy); w != "" {
			out = append(out, w)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (s *Source) retentionWarning(topic, retention, policy string) string {
	consequence := "a redelivery of a record older than the window (a group reset to the earliest offset, a restart after a long outage) would not be recognised as a duplicate"
	if s.ttl <= 0 {
		return ""
	}
	if policy != "" && !strings.Contains(policy, "delete") {
		return fmt.Sprintf("inbox %q: topic %q is compacted (cleanup.policy=%s) and keeps records indefinitely, longer than the dedup window (ttl %s): %s",
			s.name, topic, policy, s.ttl, consequence)
	}
	ms, err := strconv.ParseInt(retention, 10, 64)
	if err != nil {
		return ""
	}
	if ms < 0 {
		return fmt.Sprintf("inbox %q: topic %q keeps records forever (retention.ms=-1), longer than the dedup window (ttl %s): %s",
			s.name, topic, s.ttl, consequence)
	}
	if d := time.Duration(ms) * time.Millisecond; d > s.ttl {
		return fmt.Sprintf("inbox %q: the dedup window (ttl %s) is shorter than the retention of topic %q (%s): %s",
			s.name, s.ttl, topic, d, consequence)
	}
	return ""
}

// Close stops Run (waiting for it, at most until ctx ends), leaves the
// group and closes the client. Waiting for Run gets until ctx ends or
// leaveGrace, whichever is later; the leave gets leaveTime: a Run held
// past the stop's time (a receive or a commit that does not return) does
// not spend the leave's, and Close returns once the member has left, not
// with the leave still on its way. A leave its coordinator does not answer
// in that time is given up (logged, not an error: the group hands the
// partitions on after its session timeout), so that it does not spend the
// stop's time the engine's loops need to record their acknowledgements (a
// Kafka trial: the whole 30 s, exit 1). The batch Run was receiving, if
// any, is not committed unless receive returned before.
func (s *Source) Close(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		close(s.stop)
		err = s.awaitRun(ctx)
		if err != nil {
			s.cl.AllowRebalance() // Run holds the poll's block on rebalances, which the leave waits for
		}
		if !s.joined() {
			s.closeJoining()
			return
		}
		if lerr := s.leave(leaveTime(ctx)); lerr != nil && err == nil {
			err = lerr
		}
	})
	return err
}

// leaveTime is how long a leave may take within the stop's time ctx
// leaves: a tenth of it, at least leaveGrace and at most maxLeave (a
// coordinator reached again over TLS and SASL on a slow link takes more
// than a second; the stop's other steps need the rest).
func leaveTime(ctx context.Context) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return maxLeave
	}
	return max(leaveGrace, min(time.Until(dl)/10, maxLeave))
}

// maxLeave is the most a leave may take (leaveTime).
const maxLeave = 5 * time.Second

// leave leaves the group, given d, and closes the client, given
// leaveGrace; a leave without an answer by then is logged and left
// behind, the client closing in the background.
func (s *Source) leave(d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	lerr := s.cl.LeaveGroupContext(ctx)
	switch {
	case errors.Is(lerr, context.DeadlineExceeded):
		s.log.Warn("no answer to the leave in time (the coordinator may still take it): at the latest, the group hands this member's partitions on after its session timeout", "group", s.group, "waited", d)
		s.closeJoining()
		return nil
	case lerr != nil && !errors.Is(lerr, kgo.ErrClientClosed):
		lerr = fmt.Errorf("inbox %q: leave group %q: %w", s.name, s.group, lerr)
	default:
		lerr = nil
	}
	cctx, ccancel := context.WithTimeout(context.Background(), leaveGrace)
	defer ccancel()
	if cerr := s.closeClient(cctx); lerr == nil {
		lerr = cerr
	}
	return lerr
}

// joined reports whether the group has taken the member in: it has a
// generation. Until then it reads nothing.
func (s *Source) joined() bool {
	_, gen := s.cl.GroupMetadata()
	return gen >= 0
}

// closeJoining closes the client of a member its group has not taken in
// yet (after an unclean stop the group waits session_timeout for the
// member that stopped, 45 s by default): it has nothing to hand on, and
// franz-go's close waits for the join to end, so it is given leaveGrace
// and then left to finish in the background. Before, a stop then took
// the whole shutdown timeout and exited 1 (an adversarial trial: 30 s,
// "leave group: context deadline exceeded"). leave closes so a member
// whose coordinator did not answer its leave.
func (s *Source) closeJoining() {
	ctx, cancel := context.WithTimeout(context.Background(), leaveGrace)
	defer cancel()
	if err := s.closeClient(ctx); err != nil {
		s.log.Debug("the client did not close in time: it closes in the background", "group", s.group, "waited", leaveGrace)
	}
}

// awaitRun waits for Run to return, until ctx ends or leaveGrace, whichever
// is later.
func (s *Source) awaitRun(ctx context.Context) error {
	if !s.running.Load() {
		return nil
	}
	ctx, cancel := grace.AtLeast(ctx, leaveGrace)
	defer cancel()
	select {
	case <-s.runDone:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("inbox %q: consumer still receiving when the close deadline passed: %w", s.name, ctx.Err())
	}
}

// closeClient closes the client, waiting at most until ctx ends. franz-go's
// Close waits for the group's loop, and a JoinGroup in flight to a
// coordinator that went dark holds the loop for the rebalance timeout (a
// minute): before, the router's shutdown waited that long. The client then
// closes in the background.
func (s *Source) closeClient(ctx context.Context) error {
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		s.cl.CloseAllowingRebalance()
	}()
	select {
	case <-closed:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("inbox %q: the Kafka client had not closed when the close deadline passed (a request to a broker that does not answer in flight); it closes in the background: %w", s.name, ctx.Err())
	}
}

func fmtPartitions(m map[string][]int32) string {
	var b strings.Builder
	for _, t := range slices.Sorted(maps.Keys(m)) {
		ps := slices.Clone(m[t])
		slices.Sort(ps)
		if b.Len() > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s%v", t, ps)
	}
	return b.String()
}
