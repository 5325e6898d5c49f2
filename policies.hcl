# Switchyard configuration.
#
# This file runs as is: an embedded NATS server, one demo event type, and
# every setting at its built-in default (but the demo type's polling min). Edit it to taste; everything you
# leave out keeps the value shown here.
#
# Durations are strings with a unit: "250ms", "10s", "1m", "24h".
# Sizes are strings too: "512KiB", "1MiB", "16MiB", "1GB", or whole bytes.
# Relative paths are relative to the directory the router runs in.
# Errors name the file, line and column: the router refuses to start on a
# config it does not understand rather than guess.

# ---------------------------------------------------------------------------
# Where local services reach the router.
listen {
  # The HTTP API on a unix socket (created 0660), in a directory of the
  # router's user's that others may not write to; its path at most 107
  # bytes, as the kernel takes it.
  socket = "./data/router.sock"

  # The socket is trusted by its file mode: whoever can connect acts for the
  # tenant of its X-Tenant header and may use the admin routes (DLQ, stats,
  # metrics). Under systemd the socket unit passes it (docs/systemd/).

  # An optional TCP listener, off by default. When on, every request but
  # GET /healthz and the console's files (/ui/) needs "Authorization: Bearer
  # <token>" with a token from tokens_file; the token decides the tenant
  # (X-Tenant is ignored on TCP), and only admin tokens reach the DLQ, stats
  # and metrics. Tokens travel in clear text: keep it on loopback or put TLS
  # in front.
  # http        = "127.0.0.1:8080"
  #
  # tokens_file is JSON, mode 0600 and the router's user's, or root's with
  # mode 0640 (a file others may read, or another user's, is refused);
  # tokens of 16 characters or more, or their
  # SHA-256 digest in hex instead of the token itself:
  #   {"tokens": [
  #     {"token": "a-long-random-secret-for-acme", "tenant": "acme"},
  #     {"sha256": "9f86d081884c7d65...", "tenant": "ops", "admin": true}
  #   ]}
  # (a token's digest: printf %s 'the-token' | sha256sum; echo would add a
  # newline to what is hashed)
  # tokens_file = "./tokens.json"

  # pprof = "127.0.0.1:6060" # Go's CPU and heap profiles, for performance work;
  #                           # loopback only, and without authentication

  max_body  = "1MiB" # largest request body (at most 256MiB)
  max_batch = 1000   # most events in one batch request

  # The TCP listener holds at most max_connections open connections (past
  # them a new client takes the place of the connection idle the longest,
  # a new one that sent no whole request within a second counting as idle,
  # and a request with a body but no valid token is answered 401 at once
  # and its connection closed; while all are mid-request, it waits in the kernel's
  # backlog, costing the router nothing), so a flood of
  # clients cannot take the file descriptors the socket, the data file and
  # the brokers need; the unix socket is not counted. Every request on
  # either must arrive whole within read_timeout (a late body: 408
  # request_timeout, nothing stored); its headers within 10 s (or
  # read_timeout, if shorter), or the connection is closed. Each write of
  # its answer must be taken within read_timeout too (the router's own work,
  # a commit or a long poll, not counted; a stream such as /v1/tail lives as
  # long as its client reads), or the connection is closed: a client that
  # sends and never reads holds its place no longer. Where the tokens
  # name two tenants or more, a tenant holds at most half of the places
  # with requests in progress, its next request 429 at once
  # (docs/decisions/tenant-rate.md, "Places on the listener").
  max_connections = 512
  read_timeout    = "30s"
}

# How fast a tenant's tokens on the TCP listener may store events (and new
# claims, one event each): a token bucket of burst events, filled at rate
# events a second. A request past it is refused whole, nothing stored: 429
# rate_limited with Retry-After (the wait until the bucket holds its
# events; with the bucket empty the request is refused before its body is
# read, and the wait is the one for a first event), or 413
# payload_too_large for more events than burst. Every event of a request
# answered 202 counts, a resend's too; the socket and admin tokens are not
# held to it. "*" gives
# every tenant without a block of its own a bucket of its own. Without
# tenant blocks, tenants are not bounded (docs/decisions/tenant-rate.md).
# tenant "acme" {
#   rate  = 500  # events a second
#   burst = 2000 # events at once; default the larger of rate and max_batch
# }
# tenant "*" {
#   rate = 200
# }

