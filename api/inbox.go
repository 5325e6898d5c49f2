package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/engine"
	"github.com/switchyard-router/switchyard/storage"
)

// The inbox routes: the dedup audit, the claims arbiter, and pull delivery.
func (s *Server) inboxRoutes(mux *http.ServeMux) {
	// Claims are scoped by the caller's tenant. An inbox's audit and its
	// subscription belong to the router's operator: on TCP they need an
	// admin token, like the DLQ.
	mux.HandleFunc("POST /v1/inbox/{consumer}/claims", s.postClaim)
	mux.HandleFunc("POST /v1/inbox/{consumer}/claims/{id}/complete", s.postComplete)
	mux.HandleFunc("POST /v1/inbox/{consumer}/claims/{id}/release", s.postRelease)
	mux.Handle("GET /v1/inboxes", s.adminFunc(s.getInboxes))
	mux.Handle("GET /v1/inbox/{name}/dedup", s.adminFunc(s.getDedup))
	mux.Handle("GET /v1/claims", s.adminFunc(s.getClaims))
	mux.Handle("GET /v1/subscriptions/{name}/messages", s.adminFunc(s.getMessages))
	mux.Handle("POST /v1/subscriptions/{name}/ack", s.adminFunc(s.postAck))
}

// Limits of the inbox routes.
const (
	maxPull     = 1000
	maxPullWait = 30 * time.Second
	maxList     = 1000
)

// readJSON decodes a small JSON request body into v; an empty body leaves v
// as it is.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	if len(body) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		return switchyard.Errorf(switchyard.EINVALIDREQUEST, "the body is not the JSON this route takes: %v", err)
	}
	return nil
}

// queryInt reads an integer query parameter within [1, max]; def when absent.
func queryInt(r *http.Request, name string, def, max int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		return 0, switchyard.Errorf(switchyard.EINVALIDREQUEST, "%s must be a whole number from 1 to %d", name, max)
	}
	return n, nil
}

// queryDuration reads a duration query parameter ("5s") within [0, max].
func queryDuration(r *http.Request, name string, def, max time.Duration) (time.Duration, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > max {
		return 0, switchyard.Errorf(switchyard.EINVALIDREQUEST, "%s must be a duration such as 5s, at most %v", name, max)
	}
	return d, nil
}

