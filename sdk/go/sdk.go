package sdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// ABIVersion is the plugin ABI version this SDK implements; sy_abi_version
// returns it.
const ABIVersion = 1

// Verdict is what a handler returns for an event.
type Verdict int32

const (
	// OK publishes the outputs emitted during the call. No output and OK
	// means the event is dropped (filtered out).
	OK Verdict = 0
	// VerdictRetry: a transient failure; the router backs off and retries
	// the event. Use [Retry], which also records the reason.
	VerdictRetry Verdict = 1
	// VerdictReject: a permanent failure; the router moves the event to the
	// dead-letter queue. Use [Reject], which also records the reason.
	VerdictReject Verdict = 2
)

func (v Verdict) String() string {
	switch v {
	case OK:
		return "ok"
	case VerdictRetry:
		return "retry"
	case VerdictReject:
		return "reject"
	}
	return "verdict(" + strconv.Itoa(int(v)) + ")"
}

// Retry records reason with the router and returns VerdictRetry.
func Retry(reason string) Verdict {
	hostFail(reason)
	return VerdictRetry
}

// Reject records reason with the router and returns VerdictReject: the
// event goes to the dead-letter queue with that reason.
func Reject(reason string) Verdict {
	hostFail(reason)
	return VerdictReject
}

// Level is a log level.
type Level int32

const (
	LevelTrace Level = 0
	LevelDebug Level = 1
	LevelInfo  Level = 2
	LevelWarn  Level = 3
	LevelError Level = 4
)

// Log sends a line to the router's log, attributed to the plugin.
func Log(level Level, msg string) { hostLog(int32(level), msg) }

// Logf formats like fmt.Sprintf and logs the result.
func Logf(level Level, format string, args ...any) {
	hostLog(int32(level), fmt.Sprintf(format, args...))
}

// Header is one event header: a CloudEvents extension attribute or a
// pass-through header such as traceparent.
type Header struct {
	Name, Value string
}

// contextAttrs are the CloudEvents context attributes, which are not headers.
var contextAttrs = map[string]bool{
	"specversion": true, "id": true, "source": true, "type": true, "subject": true,
	"time": true, "datacontenttype": true, "dataschema": true, "data": true,
}