# The single data file: outbox, inbox, DLQ and idempotency records.
storage {
  path = "./data/router.db"
  # A budget for the data file, so that a long broker outage fills it, not
  # the node's disk. Past max_size (the pages that hold data) or under
  # min_free (left on the disk, counting the file's own free pages, as
  # the file never shrinks, and the reserve below), ingest answers 507
  # storage_full with Retry-After and stores nothing, as do new claims, claim results over
  # 4 KiB and plugin state writes that grow it (the event waits); an
  # inbox takes no message (unacknowledged, they wait in the broker);
  # delivery and the DLQ go on, delivered records are removed before their
  # outbox ttl to make room, and ingest resumes as the backlog drains.
  # Measured every 250 ms, and each request in between against the pages
  # in use after the last commit: a burst passes the budget by the requests
  # in flight at most. Under min_free delivery waits once the room left outside
  # the reserve is down to a quarter of min_free (at most 16 MiB), the
  # reserve's size: the router holds that much in
  # router.db.reserve beside the file, which it gives up when the disk is
  # full so that delivery and the cleanup go on (docs/decisions/disk-full.md).
  # min_free counts the free bytes the filesystem reports: a project quota
  # shows in them, a user's quota does not (set max_size below it).
  # /v1/stats and the switchyard_storage_* metrics show used, budget, free,
  # reusable and reserve.
  # max_size = "2GiB"     # default: none
  # min_free = "64MiB"    # the default; at least 1MiB
  # Every commit costs two fdatasyncs (~110 µs of CPU on a small VM). At a
  # moderate rate a commit holds only a few requests; commit_delay makes a
  # commit of fewer than 16 writes wait that long for more (requests, and
  # the loops' delivery outcomes and the cleanup, which wait it too). At 5k
  # single events/s, "1ms" halved the router's CPU per event and added
  # ~1.2 ms to the median end-to-end latency; at full load with 64 clients
  # it changed nothing. Not for a few clients
  # sending large batches: with 16 clients of 100 events the wait cost
  # 10-20% of the events/s (BENCHMARKS.md, issue 14, session 11). Up to
  # "10ms"; a change needs a restart.
  # commit_delay = "1ms"  # default: 0, commit at once
}

# How long an Idempotency-Key (or a client-supplied event id) is remembered.
# While the storage budget (storage.max_size, min_free) is reached and no
# delivered record is left to remove, records made more than min_window ago
# (whatever window they were made with) are removed early to make room: a retry older than that is stored again, but
# producers are not refused until the window ends (clients that choose their
# ids keep one record per event, ~440 bytes). min_window = window keeps them
# all, and the refusals.
idempotency {
  window = "24h"
  # min_window = "1h" # the default (or window, if shorter)
}

# How long delivered events are kept (for GET /v1/events/{id}) before cleanup.
outbox {
  # Delivered records are kept this long (never less than an embedded NATS
  # server's replay window, 2 x sync_interval + 5s, which a restart after a
  # power cut reads to send again what the stream lost).
  ttl = "24h"
  # While the router is short of CPU and requests are being served,
  # delivery yields to them if a short trial shows that the router then
  # handles more events in all (clients sending batches as fast as they are
  # answered: a stored event costs less than a delivered one). Each loop
  # sends one batch at a time and rests three times as long as it took (at
  # most 50ms), so delivery keeps at least a quarter of its pace, and drains
  # the backlog once the burst ends. Never while delivery is yield_lag
  # behind, nor past half the storage budget (half of max_size, twice
  # min_free of room). With 16 clients sending batches of 100 on a 2-core
  # node it doubled the events stored per second; delivery then lags by up
  # to the burst (docs/decisions/ingest-first.md). "0s": delivery keeps pace
  # with ingest instead, sharing the CPU as it comes.
  # yield_lag = "10s"   # the default
}

# How long resolved DLQ records are kept (router dlq resolve; POST
# /v1/dlq/{id}/resolve): then they are removed, with the event.
dlq {
  ttl = "168h"
}

# ---------------------------------------------------------------------------
# Sinks: where events go. A route names one as "nats.<name>" or
# "kafka.<name>".

