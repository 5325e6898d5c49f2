package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/storage"
)

// The DLQ routes (admin: the unix socket, or an admin token on TCP; why:
// docs/decisions/dlq-and-operator-access.md).
//
//	GET    /v1/dlq?type=&status=&since=&limit=&cursor=   a page, newest first
//	GET    /v1/dlq/stats                                 counts per type and status
//	GET    /v1/dlq/{id}                                  one dead letter, with every attempt
//	POST   /v1/dlq/{id}/retry                            back to pending, attempts reset
//	POST   /v1/dlq/{id}/resolve                          resolved, removed after dlq { ttl }
//	DELETE /v1/dlq/{id}                                  removed
//	POST   /v1/dlq/retry|resolve|delete                  many: {"type","status","since","ids","tenant","all"}
//
// {id} is an event id; a dead letter of an inbox is addressed with
// ?queue=inbox:<name> (in a bulk body: "type": "inbox:<name>" with "ids"),
// one of a tenant other than the default with ?tenant=<tenant> (in a bulk
// body: "tenant", which also selects only that tenant's dead letters
// without "ids"): tenants choose their event ids independently.
func (s *Server) dlqRoutes(mux *http.ServeMux) {
	mux.Handle("GET /v1/dlq", s.adminFunc(s.listDLQ))
	mux.Handle("GET /v1/dlq/stats", s.adminFunc(s.dlqStats))
	mux.Handle("GET /v1/dlq/{id}", s.adminFunc(s.getDLQ))
	mux.Handle("POST /v1/dlq/{id}/retry", s.adminFunc(s.retryDLQ))
	mux.Handle("POST /v1/dlq/{id}/resolve", s.adminFunc(s.resolveDLQ))
	mux.Handle("DELETE /v1/dlq/{id}", s.adminFunc(s.deleteDLQ))
	for _, act := range engine.DLQActions {
		mux.Handle("POST /v1/dlq/"+string(act), s.adminFunc(s.bulkDLQ(act)))
	}
}

// maxRefLen bounds an id in a DLQ path or body. Outbound ids are at most
// switchyard.MaxIDLen; an inbox's ids come from brokers and may be longer, up
// to what an inbox keeps.
const maxRefLen = switchyard.MaxInboundIDLen

func checkRef(id string) error {
	switch {
	case id == "":
		return switchyard.Errorf(switchyard.EINVALIDREQUEST, "the event id is empty")
	case len(id) > maxRefLen:
		return switchyard.Errorf(switchyard.EINVALIDREQUEST, "the event id is longer than %d bytes", maxRefLen)
	case !utf8.ValidString(id):
		return switchyard.Errorf(switchyard.EINVALIDREQUEST, "the event id is not valid UTF-8")
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return switchyard.Errorf(switchyard.EINVALIDREQUEST, "the event id contains control characters")
		}
	}
	return nil
}

func dlqRef(r *http.Request) (engine.DLQRef, error) {
	q := r.URL.Query()
	ref := engine.DLQRef{ID: r.PathValue("id"), Queue: q.Get("queue"), Tenant: q.Get("tenant"), Source: q.Get("source")}
	if ref.Tenant != "" {
		if err := tenantParam("tenant", ref.Tenant); err != nil {
			return ref, err
		}
	}
	if err := checkRef(ref.ID); err != nil {
		return ref, err
	}
	if ref.Queue != "" && (len(ref.Queue) > maxRefLen || !strings.HasPrefix(ref.Queue, config.InboxQueuePrefix)) {
		return ref, switchyard.Errorf(switchyard.EINVALIDREQUEST, "queue names an inbox: inbox:<name>")
	}
	return ref, nil
}

// parseSince reads a since filter: an RFC 3339 time, or a duration meaning
// that long before now ("1h").
func parseSince(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, switchyard.Errorf(switchyard.EINVALIDREQUEST, "since %q: give an RFC 3339 time (2026-01-02T15:04:05Z) or a duration (1h)", switchyard.Truncate(v, 64))
}

