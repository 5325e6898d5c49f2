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
// The connection closed is the one idle the longest; its client sees its
// keep-alive connection closed, as after the server's IdleTimeout, and
// connects again.
type connLimit struct {
	net.Listener
	max int

	mu     sync.Mutex
	conns  map[*limitedConn]time.Time // open connections: idle since, zero = busy
	freed  chan struct{}              // closed and replaced when a place may be free
	closed chan struct{}              // closed by Close
	close  sync.Once
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
			l.conns[lc] = time.Time{}
			l.mu.Unlock()
			return lc, nil
		}
		idle := l.longestIdle()
		freed := l.freed
		l.mu.Unlock()
		if idle != nil {
			idle.Close() // its place is free once it is closed: look again
			continue
		}
		select {
		case <-freed:
		case <-l.closed:
			c.Close()
			return nil, net.ErrClosed
		}
	}
}

// longestIdle is the connection idle the longest, or nil. l.mu is held.
func (l *connLimit) longestIdle() *limitedConn {
	var oldest *limitedConn
	var since time.Time
	for c, t := range l.conns {
		if !t.IsZero() && (oldest == nil || t.Before(since)) {
			oldest, since = c, t
		}
	}
	return oldest
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
	l    *connLimit
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c) })
	return err
}