# An in-process NATS server with JetStream, so the router runs with nothing
# else installed (for production, an external server: "remote" below).
# It admits only the router: user "switchyard" with a password the router
# generates on first start into ./data/nats-local.password (mode 0600, next
# to storage.path). Watch it with that password, e.g. the nats CLI:
#   nats -s nats://127.0.0.1:4222 --user switchyard \
#     --password "$(cat data/nats-local.password)" sub 'demo.>'
nats "local" {
  embedded = true
  host     = "127.0.0.1"
  port     = 4222 # -1 picks a free port; one another process holds stops
                  # the start at once, with that said
  # user          = "switchyard"                # the defaults: set both
  # password_file = "./data/nats-local.password" # to choose your own
  # store_dir = "./data/nats"  # JetStream files; default: next to storage.path
  #                            # (the router's user's, closed to writes by others)
  # JetStream acks a message once it is written to the OS and fsyncs every
  # sync_interval. After a crash or power cut the router asks the stream
  # which events of the last 2 x sync_interval + 5s it still holds and
  # republishes the others under the same message ids, so an acknowledged
  # event survives a power cut (docs/decisions/power-loss.md). sync_always = true fsyncs
  # before every ack instead (about 6x slower here: BENCHMARKS.md).
  sync_interval = "1s"
  sync_always   = false

  jetstream       = true # false publishes with core NATS: at most once
  max_pending     = 4096 # in-flight asynchronous publishes
  publish_timeout = "10s" # also bounds a write to the server that does not go out (an inbox's acks too)

  # Streams are created or updated when the router starts; a reload (SIGHUP)
  # creates new ones and adds subjects, and refuses any other change to a
  # stream (a restart applies it). JetStream drops a message
  # whose Nats-Msg-Id it has seen within `duplicates`. The server keeps every
  # id of the window in memory: at 50k events/s, 1s is ~80 MiB resident for
  # the whole router, 5s ~240 MiB (docs/decisions/dedup-window.md). After a
  # crash the router reads back what the embedded stream stored last and
  # does not send it again, whatever the window. Default 1s here, 2m on an
  # external server (nats-server's own default).
  stream "events" {
    subjects   = ["demo.>"]
    storage    = "file" # or "memory"
    replicas   = 1
    max_age    = "0s" # 0 keeps messages forever
    duplicates = "1s"
  }
}

# An external NATS server. Credentials: at most one of user with
# password_file (or password_env), token_file (or token_env), creds_file
# (a JWT .creds file) or nkey_seed_file. Secrets are never written here:
# only files or variables. Every file of secrets (these, and a TLS key_file)
# must be mode 0600 and the router's user's, or mode 0640 and root's (the
# router's user in its group), or it is refused.
# nats "remote" {
#   url           = "tls://nats.internal:4222"
#   user          = "edge-1"
#   password_file = "/etc/switchyard/nats.password"
#   tls {
#     ca_file   = "/etc/switchyard/nats-ca.pem"
#     # cert_file = "/etc/switchyard/nats-client.pem"    # a client certificate,
#     # key_file  = "/etc/switchyard/nats-client-key.pem" # if the server asks
#   }
# }

# A Kafka cluster.
# kafka "main" {
#   brokers          = ["127.0.0.1:9092"]
#   client_id        = "switchyard"
#   compression      = "none"  # gzip, snappy, lz4, zstd
#   linger           = "0s"
#   max_record_bytes = "1MiB"
#   idempotent       = true    # the idempotent producer: no broker-side duplicates on retry
#   publish_timeout  = "10s"   # a dial to a broker gets half of it (2s to 10s)
#
#   tls {
#     ca_file   = "/etc/switchyard/ca.pem"
#     cert_file = "/etc/switchyard/client.pem"
#     key_file  = "/etc/switchyard/client-key.pem"
#   }
#   sasl {
#     mechanism = "SCRAM-SHA-512" # or PLAIN, SCRAM-SHA-256
#     username  = "switchyard"
#     password_file = "/etc/switchyard/kafka.password" # or password_env = "KAFKA_PASSWORD"
#   }
# }

# ---------------------------------------------------------------------------
# Plugins: WebAssembly modules that transform, filter and route events. An
# event type runs its `plugins` in order, each seeing the previous outputs.
# plugin "enrich" {
#   wasm   = "examples/plugins/enrich-c/enrich.wasm"
#   config = { region = "eu-1" } # handed to the plugin's sy_init
#   limits {
#     memory           = "16MiB" # a plugin that needs more is retried, then DLQ'd
#                                # (its linear memory: wazero's call stack is
#                                # not counted, docs/plugin-abi.md)
#     timeout          = "50ms"  # per event: wall time, less the router's copying of its outputs
#     max_outputs      = 16      # outputs per event
#     max_output_bytes = "1MiB"  # per output
#   }
#   # A batch holds at most 32 MiB of outputs until they are published: the
#   # events after that wait for the next batch (no attempt counted). A type
#   # has up to 4 batches in transit, so the memory outputs take is bounded
#   # per type, not per router. In a chain, each plugin runs on every
#   # output of the one before: what it makes of one event, all calls
#   # together, is held to what one call of the chain's most generous
#   # plugin so far may make (max_outputs outputs, max_outputs x
#   # max_output_bytes of data), past that a reject.
#   # A plugin that uses state (state_get/state_put) keeps one namespace per
#   # event type and tenant; name one to share it across types and plugin
#   # blocks, still per tenant (docs/plugin-state.md):
#   # state_namespace = "tally"
# }

