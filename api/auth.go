package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-router/switchyard"
)

// Who may do what (contract §4):
//
//   - The unix socket is guarded by its file permissions (0660): whoever can
//     connect is trusted, acts for the tenant of its X-Tenant header, and
//     may use the admin routes.
//   - The TCP listener (listen { http }) trusts nothing: every request but
//     GET /healthz needs "Authorization: Bearer <token>" with a token of
//     tokens_file. The token decides the tenant (X-Tenant is ignored) and
//     whether the admin routes (DLQ, stats, metrics) are allowed.
//
// tokens_file is JSON:
//
//	{"tokens": [
//	  {"token": "a-long-random-secret", "tenant": "acme"},
//	  {"sha256": "<hex of sha256(token)>", "tenant": "ops", "admin": true}
//	]}
//
// "sha256" lets the file hold digests instead of secrets. Tokens are
// compared as SHA-256 digests in constant time, against every entry.

// minTokenLen refuses tokens short enough to guess.
const minTokenLen = 16

// principal is who a request acts for.
type principal struct {
	local  bool   // came over the unix socket
	tenant string // from the token (TCP); "" on the socket: X-Tenant decides
	admin  bool
	digest [sha256.Size]byte // the token's (TCP): a stream ends when a reload revokes it
}

type principalKey struct{}

func principalOf(ctx context.Context) *principal {
	p, _ := ctx.Value(principalKey{}).(*principal)
	return p
}

type connKindKey struct{}

// localPrincipal is who every request over the unix socket acts for.
// Shared by all of them: nothing writes a principal once made.
var localPrincipal = &principal{local: true, admin: true}

// connContext marks each connection with whether it came over a unix
// socket. Anything else (TCP, or a socket-activated listener of another
// kind) must authenticate: fail closed. A unix connection's requests all
// act for localPrincipal, so it is set once here, not per request (a
// request copy, a context and a principal each).
func connContext(ctx context.Context, c net.Conn) context.Context {
	if lc, limited := c.(*limitedConn); limited {
		ctx = context.WithValue(ctx, limitedConnKey{}, lc) // for connLimit.serve
	}
	_, unix := c.(*net.UnixConn)
	ctx = context.WithValue(ctx, connKindKey{}, unix)
	if unix {
		ctx = context.WithValue(ctx, principalKey{}, localPrincipal)
	}
	return ctx
}

func isLocal(r *http.Request) bool {
	unix, _ := r.Context().Value(connKindKey{}).(bool)
	return unix
}

// Tokens is a loaded tokens_file.
type Tokens struct {
	entries []tokenEntry
	tenants int // how many tenants the tokens that are not admin name
}

type tokenEntry struct {
	digest [sha256.Size]byte
	tenant string
	admin  bool
}

// lookup finds the entry of a presented token by its SHA-256 digest d. It
// compares d with every entry, without stopping early, so the time it
// takes says nothing about which entry (or how much of one) matched.
func (t *Tokens) lookup(d [sha256.Size]byte) (tokenEntry, bool) {
	if t == nil {
		return tokenEntry{}, false
	}
	var found tokenEntry
	ok := 0
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare(d[:], e.digest[:]) == 1 {
			found, ok = e, 1
		}
	}
	return found, ok == 1
}

// Tenants are the tenants of the tokens that are not admin tokens: those a
// tenant block can bound.
func (t *Tokens) Tenants() []string {
	var out []string
	for _, e := range t.entries {
		if !e.admin && !slices.Contains(out, e.tenant) {
			out = append(out, e.tenant)
		}
	}
	slices.Sort(out)
	return out
}

// Len is the number of tokens.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.entries)
}