// DLQItem is one dead letter in a listing (GET /v1/dlq's items). The
// answers' shapes are exported for the router's own client (router dlq,
// router stats), so that both sides read one definition.
type DLQItem struct {
	ID         string        `json:"id"`
	Queue      string        `json:"queue,omitempty"` // an inbox's records: inbox:<name>
	Type       string        `json:"type"`
	Source     string        `json:"source"`
	Tenant     string        `json:"tenant"`
	State      storage.State `json:"state"`
	Attempts   int           `json:"attempts"`
	Reason     string        `json:"reason"`
	CreatedAt  time.Time     `json:"created_at"`
	MovedAt    *time.Time    `json:"moved_at,omitempty"`
	ResolvedAt *time.Time    `json:"resolved_at,omitempty"`
}

// DLQDetail is GET /v1/dlq/{id}: the item, every attempt, the outputs
// and the event itself.
type DLQDetail struct {
	DLQItem
	History []storage.Attempt `json:"history"`
	Outputs []storage.Output  `json:"outputs"`
	// and "event": the event in the JSON format (withEvent)
}

func dlqItemOf(it *engine.DLQItem) DLQItem {
	rec := it.Record
	v := DLQItem{
		ID: rec.Event.ID, Queue: rec.Queue, Type: rec.Event.Type, Source: rec.Event.Source, Tenant: rec.Tenant,
		State: rec.State, Attempts: rec.Attempts, Reason: rec.LastError, CreatedAt: rec.CreatedAt,
	}
	at := it.At
	if rec.State == storage.StateResolved {
		v.ResolvedAt = &at
	} else {
		v.MovedAt = &at
	}
	return v
}

func dlqDetailOf(it *engine.DLQItem) DLQDetail {
	rec := it.Record
	v := DLQDetail{DLQItem: dlqItemOf(it), History: rec.History, Outputs: rec.Outputs}
	if v.History == nil {
		v.History = []storage.Attempt{}
	}
	if v.Outputs == nil {
		v.Outputs = []storage.Output{}
	}
	return v
}

