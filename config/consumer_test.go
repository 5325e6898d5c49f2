package config

import "testing"

// A JetStream durable is named per stream: two inboxes whose subjects are
// stored by different declared streams may share a durable's name (two
// consumers; one a NATS account's permissions allow). Two inboxes in one
// Kafka group with disjoint topics each get only their own topics'
// partitions (the one group a literal ACL grants). Both pass. (A review:
// refusing any shared name broke these.)
func TestSharedConsumerNamesOnDisjointSourcesPass(t *testing.T) {
	for name, src := range map[string]string{
		"durable on two streams": `nats "local" {
  embedded = true
  stream "orders" { subjects = ["orders.>"] }
  stream "alerts" { subjects = ["alerts.>"] }
}
inbox "orders" {
  from    = "nats.local"
  subject = "orders.>"
  durable = "switchyard"
  deliver { url = "http://127.0.0.1:9000/o" }
}
inbox "alerts" {
  from    = "nats.local"
  subject = "alerts.>"
  durable = "switchyard"
  deliver { url = "http://127.0.0.1:9000/a" }
}
`,
		"group on disjoint topics": `kafka "main" { brokers = ["k:9092"] }
inbox "payments" {
  from   = "kafka.main"
  topics = ["payments"]
  group  = "edge-1"
  deliver { url = "http://127.0.0.1:9000/p" }
}
inbox "refunds" {
  from   = "kafka.main"
  topics = ["refunds"]
  group  = "edge-1"
  deliver { url = "http://127.0.0.1:9000/r" }
}
`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse([]byte(src), "test.hcl"); err != nil {
				t.Fatalf("refused: %v", err)
			}
		})
	}
}