# ---------------------------------------------------------------------------
# Policies. Every event type has one loop that polls the outbox, runs the
# plugins, publishes to the routes and retries failures. The defaults block
# applies to every type; an event block overrides any part of it, down to a
# single field of polling or backoff, and inherits the rest. plugins and
# route, when an event sets them, replace the defaults' list.
defaults {
  batch_size          = 200    # events claimed per poll (fewer once they hold 32 MiB, or what every
                               # type's batches may still hold of 64 MiB: the first always)
  max_retries         = 3      # then the event moves to the DLQ
  max_processing_time = "300s" # a claim held longer is released, without counting an attempt; keep it above
                               # its sinks' publish_timeout (a publish it cuts short may be stored twice)
  # ordering = "key"           # hold an event while an earlier one of its tenant with the same partition key is pending
                               # (turned on by a reload or a restart, it lines up the events already stored too)

  # A poll that returns a full batch resets the delay to min; a partial or
  # empty one multiplies it by multiplier, up to max. Writes wake the loop
  # at once, so an idle type still picks new events up in milliseconds.
  polling {
    type       = "adaptive" # or "fixed": poll every min
    min        = "250ms" # at least 1ms
    max        = "1m"
    multiplier = 1.5
  }

  # A failed publish is retried after delay × multiplier^(attempt-1):
  # 10s, 30s, 90s. enabled = false retries on the next poll instead.
  backoff {
    enabled    = true
    delay      = "10s"
    multiplier = 3.0
  }

  # plugins = ["enrich"]
  # route { ... } here would route every type without routes of its own.
}

# A demo type: POST an event of type demo.greeting and it is published to the
# NATS subject demo.greeting, which the "events" stream above captures.
event "demo.greeting" {
  route {
    to      = "nats.local"
    subject = "demo.greeting"
  }

  # Override only what differs; the rest comes from defaults.
  polling {
    min = "50ms" # max stays 1m, multiplier 1.5
  }
}

# event "order.created" {
#   plugins = ["enrich"]
#   route {
#     to    = "kafka.main"
#     topic = "orders"
#   }
# }

# A catch-all: types without a block of their own. Without it, the router
# refuses events of an unknown type (unknown_event_type). Each type it
# catches gets a queue, a loop and its own metrics series, so it takes at
# most max_types of them; a further new type is refused (422
# too_many_event_types) until it gets a block of its own. A tenant's token
# on the TCP listener adds at most max_types_per_tenant of them (a quarter
# of max_types unless set), so that one tenant cannot take them all; using
# a type another tenant added costs nothing, and the socket and admin
# tokens are bounded by max_types alone.
# event "*" {
#   max_types            = 256
#   max_types_per_tenant = 64
#   route {
#     to      = "nats.local"
#     subject = "demo.other"
#   }
# }

# ---------------------------------------------------------------------------
# Inboxes: consume from a broker into the data file, drop redeliveries (the
# same source and id, the id read from id_header, within ttl) and hand each
# new event to a local service.
# An inbox takes the same policy settings as an event (batch_size, polling,
# backoff, ...), inherited from defaults the same way.
# inbox "payments" {
#   from      = "kafka.main"
#   topics    = ["payments"]
#   group     = "edge-1"    # routers sharing a group split the partitions; default: the inbox name; two inboxes on one topic need two
#   ttl       = "24h"
#   id_header = "ce_id"     # "ce-id" for NATS
#   missing_id = "derive"   # a message without an id (or with one over 1024 bytes): "derive" one from its content, or "reject" it (audited: no_id, id_too_long)
#   instance_id     = "edge-1-payments" # Kafka static membership: a restarted router takes its partitions back at once
#   session_timeout = "45s"             # how long the group waits for a member that stopped answering
#   read_committed  = false             # true: skip records of aborted transactions
#   # plugins = ["..."]     # an inbox runs only the plugins it names
#   deliver {
#     url     = "unix:///run/payments.sock/events" # or http(s)://...; leave deliver out to pull
#     timeout = "10s" # no answer in time is a failed attempt; a 503 pauses the hand-off
#                     # for its Retry-After, counting none (README, Inbox)
#     concurrency = 8 # POSTs in flight to the service
#     mode    = "binary" # CloudEvents content mode: "binary" (ce- headers, percent-encoded;
#                        # the data as the body) or "structured" (the event as JSON, every
#                        # value exactly: for receivers whose SDK does not percent-decode)
#   }
# }
#
# inbox "alerts" {
#   from    = "nats.local"
#   subject = "demo.alerts.>" # a subject a stream of that nats block stores (here "events", demo.>)
#   durable = "alerts"      # routers sharing a durable split the messages; default: the inbox name; two inboxes on one stream need two
#   deliver { url = "http://127.0.0.1:9000/alerts" }
# }