// ValidHeaderName reports whether the router accepts name as an output
// header: a CloudEvents extension name (1 to 64 lower-case ASCII letters and
// digits) that is not a context attribute (id, source, type, ...). The
// router also refuses a header twice in one output and values over 4096
// bytes or not UTF-8; a refused output rejects the event (dead-lettered
// with the reason on its first attempt).
func ValidHeaderName(name string) bool {
	if name == "" || len(name) > 64 || contextAttrs[name] {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// Headers is an ordered list of headers. Names are compared exactly
// (case-sensitively).
type Headers []Header

// Get returns the value of the first header called name.
func (h Headers) Get(name string) (string, bool) {
	for _, p := range h {
		if p.Name == name {
			return p.Value, true
		}
	}
	return "", false
}

// Set returns h with the header name set to value: the first header of that
// name is replaced and any others removed, or it is appended. The result is
// never nil. h's backing array may be reused; use Clone first to keep h.
func (h Headers) Set(name, value string) Headers {
	out := h[:0:0]
	if h == nil {
		out = Headers{}
	}
	found := false
	for _, p := range h {
		if p.Name == name {
			if found {
				continue
			}
			found = true
			p.Value = value
		}
		out = append(out, p)
	}
	if !found {
		out = append(out, Header{Name: name, Value: value})
	}
	return out
}

// Del returns h without the headers called name (never nil).
func (h Headers) Del(name string) Headers {
	out := make(Headers, 0, len(h))
	for _, p := range h {
		if p.Name != name {
			out = append(out, p)
		}
	}
	return out
}

// Clone returns a copy of h (never nil).
func (h Headers) Clone() Headers {
	return append(make(Headers, 0, len(h)), h...)
}

// Event is the event a handler is given. Its strings and Data share one
// buffer that is the handler's to keep: the SDK allocates a new one for every
// event.
type Event struct {
	ID      string
	Type    string
	Source  string
	Subject string
	Key     string // the partition key ("" when none)
	Headers Headers
	Data    []byte
}

// JSON decodes the event's data as JSON into v (encoding/json).
func (ev *Event) JSON(v any) error { return json.Unmarshal(ev.Data, v) }

// Output is one message for the router to publish. A field left nil
// inherits the input event's value.
type Output struct {
	// Destination is a sink and its topic or subject, for example
	// "kafka.main:orders" or "nats.local:orders.eu"; "" is the event
	// type's configured route.
	Destination string
	// Key, when not nil, replaces the partition key.
	Key *string
	// Headers, when not nil (even empty), replace all the input's headers.
	Headers Headers
	// Data, when not nil (even empty), replaces the data.
	Data []byte
	// ID, when not nil, replaces the event's id. Outputs of one event that
	// go the same way are distinct events and need distinct ids: with the
	// input's id, a consumer that drops repeated events (by source and id)
	// keeps only the first. Derive them from the input's, so that a retry
	// of the event gives the same ids: ev.ID + "/" + strconv.Itoa(i).
	ID *string
}

// To returns an output to destination that inherits everything else.
func To(destination string) Output { return Output{Destination: destination} }

// WithID returns o with its CloudEvents id set (1 to 1024 bytes of UTF-8
// without control characters).
func (o Output) WithID(id string) Output { o.ID = &id; return o }

// WithKey returns o with its key set.
func (o Output) WithKey(key string) Output { o.Key = &key; return o }

// WithHeaders returns o with its headers set (replacing the input's; nil
// becomes an empty list, which publishes no headers at all).
func (o Output) WithHeaders(h Headers) Output {
	if h == nil {
		h = Headers{}
	}
	o.Headers = h
	return o
}

// WithData returns o with its data set (nil becomes empty data).
func (o Output) WithData(b []byte) Output {
	if b == nil {
		b = []byte{}
	}
	o.Data = b
	return o
}

// WithJSON returns o with its data set to the JSON encoding of v.
func (o Output) WithJSON(v any) (Output, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return o, err
	}
	return o.WithData(b), nil
}

// EmitError is returned by Emit when the router refuses an output.
type EmitError struct{ Code int32 }

func (e *EmitError) Error() string {
	return "switchyard: output refused by the router (emit returned " + strconv.Itoa(int(e.Code)) + ")"
}

var emitBuf []byte

// Emit hands one output to the router. Outputs are published only if the
// handler then returns OK. An error means the router refused it (malformed,
// or over the plugin's output limits).
func Emit(o Output) error {
	emitBuf = appendOutput(emitBuf[:0], &o)
	if rc := hostEmit(emitBuf); rc < 0 {
		return &EmitError{Code: rc}
	}
	return nil
}

// Forward emits the input event unchanged to the type's configured route:
// the output of a plugin that lets an event through.
func Forward() error { return Emit(Output{}) }

var (
	handler  func(*Event) Verdict
	initFunc func(map[string]string) error
)

// Handle registers the event handler. Call it from an init function.
func Handle(f func(ev *Event) Verdict) { handler = f }

// Init registers a function that receives the plugin's config (the
// `config = {...}` map of its `plugin` block) once per instance, before any
// event. A non-nil error fails the plugin's loading with that message.
// Call it from an init function.
func Init(f func(config map[string]string) error) { initFunc = f }

// callInit is sy_init.
func callInit(n int32) (rc int32) {
	defer recoverAndFail("sy_init")
	buf := make([]byte, n)
	if got := hostInputRead(buf); got != n {
		hostFail("switchyard sdk: config size " + strconv.Itoa(int(got)) + " != " + strconv.Itoa(int(n)))
		return 1
	}
	cfg, err := decodeConfig(buf)
	if err != nil {
		hostFail(err.Error())
		return 1
	}
	if initFunc != nil {
		if err := initFunc(cfg); err != nil {
			hostFail(err.Error())
			return 1
		}
	}
	return 0
}

// callHandle is sy_handle. It has no deferred recover: on wasip1 a defer
// that recovers costs ~20 µs per call. A panic in a handler prints its
// message and stack to stderr (the router's log) and exits the instance,
// which the router counts as a trap: retry on a fresh instance, the
// trap's reason keeping the "panic: <message>" line.
func callHandle(n int32) int32 {
	if handler == nil {
		return int32(Retry("switchyard sdk: no handler: call sdk.Handle from an init function"))
	}
	buf := make([]byte, n)
	if got := hostInputRead(buf); got != n {
		return int32(Retry("switchyard sdk: event size " + strconv.Itoa(int(got)) + " != " + strconv.Itoa(int(n))))
	}
	ev, err := decodeEvent(buf)
	if err != nil {
		return int32(Reject(err.Error()))
	}
	return int32(handler(ev))
}

// recoverAndFail reports a panic's value as the failure reason, then panics
// again: the instance traps (the router discards it).
func recoverAndFail(where string) {
	if r := recover(); r != nil {
		msg := fmt.Sprintf("panic in %s: %v", where, r)
		hostLog(int32(LevelError), msg)
		hostFail(msg)
		panic(r)
	}
}

// ErrNoHandler is returned by Run when no handler is registered.
var ErrNoHandler = errors.New("switchyard sdk: no handler registered")

// ---- state (docs/plugin-state.md) ----

// ErrStateFailed is a state call the router could not serve: answer the
// event with Retry.
var ErrStateFailed = errors.New("switchyard: the plugin state is unavailable")

var stateBuf []byte // grown to the largest value read

// StateGet returns the value of key in this plugin's state (its namespace
// for the event's type): the committed state with the writes of this event
// and of the events before it in the batch. ok is false when there is no
// such key.
func StateGet(key []byte) (value []byte, ok bool, err error) {
	if stateBuf == nil {
		stateBuf = make([]byte, 256)
	}
	n := hostStateGet(key, stateBuf)
	if n >= 0 && int(n) > len(stateBuf) {
		stateBuf = make([]byte, n)
		n = hostStateGet(key, stateBuf)
	}
	switch {
	case n == -1:
		return nil, false, nil
	case n < 0:
		return nil, false, ErrStateFailed
	}
	return append([]byte(nil), stateBuf[:n]...), true, nil
}

// StatePut sets key to value, for ttl (0: no expiry; else rounded up to
// whole seconds, so that 500ms lives a second, not for ever). The write
// counts when the event reaches its outcome (delivered, filtered or
// dead-lettered); a write over a limit (keys 1–256 bytes, values up to
// 64 KiB, 100,000 keys or 64 MiB per namespace), or with a negative ttl,
// rejects the event.
func StatePut(key, value []byte, ttl time.Duration) error {
	if hostStatePut(key, value, ttlSeconds(ttl)) != 0 {
		return ErrStateFailed
	}
	return nil
}

// ttlSeconds is ttl as the host takes it: whole seconds, rounded up (0 is
// "no expiry", which a sub-second ttl truncated to 0 silently became: a
// plugin author's trial), at most the int32 the ABI carries; a negative
// ttl stays negative, and the host rejects the event.
func ttlSeconds(ttl time.Duration) int32 {
	switch {
	case ttl < 0:
		return -1
	case ttl >= math.MaxInt32*time.Second:
		return math.MaxInt32
	}
	return int32((ttl + time.Second - 1) / time.Second)
}

// StateDelete removes key (nothing happens when it is not there).
func StateDelete(key []byte) error {
	if hostStateDelete(key) != 0 {
		return ErrStateFailed
	}
	return nil
}
