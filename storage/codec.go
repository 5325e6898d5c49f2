package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
	"unsafe"

	"github.com/switchyard-router/switchyard"
)

// Records are encoded in a small binary format rather than JSON: they are
// decoded on every claim and re-encoded on every commit, and JSON was the
// largest CPU cost of the hot path (docs/decisions/record-encoding.md).
//
// Layout (varint = encoding/binary's; str = uvarint length + bytes; time =
// varint Unix nanoseconds, 0 for the zero time):
//
//	u8 version (1, or 2 for an inbox's record keyed by source and id)
//	str tenant | str idempotency key | str state | uvarint attempts
//	time created | time updated | time next attempt | str last error | uvarint queue seq | str queue
//	event: str id, source, type, specversion, subject, datacontenttype, dataschema
//	       time | uvarint n × (str name, str value) | str data
//	uvarint n × output: str destination | str msg id | u8 delivered (0 no, 1 yes, 2 abandoned) | time delivered at
//	       | u8 has position [str stream | uvarint sequence | str topic | varint partition | varint offset]
//	       | str last error
//	uvarint n × attempt: time at | str error
//
// Version 2 has the layout of 1. It marks an inbox's record whose key holds
// its event's source (Record.Key); an inbox's record at version 1 was
// stored before data file schema 4 and keeps the key of its id alone.
// Outbound records stay at 1, which every router reads.
const (
	recordVersion       = 1
	recordVersionScoped = 2
)

// versionOf is the version byte r is encoded with.
func versionOf(r *Record) byte {
	if r.Queue != "" && !r.keyByID {
		return recordVersionScoped
	}
	return recordVersion
}

// outputState is an output's delivered byte. Abandoned is a third value of
// it, not a field of its own: a router older than it reads an abandoned
// output as not delivered, which it is.
func outputState(o Output) byte {
	switch {
	case o.Delivered:
		return 1
	case o.Abandoned:
		return 2
	}
	return 0
}

// ErrCorrupt marks a stored record that does not decode: a damaged data
// file (bbolt keeps no checksums of its pages), never a retryable state.
var ErrCorrupt = errors.New("storage: corrupt record")

func encodeRecord(r *Record) ([]byte, error) {
	b := make([]byte, 0, 256+len(r.Event.Data))
	b = append(b, versionOf(r))
	b = appendStr(b, r.Tenant)
	b = appendStr(b, r.IdempotencyKey)
	b = appendStr(b, string(r.State))
	b = binary.AppendUvarint(b, uint64(r.Attempts))
	b = appendTime(b, r.CreatedAt)
	b = appendTime(b, r.UpdatedAt)
	b = appendTime(b, r.NextAttemptAt)
	b = appendStr(b, r.LastError)
	b = binary.AppendUvarint(b, r.QueueSeq)
	b = appendStr(b, r.Queue)
	e := &r.Event
	for _, s := range []string{e.ID, e.Source, e.Type, e.SpecVersion, e.Subject, e.DataContentType, e.DataSchema} {
		b = appendStr(b, s)
	}
	b = appendTime(b, e.Time)
	b = binary.AppendUvarint(b, uint64(len(e.Extensions)))
	for _, h := range e.Extensions {
		b = appendStr(b, h.Name)
		b = appendStr(b, h.Value)
	}
	b = appendBytes(b, e.Data)
	b = binary.AppendUvarint(b, uint64(len(r.Outputs)))
	for _, o := range r.Outputs {
		b = appendStr(b, o.Destination)
		b = appendStr(b, o.MsgID)
		b = append(b, outputState(o))
		b = appendTime(b, o.DeliveredAt)
		b = appendBool(b, o.Position != nil)
		if p := o.Position; p != nil {
			b = appendStr(b, p.Stream)
			b = binary.AppendUvarint(b, p.Sequence)
			b = appendStr(b, p.Topic)
			b = binary.AppendVarint(b, int64(p.Partition))
			b = binary.AppendVarint(b, p.Offset)
		}
		b = appendStr(b, o.LastError)
	}
	b = binary.AppendUvarint(b, uint64(len(r.History)))
	for _, a := range r.History {
		b = appendTime(b, a.At)
		b = appendStr(b, a.Error)
	}
	return b, nil
}

// decodeRecord copies everything out of v: the result stays valid after
// the transaction that read v ends. It copies v once, not once per field:
// every string of the record is cut from one copy of v, and the data is a
// slice of it (a record's fields live and die together). It copied v
// twice, a string of it and the data again: a memory trial's heap, while
// a backlog of 256 KiB events drained, was 95% taken records, each held
// twice, and a 128 MiB limit killed the router.
func decodeRecord(v []byte) (*Record, error) { return decodeOwned(bytes.Clone(v)) }

// decodeOwned is decodeRecord of own, a copy the caller gives it.
func decodeOwned(own []byte) (*Record, error) {
	d := ownDecoder(own)
	r, err := decodeHead(&d)
	if err != nil {
		return nil, err
	}
	r.Event.Data = d.bytes()
	return decodeTail(&d, r)
}

// decodeRecordWithoutData is decodeRecord but for the event's data, left
// nil, and copies no byte of it: for readers of many records that need
// their outputs, not their events (the start's check of what a broker
// holds read every event delivered in its window, data and all: a router
// killed at a 64 MiB limit needed ~375 MB to start again).
func decodeRecordWithoutData(v []byte) (*Record, error) {
	skim := decoder{b: v} // no s: its strings read as ""
	if _, err := decodeHead(&skim); err != nil {
		return nil, err
	}
	start := len(v) - len(skim.b)
	skim.raw()
	if skim.err != nil {
		return nil, ErrCorrupt
	}
	end := len(v) - len(skim.b)
	return decodeOwned(slices.Concat(v[:start], []byte{0}, v[end:])) // a copy, the data's length 0 and its bytes left out
}

