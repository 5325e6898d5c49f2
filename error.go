package switchyard

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Code is an error code: a stable string that clients match on (the
// problem+json "code"). The API maps each to an HTTP status in one place
// (api/error.go).
type Code string

// The error codes.
const (
	EINVALID        Code = "invalid_event"          // an event (body, ce- headers) is malformed
	EINVALIDREQUEST Code = "invalid_request"        // a request that is not an event is malformed: a query parameter, a header, a filter, a claim
	EUNKNOWNTYPE    Code = "unknown_event_type"     // no event block for the type
	ETOOMANYTYPES   Code = "too_many_event_types"   // the catch-all holds max_types types already
	ETOOLARGE       Code = "payload_too_large"      // body or batch over the limits
	ETIMEOUT        Code = "request_timeout"        // the body did not arrive in time
	EROUTELIMIT     Code = "too_large_for_route"    // an event its route's broker would never take
	EMEDIATYPE      Code = "unsupported_media_type" // content type not understood
	EIDEMREUSE      Code = "idempotency_key_reuse"  // same key, another request
	EINPROGRESS     Code = "request_in_progress"    // same key, first still in flight
	EIDCONFLICT     Code = "event_id_conflict"      // the id is stored for another event
	ENOTFOUND       Code = "not_found"
	EMETHOD         Code = "method_not_allowed"  // the route takes other methods
	ECONFLICT       Code = "conflict"            // the resource is not in a state that allows this
	ENOTINDLQ       Code = "not_in_dlq"          // a DLQ action on an event that is not dead (or resolved)
	EUNAVAILABLE    Code = "storage_unavailable" // the data file cannot take writes
	ESTORAGEFULL    Code = "storage_full"        // the data file's budget (max_size, min_free) is reached
	ERATELIMITED    Code = "rate_limited"        // the tenant block allows no more events yet, or the tenant holds half of the TCP listener
	EUNAUTHORIZED   Code = "unauthorized"        // the HTTP API's: no bearer token, or not a valid one
	EFORBIDDEN      Code = "forbidden"           // the HTTP API's: a tenant token on an admin route; the console's proxy: another origin
	EINTERNAL       Code = "internal"
)

// Error is the router's one coded error type. Message is safe to show to
// the client; the wrapped Err (if any) is for the log.
type Error struct {
	Code       Code
	Message    string
	RetryAfter time.Duration // > 0: tell the client when to come back
	Err        error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return string(e.Code) + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of err's *Error, or EINTERNAL.
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the message of err's *Error (without its code), or
// err's text.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return err.Error()
}

// Truncate shortens s to at most n bytes, on a rune boundary, marking the
// cut with "…": for what a client or a plugin gave, quoted in an error
// message, a reason or a note.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
