package api

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// connLimit holds the TCP listener to max open connections, as
// golang.org/x/net/netutil.LimitListener did, with one difference: a
// connection that waits for its next request (idle, by the server's
// ConnState) gives its place up to a new client. With LimitListener, any
// local user could keep max_connections idle keep-alive connections open
// (a request to /healthz, which needs no token, now and then) and lock
// everyone else out for as long as they liked. A connection busy with a
// request is not given up: a client that stalls mid-request is held only
// for listen.read_timeout, and one that does not read its answer for as
// long after each write (answerDeadline).
//
// Accept takes the next connection off the kernel's backlog only when it
// can serve it: while every connection is busy, Accept holds the one it
// has and waits, so a flood costs one file descriptor here, not one each.
// A new connection is idle until its first request is read, once a grace
// of a second is over (firstRequestGrace): one that sends nothing, or
// never finishes its headers (read before the token is checked), gives
// its place up as a keep-alive connection does (they held it for up to
// 10 s, and any local user without a token could keep every place so: a
// multi-tenant trial). A request with a body but no valid token (or to a
// route that needs none) is answered at once and its connection closed,
// its body unread (endUnread).
// The connection closed is the one idle the longest; its client sees its
// keep-alive connection closed, as after the server's IdleTimeout, and
// connects again.
//
// A connection chosen to be closed takes no request with it: its next
// request may have been read between the choice and the close, and
// serving it would store an event whose answer the close cuts off (a
// multi-tenant trial: 216 of 45,862). serve, the TCP server's outermost
// handler, marks the connection busy before a request is served, under
// the lock the choice is made under; a request on a connection already
// chosen is dropped unserved, with the connection, as if it had come a
// moment later.
type connLimit struct {
	net.Listener
	max int

	mu     sync.Mutex
	conns  map[*limitedConn]time.Time // open connections: idle since (a new one: its grace's end), zero = busy
	freed  chan struct{}              // closed and replaced when a place may be free
	closed chan struct{}              // closed by Close
	close  sync.Once
}

// LimitConnections holds srv, which will serve ln, to max open
// connections (connLimit), and returns the listener to serve: the API's
// TCP listener (listen.max_connections), pprof's and router ui's.
func LimitConnections(srv *http.Server, ln net.Listener, max int) net.Listener {
	limit := newConnLimit(ln, max)
	srv.ConnState = limit.track
	srv.Handler = limit.serve(srv.Handler)
	return limit
}

func newConnLimit(ln net.Listener, max int) *connLimit {
	return &connLimit{Listener: ln, max: max, conns: make(map[*limitedConn]time.Time),
		freed: make(chan struct{}), closed: make(chan struct{})}
}

// Close closes the listener, and lets go of a connection Accept holds.
func (l *connLimit) Close() error {
	l.close.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// Accept returns the next connection once it has a place.
func (l *connLimit) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	lc := &limitedConn{Conn: c, l: l}
	for {
		l.mu.Lock()
		if len(l.conns) < l.max {
			l.conns[lc] = time.Now().Add(firstRequestGrace) // idle, once its grace is over, until its first request is read
			l.mu.Unlock()
			return lc, nil
		}
		idle, next := l.longestIdle(time.Now())
		if idle != nil {
			idle.chosen = true
		}
		freed := l.freed
		l.mu.Unlock()
		if idle != nil {
			idle.Close() // its place is free once it is closed: look again
			continue
		}
		if err := l.wait(freed, next); err != nil {
			c.Close()
			return nil, err
		}
	}
}

// firstRequestGrace is how long a new connection keeps its place while
// its first request comes in: a client sends its headers at once, and one
// that does not gives its place up after this as an idle one does. (With
// none, more clients than places closed each other's new connections
// before their first requests arrived.)
const firstRequestGrace = time.Second

// wait waits until a place may be free, or the time next (zero: no time)
// when a new connection's grace is over.
func (l *connLimit) wait(freed <-chan struct{}, next time.Time) error {
	var over <-chan time.Time
	if !next.IsZero() {
		t := time.NewTimer(time.Until(next))
		defer t.Stop()
		over = t.C
	}
	select {
	case <-freed:
	case <-over:
	case <-l.closed:
		return net.ErrClosed
	}
	return nil
}

// longestIdle is the connection idle the longest at now, or nil and the
// time the first that will be is (zero: none). l.mu is held.
func (l *connLimit) longestIdle(now time.Time) (oldest *limitedConn, next time.Time) {
	var since time.Time
	for c, t := range l.conns {
		switch {
		case t.IsZero() || c.chosen:
		case t.After(now):
			if next.IsZero() || t.Before(next) {
				next = t
			}
		case oldest == nil || t.Before(since):
			oldest, since = c, t
		}
	}
	if oldest != nil {
		next = time.Time{}
	}
	return oldest, next
}

// track is the server's ConnState: it marks connections idle and busy.
func (l *connLimit) track(c net.Conn, state http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, open := l.conns[lc]; !open {
		return
	}
	switch state {
	case http.StateIdle:
		l.conns[lc] = time.Now()
		l.wakeLocked()
	case http.StateActive:
		l.conns[lc] = time.Time{}
	}
}

// serve serves a request only on a connection not chosen to be closed,
// which it marks busy first (connLimit's doc says why). A request on a
// chosen one ends its connection unanswered (http.ErrAbortHandler).
func (l *connLimit) serve(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if lc, ok := r.Context().Value(limitedConnKey{}).(*limitedConn); ok && !l.begin(lc) {
			panic(http.ErrAbortHandler)
		}
		next.ServeHTTP(w, r)
	})
}

// begin marks c busy, unless it was chosen to be closed.
func (l *connLimit) begin(c *limitedConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.chosen {
		return false
	}
	if _, open := l.conns[c]; open {
		l.conns[c] = time.Time{}
	}
	return true
}

// limitedConnKey is the context key of a request's *limitedConn
// (connContext puts it there).
type limitedConnKey struct{}

// release gives up c's place.
func (l *connLimit) release(c *limitedConn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.wakeLocked()
	l.mu.Unlock()
}

// wakeLocked tells a waiting Accept to look again. l.mu is held.
func (l *connLimit) wakeLocked() {
	close(l.freed)
	l.freed = make(chan struct{})
}

// limitedConn gives its place back when closed, once.
type limitedConn struct {
	net.Conn
	l      *connLimit
	once   sync.Once
	chosen bool // to be closed for a new client; l.mu guards it
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c) })
	return err
}
