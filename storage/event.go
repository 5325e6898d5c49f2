package storage

import (
	"crypto/sha256"
	"encoding/binary"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/cloudevents"
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

	// keyByID: an inbox's record stored before data file schema 4, whose
	// key is its queue and id alone (idOnlyInboxKey). It keeps that key
	// until it is removed.
	keyByID bool
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
// EventKey; for a record in a named queue (an inbox) its inboxKey, so an
// event the router consumes never collides with one it publishes.
func (r *Record) Key() string {
	switch {
	case r.Queue == "":
		return EventKey(r.Tenant, r.Event.ID)
	case r.keyByID:
		return idOnlyInboxKey(r.Queue, r.Event.ID)
	}
	return inboxKey(r.Queue, r.Event.Source, r.Event.ID)
}

// inboxKey is the key of an inbox's record of the event source + id
// (CloudEvents names an event by both, and two producers may well count
// their ids alike; docs/decisions/inbox-identity.md): the queue, a 1 byte,
// the id's length (uvarint), the id and the source. The length keeps every
// (id, source) pair apart whatever bytes they hold, and puts the records
// of one id from every source side by side, after appendInboxIDPrefix. The 1
// byte keeps these keys apart from idOnlyInboxKey's (a queue's name, from
// config, holds no control character). The inbox's ids index
// (inbox_ids) keys its entries the same way, by inbox name.
func inboxKey(queue, source, id string) string {
	var buf [128]byte // on the stack for most keys: one allocation, the string's (Key runs several times per write)
	return string(appendInboxKey(buf[:0], queue, source, id))
}

// appendInboxKey appends inboxKey(queue, source, id) to b: a key to look
// up in the transaction's scratch buffer. A source that would make the key
// too long for bbolt beside an expiry's 8 bytes (maxInboxKeyLen) is
// keyed by its SHA-256 instead, after a 0 byte: such an event failed its
// whole batch ("key too large"), the good ones beside it included, and
// the broker redelivered the batch for ever. Every key that could be
// stored before is as it was.
func appendInboxKey(b []byte, queue, source, id string) []byte {
	start := len(b)
	b = appendInboxIDPrefix(b, queue, id)
	if len(b)-start+len(source) <= maxInboxKeyLen {
		return append(b, source...)
	}
	sum := sha256.Sum256([]byte(source))
	return append(append(b, 0), sum[:]...)
}

// maxInboxKeyLen is the longest inbox key kept with its source: bbolt's
// longest key less the 8 bytes of a time an index puts before it (the
// inbox's expiry index, the done index).
const maxInboxKeyLen = bolt.MaxKeySize - 8

// appendInboxIDPrefix appends what starts the keys of queue's records of
// the event id id.
func appendInboxIDPrefix(b []byte, queue, id string) []byte {
	b = append(append(b, queue...), 1)
	b = binary.AppendUvarint(b, uint64(len(id)))
	return append(b, id...)
}

// appendIDOnlyInboxKey appends idOnlyInboxKey(queue, id) to b.
func appendIDOnlyInboxKey(b []byte, queue, id string) []byte {
	return append(append(append(b, queue...), 0), id...)
}

// idOnlyInboxKey is the key an inbox's record had until data file schema
// 4: the queue, a 0 byte and the id, with no source. A second producer's
// event with an id already held was taken for a redelivery and dropped.
func idOnlyInboxKey(queue, id string) string {
	var buf [128]byte
	return string(appendIDOnlyInboxKey(buf[:0], queue, id))
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
// events with the same id are not taken for one. For an inbox's records,
// which a local service gets as Idempotency-Key, its source and id
// ("/billing#1", inboxMsgID), so that two sources' events with the same
// id are not either; the id alone for a record stored before data file
// schema 4 (keyByID), percent-encoded as its earlier attempts sent it. An
// inbox record's is printable ASCII: a header value as it is.
func (r *Record) MsgID() string {
	switch {
	case r.Queue == "":
		return EventKey(r.Tenant, r.Event.ID)
	case r.keyByID:
		return cloudevents.PercentEncode(r.Event.ID)
	}
	return inboxMsgID(r.Event.Source, r.Event.ID)
}

// inboxMsgID is "<source>#<id>", each percent-encoded as the CloudEvents
// HTTP and NATS bindings encode a header's value (cloudevents.PercentEncode),
// and the source's '#' as %23: the ce-source and ce-id headers a local
// service gets, joined at the source's first '#'. Two events share it only
// if they share both. Until 2026-12 only the source's '%' and '#' were
// encoded here, and the webhook encoded the whole again: a source "/a#b"
// reached the service as "/a%2523b#..." where the README said "/a%23b#...".
func inboxMsgID(source, id string) string {
	return strings.ReplaceAll(cloudevents.PercentEncode(source), "#", "%23") + "#" + cloudevents.PercentEncode(id)
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
	return outputMsgID(r.MsgID(), n)
}

// outputMsgID is the id of output n of the record whose MsgID is base.
func outputMsgID(base string, n int) string {
	if n == 0 {
		return base
	}
	return base + "/" + strconv.Itoa(n) + "/"
}

// EarlierOutputMsgIDs are the ids output n had before OutputMsgID's: its
// outputs recorded under them count as delivered. "<MsgID>-<n>" for n > 0
// (LegacyOutputMsgID), and, for an inbox's record, both forms over the
// MsgID it had before that encoded source and id whole
// (InboxMsgIDBefore202612). None for a first output of an outbound event.
func (r *Record) EarlierOutputMsgIDs(n int) []string {
	var ids []string
	if n > 0 {
		ids = append(ids, r.LegacyOutputMsgID(n))
	}
	if old := r.InboxMsgIDBefore202612(); old != "" {
		ids = append(ids, outputMsgID(old, n))
		if n > 0 {
			ids = append(ids, legacyOutputMsgID(old, n))
		}
	}
	return ids
}

// InboxMsgIDBefore202612 is the MsgID an inbox's record had before it
// encoded source and id whole (inboxMsgID): the source's '%' and '#'
// escaped and the id as it is, or, for a record keyed by its id, the id
// as it is. Outputs its earlier attempts recorded under it ("<it>", and
// "<it>/<n>/" or, older, "<it>-<n>" for output n) count as delivered (a
// review: a split event's delivered outputs went out again). "" where it
// is the current one, or for an outbound event.
func (r *Record) InboxMsgIDBefore202612() string {
	if r.Queue == "" {
		return ""
	}
	old := sourceEscaperBefore202612.Replace(r.Event.Source) + "#" + r.Event.ID
	if r.keyByID {
		old = r.Event.ID
	}
	if old == r.MsgID() {
		return ""
	}
	return old
}

var sourceEscaperBefore202612 = strings.NewReplacer("%", "%25", "#", "%23")

// LegacyOutputMsgID is the id output n > 0 had before OutputMsgID: outputs
// recorded under it count as delivered.
func (r *Record) LegacyOutputMsgID(n int) string {
	return legacyOutputMsgID(r.MsgID(), n)
}

func legacyOutputMsgID(base string, n int) string {
	return base + "-" + strconv.Itoa(n)
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
