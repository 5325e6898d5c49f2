package testkit

import (
	"net"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// CutListener is a server's listener (a broker's: kfake.ListenFn) whose
// connections a test can silence, as when the server's host goes dark
// after its clients connected: from Cut on, nothing a client sends reaches
// the server, nothing the server sends reaches the client, and nothing is
// reset. New connections are taken by the kernel and then left unanswered.
// Restore serves new connections again; those cut stay silent.
type CutListener struct {
	net.Listener

	mu       sync.Mutex
	gen      int
	cut      bool
	parked   []net.Conn
	released chan struct{} // closed by Close: the silenced reads end
	closed   bool
}

// Cuttable wraps ln.
func Cuttable(ln net.Listener) *CutListener {
	return &CutListener{Listener: ln, released: make(chan struct{})}
}

// Cut silences every connection open, and leaves new ones unanswered.
func (l *CutListener) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gen++
	l.cut = true
}

// Restore serves new connections again.
func (l *CutListener) Restore() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = false
}

// Accept returns the next connection taken while the listener is not cut;
// one taken while it is stays open, unanswered, until Close.
func (l *CutListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if l.cut && !l.closed {
			l.parked = append(l.parked, c)
			l.mu.Unlock()
			continue
		}
		gen := l.gen
		l.mu.Unlock()
		return &cutConn{Conn: c, l: l, gen: gen}, nil
	}
}

// Close closes the listener and the connections it left unanswered, and
// ends the silenced reads.
func (l *CutListener) Close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.released)
		for _, c := range l.parked {
			c.Close()
		}
	}
	l.mu.Unlock()
	return l.Listener.Close()
}

func (l *CutListener) live(gen int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gen == gen
}

// cutConn is a connection the server took before a cut: after it, what it
// reads is held back (the read waits for the listener's Close) and what
// it writes goes nowhere.
type cutConn struct {
	net.Conn
	l   *CutListener
	gen int
}

func (c *cutConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.l.live(c.gen) {
		<-c.l.released
		return 0, net.ErrClosed
	}
	return n, err
}

func (c *cutConn) Write(p []byte) (int, error) {
	if !c.l.live(c.gen) {
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// CutKafka is an in-process Kafka cluster whose brokers' listeners a test
// cuts, all at once or one broker at a time.
type CutKafka struct {
	*kfake.Cluster

	mu  sync.Mutex
	lns []*CutListener // in node order: kfake listens for broker 0 first
}

// CuttableKafka starts a Kafka cluster (Kafka, with opts) whose listeners
// are CutListeners.
func CuttableKafka(t testing.TB, opts ...kfake.Opt) *CutKafka {
	t.Helper()
	k := &CutKafka{}
	k.Cluster = Kafka(t, append(opts, kfake.ListenFn(k.listen))...)
	return k
}

func (k *CutKafka) listen(network, addr string) (net.Listener, error) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lns = append(k.lns, Cuttable(ln))
	return k.lns[len(k.lns)-1], nil
}

// Broker returns the listener of the broker with node ID node.
func (k *CutKafka) Broker(node int) *CutListener {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lns[node]
}

// Cut silences every broker (CutListener.Cut).
func (k *CutKafka) Cut() { k.each((*CutListener).Cut) }

// Restore serves new connections on every broker again.
func (k *CutKafka) Restore() { k.each((*CutListener).Restore) }

func (k *CutKafka) each(f func(*CutListener)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, ln := range k.lns {
		f(ln)
	}
}