// decodeHead reads a record up to its event's data.
func decodeHead(d *decoder) (*Record, error) {
	version := d.u8()
	if version != recordVersion && version != recordVersionScoped {
		return nil, fmt.Errorf("%w: unknown version", ErrCorrupt)
	}
	r := &Record{}
	r.Tenant = d.str()
	r.IdempotencyKey = d.str()
	r.State = State(d.str())
	r.Attempts = int(d.uvarint())
	r.CreatedAt = d.time()
	r.UpdatedAt = d.time()
	r.NextAttemptAt = d.time()
	r.LastError = d.str()
	r.QueueSeq = d.uvarint()
	r.Queue = d.str()
	r.keyByID = r.Queue != "" && version == recordVersion
	e := &r.Event
	for _, s := range []*string{&e.ID, &e.Source, &e.Type, &e.SpecVersion, &e.Subject, &e.DataContentType, &e.DataSchema} {
		*s = d.str()
	}
	e.Time = d.time()
	if n := d.count(); n > 0 {
		e.Extensions = make([]switchyard.Header, n)
		for i := range e.Extensions {
			e.Extensions[i] = switchyard.Header{Name: d.str(), Value: d.str()}
		}
	}
	return r, d.err
}

// decodeTail reads the rest of r after its event's data.
func decodeTail(d *decoder, r *Record) (*Record, error) {
	if n := d.count(); n > 0 {
		r.Outputs = make([]Output, n)
		for i := range r.Outputs {
			o := &r.Outputs[i]
			o.Destination = d.str()
			o.MsgID = d.str()
			st := d.u8()
			o.Delivered, o.Abandoned = st == 1, st == 2
			o.DeliveredAt = d.time()
			if d.u8() == 1 {
				o.Position = &switchyard.Position{Stream: d.str(), Sequence: d.uvarint(), Topic: d.str(), Partition: int32(d.varint()), Offset: d.varint()}
			}
			o.LastError = d.str()
		}
	}
	if n := d.count(); n > 0 {
		r.History = make([]Attempt, n)
		for i := range r.History {
			r.History[i] = Attempt{At: d.time(), Error: d.str()}
		}
	}
	if d.err != nil || len(d.b) != 0 {
		return nil, ErrCorrupt
	}
	return r, nil
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendTime(b []byte, t time.Time) []byte {
	switch n := t.UnixNano(); {
	case t.IsZero():
		return binary.AppendVarint(b, 0)
	case n == 0: // the Unix epoch itself: not "no time"
		return binary.AppendVarint(b, epochMark)
	default:
		return binary.AppendVarint(b, n)
	}
}

// epochMark stands for 1970-01-01T00:00:00Z, whose UnixNano (0) means "no
// time": the one int64 no storable time has (1677-09-21T00:12:43Z, before
// MinTime).
const epochMark = math.MinInt64

// MinTime and MaxTime bound the times a record can hold: nanoseconds since
// the Unix epoch in an int64. Ingest refuses an event time outside them
// (CheckTime), which would otherwise be stored as another time.
var (
	MinTime = time.Date(1678, 1, 1, 0, 0, 0, 0, time.UTC)
	MaxTime = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC)
)

// CheckTime says why t, unless zero, cannot be stored as it is.
func CheckTime(t time.Time) error {
	if !t.IsZero() && (t.Before(MinTime) || !t.Before(MaxTime)) {
		return fmt.Errorf("time %s is outside the years 1678 to 2261 the router can store", t.Format(time.RFC3339Nano))
	}
	return nil
}

// decoder reads the layout above; the first error sticks and every later
// read returns a zero value, so decodeRecord checks once at the end.
type decoder struct {
	b   []byte // what is left to read
	s   string // all of it, as read: strings are cut from it
	err error
}

// newDecoder reads a copy of v of its own, so that what it returns stays
// valid after the transaction that read v ends: its strings and byte
// strings share the copy's bytes. Nothing writes a string's bytes: a byte
// string's (an event's data), which a caller may write, are a range no
// string covers.
func newDecoder(v []byte) decoder { return ownDecoder(bytes.Clone(v)) }

// ownDecoder is newDecoder of own, a copy no one else holds.
func ownDecoder(own []byte) decoder {
	return decoder{b: own, s: unsafe.String(unsafe.SliceData(own), len(own))}
}

func (d *decoder) fail() { d.err, d.b = ErrCorrupt, nil }

func (d *decoder) u8() byte {
	if len(d.b) < 1 {
		d.fail()
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a list length, refusing one longer than the bytes left could
// hold (a corrupt length must not allocate gigabytes).
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return 0
	}
	return int(n)
}

func (d *decoder) raw() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string {
	v := d.raw()
	if len(v) == 0 || d.s == "" { // "" for a decoder that only skims (decodeRecordWithoutData)
		return ""
	}
	end := len(d.s) - len(d.b) // v ends where what is left begins
	return d.s[end-len(v) : end]
}

// bytes is the next byte string, a slice of the decoder's own copy
// (decodeRecord), capped at its length: an append to it copies.
func (d *decoder) bytes() []byte {
	v := d.raw()
	if len(v) == 0 {
		return nil
	}
	return v[:len(v):len(v)]
}

func (d *decoder) time() time.Time {
	switch n := d.varint(); n {
	case 0:
		return time.Time{}
	case epochMark:
		return time.Unix(0, 0).UTC()
	default:
		return time.Unix(0, n).UTC()
	}
}
