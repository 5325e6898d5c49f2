package kafka

import (
	"fmt"
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
		kgo.RetryBackoffFn(func(tries int) time.Duration {
			return min(100*time.Millisecond<<min(tries, 4), time.Second)
		}),
	}
	if cfg.TLS != nil {
		tc, err := cfg.TLS.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("kafka %q: tls: %w", cfg.Name, err)
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if cfg.SASL != nil {
		m, err := saslMechanism(cfg.SASL)
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

func saslMechanism(s *config.SASL) (ksasl.Mechanism, error) {
	pass, err := s.Password.Read()
	if err != nil {
		return nil, fmt.Errorf("password: %w", err)
	}
	switch strings.ToUpper(s.Mechanism) {
	case "PLAIN":
		return ksaslplain.Auth{User: s.Username, Pass: pass}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return ksaslscram.Auth{User: s.Username, Pass: pass}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return ksaslscram.Auth{User: s.Username, Pass: pass}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("unknown mechanism %q (want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", s.Mechanism)
}
