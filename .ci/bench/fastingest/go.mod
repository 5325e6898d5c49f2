module switchyard.local/bench/fastingest

go 1.26.0

require (
	github.com/nats-io/nats.go v1.55.0
	github.com/synadia-io/orbit.go/jetstreamext v0.3.2
)

require (
	github.com/klauspost/compress v1.20.0 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/synadia-io/orbit.go/natsext v0.1.3 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