func (s *Server) getDedup(w http.ResponseWriter, r *http.Request) {
	limit, err := queryInt(r, "limit", 100, maxList)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var before time.Time
	if v := r.URL.Query().Get("before"); v != "" {
		if before, err = time.Parse(time.RFC3339Nano, v); err != nil {
			s.writeError(w, r, switchyard.Errorf(switchyard.EINVALIDREQUEST, "before must be an RFC 3339 time"))
			return
		}
	}
	skips, err := s.engine.Skips(r.PathValue("name"), before, limit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if skips == nil {
		skips = []storage.Skip{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"inbox": r.PathValue("name"), "skipped": skips})
}

// claimView is a claim as the API shows it.
type claimView struct {
	ID          string             `json:"id"`
	State       storage.ClaimState `json:"state"`
	Mode        storage.ClaimMode  `json:"mode"`
	LeaseUntil  *time.Time         `json:"lease_until,omitempty"`
	CompletedAt *time.Time         `json:"completed_at,omitempty"`
	Result      json.RawMessage    `json:"result,omitempty"`
	// Token is what complete and release need: the claim's, so that a
	// holder whose lease ran out cannot act on the next holder's.
	Token string `json:"token"`
}

func viewClaim(id string, c *storage.Claim) claimView {
	v := claimView{ID: id, State: c.State, Mode: c.Mode, Result: c.Result, Token: c.Token()}
	if !c.LeaseUntil.IsZero() {
		v.LeaseUntil = &c.LeaseUntil
	}
	if !c.CompletedAt.IsZero() {
		v.CompletedAt = &c.CompletedAt
	}
	return v
}

func (s *Server) postClaim(w http.ResponseWriter, r *http.Request) {
	ten, err := tenant(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var body struct {
		ID    string            `json:"id"`
		Lease string            `json:"lease"`
		Mode  storage.ClaimMode `json:"mode"`
	}
	if err := s.readJSON(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	req := engine.ClaimRequest{Tenant: ten, Consumer: r.PathValue("consumer"), ID: body.ID, Mode: body.Mode, Operator: isOperator(r)}
	if body.Lease != "" {
		if req.Lease, err = time.ParseDuration(body.Lease); err != nil || req.Lease <= 0 {
			s.writeError(w, r, switchyard.Errorf(switchyard.EINVALIDREQUEST, "lease must be a positive duration such as 30s"))
			return
		}
	}
	c, created, err := s.engine.Claim(r.Context(), req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, viewClaim(body.ID, c))
}

func (s *Server) postComplete(w http.ResponseWriter, r *http.Request) {
	ten, err := tenant(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var body struct {
		Token  string          `json:"token"`
		Result json.RawMessage `json:"result"`
	}
	if err := s.readJSON(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	id := r.PathValue("id")
	c, err := s.engine.Complete(r.Context(), ten, r.PathValue("consumer"), id, body.Token, body.Result)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, viewClaim(id, c))
}

func (s *Server) postRelease(w http.ResponseWriter, r *http.Request) {
	ten, err := tenant(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var body struct {
		Token string `json:"token"`
	}
	if err := s.readJSON(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.engine.Release(r.Context(), ten, r.PathValue("consumer"), r.PathValue("id"), body.Token); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// pulled is one message of a pull: its event's id, the ack id that names
// it to an ack (storage.InboxRef), and "event", the event in the JSON
// format (withEvent).
type pulled struct {
	ID    string `json:"id"`
	AckID string `json:"ack_id"`
}

func (s *Server) getMessages(w http.ResponseWriter, r *http.Request) {
	max, err := queryInt(r, "max", 10, maxPull)
	if err == nil {
		var wait, lease time.Duration
		if wait, err = queryDuration(r, "wait", 0, maxPullWait); err == nil {
			if lease, err = queryDuration(r, "lease", 30*time.Second, time.Hour); err == nil {
				var recs []*storage.Record
				ctx, cancel := s.untilClosing(r) // a stop answers a waiting pull with what there is
				recs, err = s.engine.Pull(ctx, r.PathValue("name"), max, wait, lease)
				cancel()
				if err == nil {
					body := []byte(`{"messages":[`)
					for i, rec := range recs {
						if i > 0 {
							body = append(body, ',')
						}
						body = append(body, withEvent(pulled{ID: rec.Event.ID, AckID: storage.InboxRef(rec)}, &rec.Event)...)
					}
					writeWithEvents(w, http.StatusOK, append(body, "]}"...))
					return
				}
			}
		}
	}
	s.writeError(w, r, err)
}

func (s *Server) postAck(w http.ResponseWriter, r *http.Request) {
	var body struct {
		AckIDs []string `json:"ack_ids"`
		IDs    []string `json:"ids"`
	}
	if err := s.readJSON(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	if n := len(body.AckIDs) + len(body.IDs); n == 0 || n > maxPull {
		s.writeError(w, r, switchyard.Errorf(switchyard.EINVALIDREQUEST, "ack_ids and ids must list 1 to %d messages in all", maxPull))
		return
	}
	res, err := s.engine.Ack(r.Context(), r.PathValue("name"), engine.Acks{AckIDs: body.AckIDs, IDs: body.IDs})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if len(res.Ambiguous) > 0 {
		if n, ok := s.failLog.Take("ambiguous ack", s.opts.Now()); ok {
			s.log.Warn("an ack named events by ids that several pending events share (two sources chose the same id): not acked; ack them by their ack_id", "inbox", r.PathValue("name"), "ids", res.Ambiguous, "like_it_since_last", n)
		}
	}
	writeJSON(w, http.StatusOK, ackView{Acked: res.Acked, Ambiguous: res.Ambiguous})
}

// ackView is the answer to an ack.
type ackView struct {
	Acked     int      `json:"acked"`
	Ambiguous []string `json:"ambiguous,omitempty"` // ids not acked: several pending events hold each
}

// inboxView is an inbox as GET /v1/inboxes shows it.
type inboxView struct {
	Name    string    `json:"name"`
	Queue   string    `json:"queue"` // its events' queue in GET /v1/stats
	From    string    `json:"from"`
	Reads   string    `json:"reads"` // the topics or subject (not an event's source)
	Mode    inboxMode `json:"mode"`
	Deliver string    `json:"deliver,omitempty"`
	Leased  int       `json:"leased"`
}

// inboxMode is how an inbox hands its events on.
type inboxMode string

const (
	inboxPush inboxMode = "push" // delivered to its deliver URL
	inboxPull inboxMode = "pull" // taken from its subscription
)

func (s *Server) getInboxes(w http.ResponseWriter, r *http.Request) {
	views := []inboxView{}
	for _, in := range s.engine.Inboxes() {
		v := inboxView{Name: in.Name, Queue: config.InboxQueueName(in.Name), From: in.From, Reads: in.Reads, Mode: inboxPush, Deliver: in.Deliver, Leased: in.Leased}
		if in.Deliver == "" {
			v.Mode = inboxPull
		}
		views = append(views, v)
	}
	writeJSON(w, http.StatusOK, map[string]any{"inboxes": views})
}

// listedClaimView is a claim in GET /v1/claims: every tenant's, for the
// operator.
type listedClaimView struct {
	Tenant    string    `json:"tenant"`
	Consumer  string    `json:"consumer"`
	ClaimedAt time.Time `json:"claimed_at"`
	ExpiresAt time.Time `json:"expires_at"`
	claimView
}

func (s *Server) getClaims(w http.ResponseWriter, r *http.Request) {
	limit, err := queryInt(r, "limit", 100, maxList)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	claims, next, err := s.engine.Claims(r.URL.Query().Get("consumer"), r.URL.Query().Get("cursor"), limit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	views := make([]listedClaimView, len(claims))
	for i := range claims {
		c := &claims[i]
		views[i] = listedClaimView{Tenant: c.Tenant, Consumer: c.Consumer, ClaimedAt: c.ClaimedAt, ExpiresAt: c.ExpiresAt, claimView: viewClaim(c.ID, &c.Claim)}
	}
	out := map[string]any{"claims": views}
	if next != "" {
		out["next_cursor"] = next
	}
	writeJSON(w, http.StatusOK, out)
}
