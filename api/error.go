package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/storage"
)

// statusOf maps an error code to its HTTP status: the one place where codes
// meet HTTP.
var statusOf = map[switchyard.Code]int{
	switchyard.EINVALID:        http.StatusBadRequest,
	switchyard.EINVALIDREQUEST: http.StatusBadRequest,
	switchyard.EUNKNOWNTYPE:    http.StatusUnprocessableEntity,
	switchyard.ESTORAGEFULL:    http.StatusInsufficientStorage,
	switchyard.ERATELIMITED:    http.StatusTooManyRequests,
	switchyard.ETOOMANYTYPES:   http.StatusUnprocessableEntity,
	switchyard.ETOOLARGE:       http.StatusRequestEntityTooLarge,
	switchyard.ETIMEOUT:        http.StatusRequestTimeout,
	switchyard.EROUTELIMIT:     http.StatusRequestEntityTooLarge,
	switchyard.EMEDIATYPE:      http.StatusUnsupportedMediaType,
	switchyard.EIDEMREUSE:      http.StatusUnprocessableEntity,
	switchyard.EINPROGRESS:     http.StatusConflict,
	switchyard.EIDCONFLICT:     http.StatusConflict,
	switchyard.ENOTFOUND:       http.StatusNotFound,
	switchyard.EMETHOD:         http.StatusMethodNotAllowed,
	switchyard.ECONFLICT:       http.StatusConflict,
	switchyard.EUNAVAILABLE:    http.StatusServiceUnavailable,
	switchyard.EUNAUTHORIZED:   http.StatusUnauthorized,
	switchyard.EFORBIDDEN:      http.StatusForbidden,
	switchyard.EINTERNAL:       http.StatusInternalServerError,
	switchyard.ENOTINDLQ:       http.StatusConflict,
}

// problem is an RFC 9457 problem details document, with the stable code.
type problem struct {
	Type     string          `json:"type"`
	Title    string          `json:"title"`
	Status   int             `json:"status"`
	Detail   string          `json:"detail,omitempty"`
	Code     switchyard.Code `json:"code"`
	Instance string          `json:"instance,omitempty"`
}

// problemTypeBase prefixes the code to make the problem "type" URI.
const problemTypeBase = "https://switchyard.dev/problems/"

// ProblemType is the problem "type" URI of an error code: every answer
// that is a problem names its type so, the console's proxy (router ui)
// too.
func ProblemType(code switchyard.Code) string { return problemTypeBase + string(code) }

// writeError answers with err as problem+json. Errors that are not an
// *switchyard.Error are logged and shown as internal, without their text.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var e *switchyard.Error
	if !errors.As(err, &e) && errors.Is(err, storage.ErrFileLost) {
		err = engine.Unavailable(err) // the same 503 from every route
		errors.As(err, &e)
	}
	if e == nil {
		if n, ok := s.failLog.Take(string(switchyard.EINTERNAL), s.opts.Now()); ok {
			s.log.Error("request failed", "method", r.Method, "path", clip(r.URL.Path), "error", err, "like_it_since_last", n)
		}
		e = &switchyard.Error{Code: switchyard.EINTERNAL, Message: "internal error"}
	} else if e.Err != nil {
		if n, ok := s.failLog.Take(string(e.Code), s.opts.Now()); ok {
			s.log.Warn("request failed", "method", r.Method, "path", clip(r.URL.Path), "code", e.Code, "error", e.Err, "like_it_since_last", n)
		}
	}
	status, ok := statusOf[e.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	s.metrics.problems.WithLabelValues(string(e.Code)).Inc()
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((e.RetryAfter+999_999_999)/1e9)))
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(problem{
		Type:     ProblemType(e.Code),
		Title:    http.StatusText(status),
		Status:   status,
		Detail:   e.Message,
		Code:     e.Code,
		Instance: clip(r.URL.Path),
	})
}

// clip shortens a path echoed in an answer or a log line: an id in a path
// may be as long as the client made it.
func clip(path string) string { return switchyard.Truncate(path, 512) }