func (s *Server) listDLQ(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	query := engine.DLQQuery{Type: q.Get("type"), Status: storage.State(q.Get("status")), Cursor: q.Get("cursor")}
	var err error
	if query.Since, err = parseSince(q.Get("since"), s.opts.Now()); err != nil {
		s.writeError(w, r, err)
		return
	}
	if query.Limit, err = queryInt(r, "limit", engine.DLQPageDefault, engine.DLQPageMax); err != nil {
		s.writeError(w, r, err)
		return
	}
	page, err := s.engine.DLQList(query)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	items := make([]DLQItem, len(page.Items))
	for i := range page.Items {
		items[i] = dlqItemOf(&page.Items[i])
	}
	resp := map[string]any{"items": items}
	if page.NextCursor != "" {
		resp["next_cursor"] = page.NextCursor
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) getDLQ(w http.ResponseWriter, r *http.Request) {
	ref, err := dlqRef(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	it, err := s.engine.DLQGet(ref)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeWithEvents(w, http.StatusOK, withEvent(dlqDetailOf(it), &it.Record.Event))
}

func (s *Server) retryDLQ(w http.ResponseWriter, r *http.Request) {
	ref, err := dlqRef(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	rec, err := s.engine.DLQRetry(r.Context(), ref)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.Info("dead letter retried", "id", ref.ID, "queue", rec.QueueName(), "by", actor(r))
	writeJSON(w, http.StatusOK, viewOf(rec))
}

func (s *Server) resolveDLQ(w http.ResponseWriter, r *http.Request) {
	ref, err := dlqRef(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	it, err := s.engine.DLQResolve(r.Context(), ref)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.Info("dead letter resolved", "id", ref.ID, "queue", it.Record.QueueName(), "by", actor(r))
	writeJSON(w, http.StatusOK, dlqItemOf(it))
}

func (s *Server) deleteDLQ(w http.ResponseWriter, r *http.Request) {
	ref, err := dlqRef(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.engine.DLQDelete(r.Context(), ref); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.Info("dead letter deleted", "id", ref.ID, "by", actor(r))
	w.WriteHeader(http.StatusNoContent)
}

// dlqFilterBody is the body of the bulk routes.
type dlqFilterBody struct {
	Type   string   `json:"type"`
	Status string   `json:"status"`
	Since  string   `json:"since"`
	IDs    []string `json:"ids"`
	Tenant string   `json:"tenant"`
	Source string   `json:"source"`
	All    bool     `json:"all"`
}

func (s *Server) bulkDLQ(action engine.DLQAction) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f, err := s.readFilter(w, r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		var res *engine.DLQBulkResult
		switch action {
		case engine.DLQActionRetry:
			res, err = s.engine.DLQRetryMany(r.Context(), f)
		case engine.DLQActionResolve:
			res, err = s.engine.DLQResolveMany(r.Context(), f)
		case engine.DLQActionDelete:
			res, err = s.engine.DLQDeleteMany(r.Context(), f)
		default: // an action added to engine.DLQActions without its case here
			err = fmt.Errorf("no bulk %q: the API has no case for it", action)
		}
		if res != nil && res.Done > 0 {
			s.log.Info("dead letters "+string(action)+" (bulk)", "done", res.Done, "matched", res.Matched, "type", f.Type, "ids", len(f.IDs), "by", actor(r))
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, dlqBulkOf(res))
	}
}

// DLQStats is one queue's line of GET /v1/dlq/stats.
type DLQStats struct {
	Type     string `json:"type,omitempty"`
	DLQ      int    `json:"dlq"`
	Resolved int    `json:"resolved"`
}

// DLQBulk is the answer to a bulk DLQ action.
type DLQBulk struct {
	Action   engine.DLQAction `json:"action"`
	Matched  int              `json:"matched"`
	Done     int              `json:"done"`
	NotFound []string         `json:"not_found"`
	Skipped  []DLQSkip        `json:"skipped"`
}

// DLQSkip is a dead letter a bulk action did not act on, and why.
type DLQSkip struct {
	ID     string          `json:"id"`
	Code   switchyard.Code `json:"code"`
	Reason string          `json:"reason"`
}

func dlqBulkOf(r *engine.DLQBulkResult) DLQBulk {
	v := DLQBulk{Action: r.Action, Matched: r.Matched, Done: r.Done, NotFound: r.NotFound, Skipped: []DLQSkip{}}
	if v.NotFound == nil {
		v.NotFound = []string{}
	}
	for _, sk := range r.Skipped {
		v.Skipped = append(v.Skipped, DLQSkip{ID: sk.ID, Code: sk.Code, Reason: sk.Reason})
	}
	return v
}

// readFilter decodes a bulk filter strictly: an unknown field (a typo such
// as "typ") is an error, not a filter that selects more than meant.
func (s *Server) readFilter(w http.ResponseWriter, r *http.Request) (engine.DLQFilter, error) {
	var f engine.DLQFilter
	body, err := s.readBody(w, r)
	if err != nil {
		return f, err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return f, switchyard.Errorf(switchyard.EINVALIDREQUEST, `the body is a JSON filter: {"type": ..., "since": ..., "ids": [...]} or {"all": true}`)
	}
	var b dlqFilterBody
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return f, switchyard.Errorf(switchyard.EINVALIDREQUEST, "the filter is not valid: %v (fields: type, status, since, ids, tenant, source, all)", err)
	}
	if dec.More() {
		return f, switchyard.Errorf(switchyard.EINVALIDREQUEST, "the body holds more than one JSON value")
	}
	if len(b.IDs) > engine.DLQMaxIDs {
		return f, switchyard.Errorf(switchyard.ETOOLARGE, "%d ids; at most %d per request", len(b.IDs), engine.DLQMaxIDs)
	}
	for i, id := range b.IDs {
		if err := checkRef(id); err != nil {
			return f, switchyard.Errorf(switchyard.EINVALIDREQUEST, "ids[%d]: %s", i, err.(*switchyard.Error).Message)
		}
	}
	f = engine.DLQFilter{Type: b.Type, Status: storage.State(b.Status), IDs: b.IDs, Tenant: b.Tenant, Source: b.Source, All: b.All}
	if f.Since, err = parseSince(b.Since, s.opts.Now()); err != nil {
		return f, err
	}
	return f, nil
}

func (s *Server) dlqStats(w http.ResponseWriter, r *http.Request) {
	stats, err := s.engine.DLQStats()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var total DLQStats
	views := make([]DLQStats, len(stats))
	for i, st := range stats {
		views[i] = DLQStats{Type: st.Type, DLQ: st.DLQ, Resolved: st.Resolved}
		total.DLQ += st.DLQ
		total.Resolved += st.Resolved
	}
	writeJSON(w, http.StatusOK, map[string]any{"types": views, "total": map[string]int{"dlq": total.DLQ, "resolved": total.Resolved}})
}
