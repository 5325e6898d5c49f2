package sdk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unsafe"
)

// EventVersion is the version byte that opens every event envelope of ABI v1.
const EventVersion = 1

// Output flags (ABI v1): which optional fields follow the destination.
const (
	FlagKey     = 1 << 0
	FlagHeaders = 1 << 1
	FlagData    = 1 << 2
	FlagID      = 1 << 3
)

// ErrMalformed is wrapped by every envelope decoding error.
var ErrMalformed = errors.New("switchyard sdk: malformed envelope")

type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s at offset %d", ErrMalformed, what, d.off)
	}
}

func (d *decoder) u8(what string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b)-d.off < 1 {
		d.fail("truncated " + what)
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

func (d *decoder) u32(what string) uint32 {
	if d.err != nil {
		return 0
	}
	if len(d.b)-d.off < 4 {
		d.fail("truncated " + what)
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b[d.off:])
	d.off += 4
	return v
}

// bytes returns a sub-slice of the envelope (no copy).
func (d *decoder) bytes(what string) []byte {
	n := d.u32(what + " length")
	if d.err != nil {
		return nil
	}
	if uint64(n) > uint64(len(d.b)-d.off) {
		d.fail(what + " longer than the envelope")
		return nil
	}
	v := d.b[d.off : d.off+int(n) : d.off+int(n)]
	d.off += int(n)
	return v
}

// str returns a string that aliases the envelope. The SDK never writes to an
// envelope buffer after decoding it, so the string stays immutable.
func (d *decoder) str(what string) string {
	b := d.bytes(what)
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func (d *decoder) pairs(what string) Headers {
	n := d.u32(what + " count")
	if d.err != nil {
		return nil
	}
	// Each pair takes at least 8 bytes: refuse counts the envelope cannot hold
	// before allocating for them.
	if uint64(n)*8 > uint64(len(d.b)-d.off) {
		d.fail(what + " count larger than the envelope")
		return nil
	}
	h := make(Headers, 0, n)
	for i := uint32(0); i < n && d.err == nil; i++ {
		name := d.str(what + " name")
		value := d.str(what + " value")
		h = append(h, Header{Name: name, Value: value})
	}
	return h
}

func (d *decoder) end(what string) {
	if d.err == nil && d.off != len(d.b) {
		d.fail(strconv.Itoa(len(d.b)-d.off) + " trailing bytes after " + what)
	}
}

// decodeEvent decodes an event envelope. The strings and Data alias b.
func decodeEvent(b []byte) (*Event, error) {
	d := decoder{b: b}
	if v := d.u8("version"); d.err == nil && v != EventVersion {
		return nil, fmt.Errorf("%w: event envelope version %d, want %d", ErrMalformed, v, EventVersion)
	}
	ev := &Event{}
	ev.ID = d.str("id")
	ev.Type = d.str("type")
	ev.Source = d.str("source")
	ev.Subject = d.str("subject")
	ev.Key = d.str("key")
	ev.Headers = d.pairs("header")
	ev.Data = d.bytes("data")
	d.end("event")
	if d.err != nil {
		return nil, d.err
	}
	if ev.Headers == nil {
		ev.Headers = Headers{}
	}
	return ev, nil
}

// decodeConfig decodes a config envelope: u32 n × (str key, str value).
func decodeConfig(b []byte) (map[string]string, error) {
	d := decoder{b: b}
	pairs := d.pairs("config entry")
	d.end("config")
	if d.err != nil {
		return nil, d.err
	}
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		m[p.Name] = p.Value
	}
	return m, nil
}

// decodeOutput decodes an output envelope (used by Run and the tests).
func decodeOutput(b []byte) (Output, error) {
	d := decoder{b: b}
	var o Output
	o.Destination = string(d.bytes("destination"))
	flags := d.u8("flags")
	if d.err == nil && flags&^(FlagKey|FlagHeaders|FlagData|FlagID) != 0 {
		d.fail("unknown output flags " + strconv.Itoa(int(flags)))
	}
	if flags&FlagKey != 0 {
		k := string(d.bytes("key"))
		o.Key = &k
	}
	if flags&FlagHeaders != 0 {
		o.Headers = d.pairs("header")
		for i := range o.Headers { // detach from b
			o.Headers[i] = Header{Name: string([]byte(o.Headers[i].Name)), Value: string([]byte(o.Headers[i].Value))}
		}
	}
	if flags&FlagData != 0 {
		o.Data = append([]byte{}, d.bytes("data")...)
	}
	if flags&FlagID != 0 {
		id := string(d.bytes("id"))
		o.ID = &id
	}
	d.end("output")
	return o, d.err
}

func appendU32(b []byte, v uint32) []byte {
	return binary.LittleEndian.AppendUint32(b, v)
}

func appendStr(b []byte, s string) []byte {
	b = appendU32(b, uint32(len(s)))
	return append(b, s...)
}

func appendPairs(b []byte, h Headers) []byte {
	b = appendU32(b, uint32(len(h)))
	for _, p := range h {
		b = appendStr(b, p.Name)
		b = appendStr(b, p.Value)
	}
	return b
}

// appendOutput appends the output envelope of o to b.
func appendOutput(b []byte, o *Output) []byte {
	b = appendStr(b, o.Destination)
	var flags byte
	if o.Key != nil {
		flags |= FlagKey
	}
	if o.Headers != nil {
		flags |= FlagHeaders
	}
	if o.Data != nil {
		flags |= FlagData
	}
	if o.ID != nil {
		flags |= FlagID
	}
	b = append(b, flags)
	if o.Key != nil {
		b = appendStr(b, *o.Key)
	}
	if o.Headers != nil {
		b = appendPairs(b, o.Headers)
	}
	if o.Data != nil {
		b = appendU32(b, uint32(len(o.Data)))
		b = append(b, o.Data...)
	}
	if o.ID != nil {
		b = appendStr(b, *o.ID)
	}
	return b
}

// appendEvent appends the event envelope of ev to b (what the host sends).
func appendEvent(b []byte, ev *Event) []byte {
	b = append(b, EventVersion)
	b = appendStr(b, ev.ID)
	b = appendStr(b, ev.Type)
	b = appendStr(b, ev.Source)
	b = appendStr(b, ev.Subject)
	b = appendStr(b, ev.Key)
	b = appendPairs(b, ev.Headers)
	b = appendU32(b, uint32(len(ev.Data)))
	return append(b, ev.Data...)
}

// appendConfig appends a config envelope (entries sorted by key, as the
// router sends them).
func appendConfig(b []byte, cfg map[string]string) []byte {
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = appendU32(b, uint32(len(keys)))
	for _, k := range keys {
		b = appendStr(b, k)
		b = appendStr(b, cfg[k])
	}
	return b
}
