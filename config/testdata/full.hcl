# Every block and attribute the loader knows, with non-default values.
listen {
  socket      = "/run/sy.sock"
  http        = ":8080"
  tokens_file = "tokens.json"
  max_body    = "512KiB"
  max_batch   = 10
  max_connections = 64
  read_timeout = "5s"
}

storage {
  path         = "/var/lib/sy/router.db"
  commit_delay = "2ms"
}
idempotency { window = "1h" }
outbox {
  ttl       = "2h"
  yield_lag = "0s"
}
dlq { ttl = "3h" }

nats "local" {
  embedded        = true
  host            = "::1"
  port            = -1
  store_dir       = "/var/lib/nats"
  jetstream       = true
  max_pending     = 100
  publish_timeout = "5s"
  stream "a" {
    subjects   = ["a.>"]
    storage    = "memory"
    replicas   = 3
    max_age    = "1h"
    duplicates = "1m"
  }
  stream "b" { subjects = ["b"] }
}

nats "remote" {
  url       = "nats://nats:4222"
  jetstream = false
  creds_file = "/etc/sy/remote.creds"
  tls {
    ca_file = "nats-ca.pem"
  }
}

kafka "main" {
  brokers          = ["k1:9092", "k2:9092"]
  client_id        = "edge"
  compression      = "zstd"
  linger           = "5ms"
  max_record_bytes = "2MB"
  idempotent       = false
  publish_timeout  = "1m"
  tls {
    ca_file              = "ca.pem"
    cert_file            = "c.pem"
    key_file             = "k.pem"
    insecure_skip_verify = true
  }
  sasl {
    mechanism = "SCRAM-SHA-256"
    username  = "u"
    password_env = "KAFKA_PASSWORD"
  }
}

plugin "enrich" {
  wasm   = "enrich.wasm"
  config = { region = "eu-1", ratio = 1.5, verbose = true, count = 3 }
  limits {
    memory           = "1GiB"
    timeout          = "1s"
    max_outputs      = 2
    max_output_bytes = 4096
  }
}

plugin "noop" { wasm = "noop.wasm" }

defaults {
  batch_size          = 5
  max_retries         = 1
  max_processing_time = "1m"
  ordering            = "key"
  plugins             = ["enrich"]
}

event "fixed" {
  ordering = "none"
  polling {
    type = "fixed"
    min  = "1s"
  }
  route {
    to      = "nats.remote"
    subject = "fixed"
  }
}

inbox "payments" {
  from      = "kafka.main"
  topics    = ["payments"]
  group     = "pay"
  ttl       = "1h"
  plugins   = ["noop"]
  deliver {
    url     = "unix:///run/pay.sock/events"
    timeout = "2s"
  }
}

inbox "alerts" {
  from      = "nats.remote"
  subject   = "alerts.>"
  id_header = "x-id"
}