// bearer returns the token of an "Authorization: Bearer" header.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// authenticate decides who a request acts for, or answers 401.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isLocal(r) {
			next.ServeHTTP(w, r) // connContext set localPrincipal
			return
		}
		if r.Method == http.MethodGet && r.URL.Path == "/healthz" || isConsoleFile(r) {
			// Liveness says nothing, and probes carry no token; the
			// console's files hold nothing secret (console.go). Neither
			// reads a body.
			endUnread(w, r)
			next.ServeHTTP(w, r)
			return
		}
		tok, ok := bearer(r)
		if !ok {
			s.unauthorized(w, r, `Bearer realm="switchyard"`, "this listener needs an Authorization: Bearer token")
			return
		}
		d := sha256.Sum256([]byte(tok))
		tokens := s.tokens.Load()
		e, ok := tokens.lookup(d)
		if !ok {
			s.unauthorized(w, r, `Bearer realm="switchyard", error="invalid_token"`, "the bearer token is not valid")
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), principalKey{}, &principal{tenant: e.tenant, admin: e.admin, digest: d}))
		if !e.admin && tokens.tenants > 1 {
			s.servePlaced(w, r, e.tenant, next)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// servePlaced serves r as one of tenant's requests in progress, within
// its half of the TCP listener's places (tenantPlaces), or answers 429.
// The place is given back once what the handler left of the body is
// read, or its connection is ending (endRead).
func (s *Server) servePlaced(w http.ResponseWriter, r *http.Request, tenant string, next http.Handler) {
	if err := s.places.take(tenant); err != nil {
		s.metrics.places.WithLabelValues(tenant).Inc()
		endUnread(w, r)
		s.writeError(w, r, err)
		return
	}
	defer s.places.give(tenant)
	if r.ContentLength != 0 {
		body := &eofReader{ReadCloser: r.Body}
		r.Body = body
		defer endRead(w, body)
	}
	next.ServeHTTP(w, r)
}

// unauthorized answers a request without a valid token 401 (endUnread).
func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request, challenge, why string) {
	w.Header().Set("WWW-Authenticate", challenge)
	endUnread(w, r)
	s.writeError(w, r, switchyard.Errorf(switchyard.EUNAUTHORIZED, "%s", why))
}

// endUnread makes a request that carries a body its handler will not read
// end its connection once answered, the body unread: net/http reads up to
// 256 KiB of a body the handler left, as slowly as the client sends it,
// before it goes on, the connection busy (connLimit) until read_timeout,
// even with Connection: close. A read deadline already passed ends that
// read at once (it stops no write: the answer goes out).
func endUnread(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength == 0 {
		return
	}
	w.Header().Set("Connection", "close")
	http.NewResponseController(w).SetReadDeadline(time.Now())
}

// endRead ends what the handler left of a request's body before its
// tenant's place is given back: the rest is read if it comes within
// unreadGrace, else the connection ends after the answer. Left to
// net/http, it would be read after the handler, as slowly as the client
// sends it, until read_timeout, the connection busy and its tenant's
// place no longer counted (a review: 404s and 403s to stalled bodies held
// every place so). A body read to its end is left alone: net/http may be
// reading the connection already (its background read), and a deadline
// set now would end that read.
func endRead(w http.ResponseWriter, body *eofReader) {
	if body.eof {
		return
	}
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(unreadGrace))
	io.Copy(io.Discard, io.LimitReader(body, maxUnreadBody))
}

const (
	unreadGrace   = 10 * time.Millisecond
	maxUnreadBody = 256 << 10 // what net/http reads of a body its handler left
)

// eofReader is a request body that says whether it was read to its end.
type eofReader struct {
	io.ReadCloser
	eof bool
}

func (b *eofReader) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.eof = true // the end, or the body cannot be read further
	}
	return n, err
}

// adminOnly guards the operator routes: DLQ, stats, metrics.
func (s *Server) adminOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := principalOf(r.Context()); p == nil || !p.admin {
			s.writeError(w, r, switchyard.Errorf(switchyard.EFORBIDDEN, "this route needs an admin token"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) adminFunc(h http.HandlerFunc) http.Handler { return s.adminOnly(h) }

// actor names who did an operator action, for the log.
func actor(r *http.Request) string {
	p := principalOf(r.Context())
	switch {
	case p == nil:
		return "unknown"
	case p.local:
		return "socket"
	}
	return "token:" + p.tenant
}
