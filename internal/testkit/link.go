package testkit

import (
	"net"
	"strconv"
	"sync"
	"testing"
)

// Link is a network path to a backend (a broker) through a loopback port
// of its own, which a test can cut silently and restore. Cut, it acts as a
// host gone dark or a NAT that lost its state does: nothing more crosses
// the open connections and no reset comes back; what a client sends fills
// the socket buffers and stays there, as on a way that drops packets (only
// faster: loopback's buffers are large, and no retransmission ends the
// connection). A new connection is neither taken nor refused: its dial
// times out (Blackhole).
type Link struct {
	t       testing.TB
	backend string
	port    int

	mu       sync.Mutex
	ln       net.Listener
	gen      int // bumped by each cut: relays of an earlier one carry nothing more
	unhole   func()
	closed   bool
	conns    []net.Conn
	released chan struct{} // closed when the link closes: the cut relays end
}

// NewLink starts a link to backend; it is closed when the test ends.
func NewLink(t testing.TB, backend string) *Link {
	t.Helper()
	l := &Link{t: t, backend: backend, released: make(chan struct{})}
	l.listen(0)
	t.Cleanup(l.close)
	return l
}

// Addr is the link's address, host:port.
func (l *Link) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(l.port)) }

// Cut stops everything from now on: the connections open stay open and
// silent for good, new ones time out.
func (l *Link) Cut() {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.unhole != nil {
		l.t.Fatal("link: cut twice")
	}
	l.gen++
	l.ln.Close()
	_, l.unhole = Blackhole(l.t, l.port)
}

// Restore takes connections to the backend again on the same port. The
// connections cut stay silent: a client finds its way back by dialling.
func (l *Link) Restore() {
	l.t.Helper()
	l.mu.Lock()
	if l.unhole == nil {
		l.mu.Unlock()
		l.t.Fatal("link: restored without a cut")
	}
	l.unhole()
	l.unhole = nil
	l.mu.Unlock()
	l.listen(l.port)
}

func (l *Link) listen(port int) {
	l.t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		l.t.Fatalf("link to %s: %v", l.backend, err)
	}
	l.mu.Lock()
	l.ln, l.port = ln, ln.Addr().(*net.TCPAddr).Port
	gen := l.gen
	l.mu.Unlock()
	go l.accept(ln, gen)
}

func (l *Link) accept(ln net.Listener, gen int) {
	for {
		front, err := ln.Accept()
		if err != nil {
			return
		}
		back, err := net.Dial("tcp", l.backend)
		if err != nil {
			front.Close()
			continue
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			front.Close()
			back.Close()
			return
		}
		l.conns = append(l.conns, front, back)
		l.mu.Unlock()
		go l.relay(back, front, gen)
		go l.relay(front, back, gen)
	}
}

// relay copies from src to dst until the link is cut (after gen); then it
// reads no more, and waits for the link to close.
func (l *Link) relay(dst, src net.Conn, gen int) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if !l.live(gen) {
			<-l.released
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

func (l *Link) live(gen int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gen == gen
}

func (l *Link) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	l.ln.Close()
	for _, c := range l.conns {
		c.Close()
	}
	close(l.released)
}
