package storage

import (
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-router/switchyard"
)

// State is where an event is in its life.
type State string

const (
	StatePending   State = "pending"
	StateInProcess State = "in_process"
	StateDelivered State = "delivered"
	// StateFiltered is done with nothing sent: the plugin chain returned no
	// output. Kept, like a delivered event, until outbox.ttl.
	StateFiltered State = "filtered"
	StateDLQ      State = "dlq"
	StateResolved State = "resolved" // a DLQ record an operator resolved
)

// Output is the delivery state of one output of an event.
type Output struct {
	// Destination is the sink and its topic/subject: "nats.local:orders".
	Destination string `json:"destination"`
	// MsgID tells apart several outputs to one destination (a plugin that
	// splits an event): Record.OutputMsgID.
	MsgID       string    `json:"msg_id,omitempty"`
	Delivered   bool      `json:"delivered"`
	DeliveredAt time.Time `json:"delivered_at,omitzero"`
	// Abandoned: an earlier attempt made this output, the attempt that
	// delivered the event did not (a reload changed its routes or
	// plugins). It was never delivered and never will be.
	Abandoned bool                 `json:"abandoned,omitempty"`
	Position  *switchyard.Position `json:"position,omitempty"`
	LastError string               `json:"last_error,omitempty"`
}

// Attempt is one failed try, kept for the DLQ view.
type Attempt struct {
	At    time.Time `json:"at"`
	Error string    `json:"error"`
}

// Record is an event with its delivery state: the value of the events bucket.
type Record struct {
	Event          switchyard.Event `json:"event"`
	Tenant         string           `json:"tenant"`
	IdempotencyKey string           `json:"idempotency_key,omitempty"`
	State          State            `json:"state"`
	Attempts       int              `json:"attempts"`
	CreatedAt      time.Time        `json:"created_at"`
	UpdatedAt      time.Time        `json:"updated_at"`
	NextAttemptAt  time.Time        `json:"next_attempt_at,omitzero"`
	LastError      string           `json:"last_error,omitempty"`
	Outputs        []Output         `json:"outputs,omitempty"`
	History        []Attempt        `json:"history,omitempty"`
	// QueueSeq makes the queue key unique among events due at the same instant.
	QueueSeq uint64 `json:"queue_seq"`
	// Queue is the queue the record waits in when it is not its event type's
	// (an inbox: "inbox:payments"). "" = the event type.
	Queue string `json:"queue,omitempty"`
}

// QueueName is the queue the record waits in: Queue, or the event type.
func (r *Record) QueueName() string {
	if r.Queue != "" {
		return r.Queue
	}
	return r.Event.Type
}

// DefaultTenant is the tenant of a request that names none: every request
// on the unix socket without X-Tenant.
const DefaultTenant = "default"

// Key is the record's key in the events bucket: for an outbound event its
// EventKey; for a record in a named queue (an inbox) the queue and the id,
// so an event the router consumes never collides with one it publishes.
func (r *Record) Key() string {
	if r.Queue == "" {
		return EventKey(r.Tenant, r.Event.ID)
	}
	return r.Queue + "\x00" + r.Event.ID
}

// EventKey is the key of a tenant's outbound event: its id for the default
// tenant, "<tenant>/<id>" for the others, so that tenants choose ids
// independently (docs/decisions/tenant-scope.md). An id never holds '/'
// (ingest refuses it), so the two forms never collide.
func EventKey(tenant, id string) string {
	if tenant == "" || tenant == DefaultTenant {
		return id
	}
	return tenant + "/" + id
}

// MsgID is the id a broker deduplicates the record's outputs by
// (Nats-Msg-Id): the event's key for outbound events, so that two tenants'
// events with the same id are not taken for one; the event id for an
// inbox's records, which a local service gets as Idempotency-Key.
func (r *Record) MsgID() string {
	if r.Queue == "" {
		return EventKey(r.Tenant, r.Event.ID)
	}
	return r.Event.ID
}

// LastDelivered is when the record's newest delivered output was
// acknowledged; zero if none was.
func (r *Record) LastDelivered() time.Time {
	var t time.Time
	for _, o := range r.Outputs {
		if o.Delivered && o.DeliveredAt.After(t) {
			t = o.DeliveredAt
		}
	}
	return t
}

// OutputMsgID is the id of the record's output n (from 0): MsgID for the
// first, "<MsgID>/<n>/" for the others. It ends in '/', which no event key
// does (an event id has no '/'), so it is never another event's id, and
// OutputOf reads it back. Until 2026-12 it was "<MsgID>-<n>", which event
// "x" with two outputs shared with event "x-1": a broker's dedup window
// took one for the other, and marked an event delivered that it never
// stored (LegacyOutputMsgID).
func (r *Record) OutputMsgID(n int) string {
	if n == 0 {
		return r.MsgID()
	}
	return r.MsgID() + "/" + strconv.Itoa(n) + "/"
}

// LegacyOutputMsgID is the id output n > 0 had before OutputMsgID: outputs
// recorded under it count as delivered.
func (r *Record) LegacyOutputMsgID(n int) string {
	return r.MsgID() + "-" + strconv.Itoa(n)
}

// OutputOf is the event id (MsgID) and output number an output id names.
func OutputOf(msgID string) (string, int) {
	rest, ok := strings.CutSuffix(msgID, "/")
	i := strings.LastIndexByte(rest, '/')
	if !ok || i < 0 {
		return msgID, 0
	}
	n, err := strconv.Atoi(rest[i+1:])
	if err != nil || n < 1 {
		return msgID, 0
	}
	return rest[:i], n
}
