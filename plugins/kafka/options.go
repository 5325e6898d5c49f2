package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	kgo "github.com/twmb/franz-go/pkg/kgo"
	ksasl "github.com/twmb/franz-go/pkg/sasl"
	ksaslplain "github.com/twmb/franz-go/pkg/sasl/plain"
	ksaslscram "github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/switchyard-router/switchyard/config"
)

// resolved refuses a block config's resolved form would never give:
// Open and OpenSource default nothing (config.NewKafka and config.Load set
// every default).
func resolved(cfg config.Kafka) error {
	if cfg.ClientID == "" || cfg.MaxRecordBytes <= 0 || cfg.PublishTimeout <= 0 || cfg.Compression == "" {
		return fmt.Errorf("kafka %q: client_id %q, max_record_bytes %d, publish_timeout %s, compression %q: the block is not resolved (config.NewKafka sets them)",
			cfg.Name, cfg.ClientID, cfg.MaxRecordBytes, cfg.PublishTimeout, cfg.Compression)
	}
	return nil
}

// ClientOptions returns the connection options of a kafka block: brokers,
// client id, TLS, SASL and the logger. They are shared by anything in the
// router that talks to this cluster (the sink here, an inbox consumer).
func ClientOptions(cfg config.Kafka, logger hclog.Logger) ([]kgo.Opt, error) {
	if len(cfg.Brokers) == 0 {
		return nil, fmt.Errorf("kafka %q: no brokers", cfg.Name)
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.WithLogger(newKgoLogger(logger)),
		// A cluster that comes back (or comes up after the router) is
		// found within about a second: kgo refreshes metadata at most
		// every MetadataMinAge (5 s by default) and backs retries off up
		// to 2.5 s. At most one metadata request a second while the
		// cluster is away is the cost.
		kgo.MetadataMinAge(time.Second),
		// Partitions added to a topic are seen at the next refresh:
		// franz-go's own default is 5 minutes, and an inbox left the
		// records of added partitions unread that long while it said it
		// was healthy (a trial); a sink spreads records over them as
		// soon. A metadata request every 10 s per client (sink, inbox) is
		// the cost.
		kgo.MetadataMaxAge(10 * time.Second),
		kgo.RetryBackoffFn(func(tries int) time.Duration {
			return min(100*time.Millisecond<<min(tries, 4), time.Second)
		}),
	}
	var ct *config.ClientTLS
	if cfg.TLS != nil {
		var err error
		if ct, err = cfg.TLS.ClientConfig(config.FileWarning(logger.Warn, cfg.SinkName())); err != nil {
			return nil, fmt.Errorf("kafka %q: tls: %w", cfg.Name, err)
		}
	}
	opts = append(opts, kgo.Dialer(dialer(dialTimeout(cfg), ct)))
	if cfg.SASL != nil {
		m, err := saslMechanism(cfg.SASL, config.FileWarning(logger.Warn, cfg.SinkName()))
		if err != nil {
			return nil, fmt.Errorf("kafka %q: sasl: %w", cfg.Name, err)
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// producerOptions are the sink's producer settings on top of ClientOptions.
func producerOptions(cfg config.Kafka) ([]kgo.Opt, error) {
	codec, err := compression(cfg.Compression)
	if err != nil {
		return nil, fmt.Errorf("kafka %q: %w", cfg.Name, err)
	}
	if cfg.MaxRecordBytes < 512 || cfg.MaxRecordBytes > 1<<30 {
		return nil, fmt.Errorf("kafka %q: max_record_bytes %d out of range [512, 1GiB]", cfg.Name, cfg.MaxRecordBytes)
	}
	opts := []kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(codec),
		// franz-go lingers 10ms by default; the config's default is 0
		// (the engine already hands us whole batches).
		kgo.ProducerLinger(cfg.Linger),
		kgo.ProducerBatchMaxBytes(int32(cfg.MaxRecordBytes)),
		// A produce to a missing topic must fail, not create it: the
		// client never asks for auto-creation (kgo's default), and we
		// check topics ourselves before producing (see topics.go).
	}
	if cfg.MaxRecordBytes > 100<<20 {
		// kgo refuses a batch limit above its broker write limit.
		opts = append(opts, kgo.BrokerMaxWriteBytes(int32(cfg.MaxRecordBytes)+1<<20))
	}
	if cfg.Idempotent {
		// See RATIONALE.md, "Why AllowIdempotentProduceCancellation":
		// without it an in-flight idempotent batch cannot be failed
		// until the broker answers, so one broker that never answers
		// wedges every later record of that partition behind it.
		opts = append(opts, kgo.AllowIdempotentProduceCancellation())
	} else {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	return opts, nil
}

func compression(name string) (kgo.CompressionCodec, error) {
	switch strings.ToLower(name) {
	case "", "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("unknown compression %q (want none, gzip, snappy, lz4 or zstd)", name)
}

// saslMechanism is the sasl block's mechanism, its password read again at
// each authentication (config.Secret.Rereading): a password corrected or
// rotated in its file is used at the next connection, with no restart.
func saslMechanism(s *config.SASL, warn func(error)) (ksasl.Mechanism, error) {
	pass, err := s.Password.Rereading(warn)
	if err != nil {
		return nil, fmt.Errorf("password: %w", err)
	}
	plain := func(context.Context) (ksaslplain.Auth, error) {
		return ksaslplain.Auth{User: s.Username, Pass: pass()}, nil
	}
	scram := func(context.Context) (ksaslscram.Auth, error) {
		return ksaslscram.Auth{User: s.Username, Pass: pass()}, nil
	}
	switch strings.ToUpper(s.Mechanism) {
	case "PLAIN":
		return ksaslplain.Plain(plain), nil
	case "SCRAM-SHA-256":
		return ksaslscram.Sha256(scram), nil
	case "SCRAM-SHA-512":
		return ksaslscram.Sha512(scram), nil
	}
	return nil, fmt.Errorf("unknown mechanism %q (want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", s.Mechanism)
}

// dialTimeout bounds one dial to a broker (TCP, and TLS when configured):
// half the publish timeout, within 2 s and franz-go's default of 10 s. A
// broker, or a network, that drops packets answers no dial: it must fail
// within a publish, so that the cluster counts as down (connState) and the
// publishes after it are answered at once instead of each waiting its
// timeout; a dial that takes longer would leave a publish no time to
// produce anyway. At least 2 s: Linux sends a lost SYN again after 1 s,
// and one lost packet on an edge link is not a broker gone. An unresolved
// block (no publish timeout) dials as franz-go would.
func dialTimeout(cfg config.Kafka) time.Duration {
	if cfg.PublishTimeout <= 0 {
		return 10 * time.Second
	}
	return min(max(cfg.PublishTimeout/2, 2*time.Second), 10*time.Second)
}

// dialer is the client's dial function: franz-go's own (a net.Dialer with
// timeout, wrapped in TLS when ct is set, its server name the broker's
// host), except that a dial that failed because its
// caller's context ended says so (errGaveUp). Only here is that known: a
// dial's own timeout and its caller's deadline are the same error by the
// time kgo reports the dial (OnBrokerConnect), and only the first says
// something about the broker.
func dialer(timeout time.Duration, ct *config.ClientTLS) func(ctx context.Context, network, host string) (net.Conn, error) {
	nd := &net.Dialer{Timeout: timeout}
	dial := nd.DialContext
	if ct != nil {
		dial = func(ctx context.Context, network, host string) (net.Conn, error) {
			c := ct.Config() // the files as they are now: a renewed CA file is trusted
			if c.ServerName == "" {
				server, _, err := net.SplitHostPort(host)
				if err != nil {
					return nil, fmt.Errorf("unable to split host:port for dialing: %w", err)
				}
				c.ServerName = server
			}
			return (&tls.Dialer{NetDialer: nd, Config: c}).DialContext(ctx, network, host)
		}
	}
	return func(ctx context.Context, network, host string) (net.Conn, error) {
		own := time.Now().Add(timeout)
		conn, err := dial(ctx, network, host)
		if err != nil && callerEnded(ctx, err, own) {
			err = &errGaveUp{err}
		}
		return conn, err
	}
}

// callerEnded reports whether a dial failed because its caller's context
// ended, not by itself: the context is done, or the dial timed out at a
// caller's deadline that came before its own (own). The second is not
// seen in ctx.Err alone: the dial's context and its caller's expire on
// timers of their own, and the dial's may fire first.
func callerEnded(ctx context.Context, err error, own time.Time) bool {
	if ctx.Err() != nil {
		return true
	}
	var ne net.Error
	dl, ok := ctx.Deadline()
	return ok && dl.Before(own) && errors.As(err, &ne) && ne.Timeout()
}

// errGaveUp is a dial cut short by its caller (a probe that had its
// answer, a request whose deadline passed, the client closing). It unwraps
// to the dial's error, so franz-go classifies it as before.
type errGaveUp struct{ err error }

func (e *errGaveUp) Error() string { return e.err.Error() }
func (e *errGaveUp) Unwrap() error { return e.err }
