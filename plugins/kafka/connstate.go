package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/twmb/franz-go/pkg/kgo"
)

// connState remembers why the client's last connection to a broker failed
// (dial, TLS handshake, SASL authentication: kgo reports each through
// OnBrokerConnect), so that a publish that times out says why instead of
// only "no acknowledgement", and a wrong password is logged once, not
// retried in silence. It also knows, per broker address, whether the last
// connection attempt failed: when it did for every broker the client has
// tried, the cluster is down (down), and the sink answers at once instead
// of waiting its publish timeout for every batch.
type connState struct {
	log  hclog.Logger
	sasl bool // the client authenticates after connecting

	mu      sync.Mutex
	err     error // nil after a connection succeeded
	addr    string
	at      time.Time
	failing map[string]bool // per broker address: its last connection attempt failed
	// brokers are the addresses of discovered brokers (a node id of their
	// own), as opposed to seeds: once one has been dialled, the seeds'
	// marks no longer say whether the cluster is down (aliasLocked).
	brokers map[string]bool
	ready   func() // switchyard.ReadyNotifier: called when a connection succeeds after one failed
	// isDown is what downLocked said at the last change (changed), and
	// downC is closed while it is true (wentDown), made anew when the
	// cluster is up again. Kept, not derived from a "before": a broker
	// discovered turns the seeds into aliases, which changes downLocked
	// by itself, and a transition judged from a "before" read after that
	// closed downC twice (a panic) or left it closed while up (every
	// publish cut short at once, seen in CI).
	isDown bool
	downC  chan struct{}
	// onDown is called, on a goroutine of its own, when the cluster goes
	// down (the sink watches for its return: Sink.watch).
	onDown func()
	// lives counts the signs of life: a response read from any broker, a
	// connection that succeeded, a probe answered. A silence is called
	// only if none came while it was being checked (silent).
	lives atomic.Uint64
}

func newConnState(log hclog.Logger, sasl bool) *connState {
	return &connState{log: log, sasl: sasl, failing: map[string]bool{}, brokers: map[string]bool{}, downC: make(chan struct{})}
}

var (
	_ kgo.HookBrokerConnect = (*connState)(nil)
	_ kgo.HookBrokerRead    = (*connState)(nil)
)

// OnBrokerRead counts a response read as a sign of life: a broker that
// answers anything (a produce, on a slow link) is not silent, even when
// the probe's request waited behind the produce on kgo's per-broker
// goroutine and went unanswered in time.
func (c *connState) OnBrokerRead(_ kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	if err == nil {
		c.lives.Add(1)
	}
}

func (c *connState) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, conn net.Conn, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	addr := net.JoinHostPort(meta.Host, fmt.Sprint(meta.Port))
	if meta.NodeID >= 0 {
		c.brokers[addr] = true
	}
	if err == nil || !callerGaveUp(err) {
		c.failing[addr] = err != nil
	}
	if err == nil {
		c.lives.Add(1)
	}
	c.changed()
	if err == nil && c.aliasLocked(addr) {
		// A load balancer in front of a cluster that is gone may still
		// take connections: that is no broker back.
		return
	}
	if err == nil {
		if c.err != nil && c.ready != nil {
			go c.ready()
		}
		c.err = nil
		return
	}
	if conn != nil && c.sasl {
		// Dialled, then failed while setting up the connection: with SASL,
		// a broker that refuses the credentials may just close it (EOF).
		err = fmt.Errorf("%w (the broker ended the connection while the client authenticated: check the sasl mechanism, username and password)", err)
	}
	if c.err == nil || c.err.Error() != err.Error() {
		c.log.Warn("cannot connect to a broker", "broker", addr, "error", err)
	}
	c.err, c.addr, c.at = err, addr, time.Now()
}

// callerGaveUp reports whether a connection attempt ended because its
// caller stopped waiting (a dial it cut short, errGaveUp, or the set-up
// after the dial cancelled): that says nothing about the broker. A dial
// that timed out by itself does: the broker, or the way to it, drops
// packets.
func callerGaveUp(err error) bool {
	var g *errGaveUp
	return errors.As(err, &g) || errors.Is(err, context.Canceled)
}

// lastError is why the last connection attempt failed, or nil when it
// succeeded.
func (c *connState) lastError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		return nil
	}
	return fmt.Errorf("the last connection to %s failed %s ago: %w", c.addr, time.Since(c.at).Round(time.Millisecond), c.err)
}

// down reports whether the last connection attempt to every broker the
// client has tried failed: no broker is reachable, as far as the client
// knows. (A broker whose connection succeeded and is now gone counts as up
// until the client fails to connect to it again.) Once brokers are
// discovered, the seeds do not count (aliasLocked).
func (c *connState) down() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.downLocked()
}

func (c *connState) downLocked() bool {
	known := false
	for addr, failed := range c.failing {
		if c.aliasLocked(addr) {
			continue
		}
		if !failed {
			return false
		}
		known = true
	}
	return known
}

// aliasLocked reports whether addr is only a seed's once a discovered
// broker has been dialled. Such a seed may be an alias of the cluster (a
// load balancer, a DNS name) that kgo dials only now and then, for
// metadata: its mark may be old, or be a load balancer's answer while no
// broker behind it is up. Until a discovered broker's dial says something
// (one its caller cancelled says nothing), the seeds are all the client
// knows.
func (c *connState) aliasLocked(addr string) bool {
	if c.brokers[addr] {
		return false
	}
	for b := range c.brokers {
		if _, dialled := c.failing[b]; dialled {
			return true
		}
	}
	return false
}

// reachable records that a broker answered a request (a probe): the
// cluster is not down, whatever connection last failed to open — kgo opens
// several connections per broker and reports only the dials, so a failed
// produce connection beside a live one would otherwise keep the sink
// "down" with nothing left to dial it again. It calls the ready function
// if the sink was down.
//
// Only a cluster that is down is touched: the marks of a cluster some of
// whose brokers fail stay (Healthy calls this at every scrape), and the
// brokers already tried stay known, so that one more failed dial to one of
// several does not make the cluster "down".
func (c *connState) reachable() {
	c.lives.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.downLocked() {
		return
	}
	if c.ready != nil {
		go c.ready()
	}
	for addr := range c.failing {
		c.failing[addr] = false
	}
	c.err = nil
	c.changed()
}

// silent marks every broker tried as failing, the cluster down: none
// answered a probe after a publish went unanswered (Sink.checkSilent),
// though their connections may still be open (kgo ends them only at its
// request timeouts). Nothing happens if a sign of life came since seen
// (lives, read before the probe): a response read, a connection or a
// probe that succeeded meanwhile is newer news than the probe's. A probe
// that gets an answer (reachable), or a connection that succeeds, makes it
// up again.
func (c *connState) silent(err error, seen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.downLocked() || c.lives.Load() != seen {
		return
	}
	for addr := range c.failing {
		c.failing[addr] = true
	}
	c.log.Warn("no broker answers: the connections to the cluster went silent", "error", err)
	c.err, c.addr, c.at = err, "the cluster", time.Now()
	c.changed()
}

// changed acts on a change of the failing marks or of the brokers known:
// the cluster went down (close downC, start onDown) or is up again (a new
// downC, and a line in the log, the only sign an operator gets that the
// warnings are over).
func (c *connState) changed() {
	down := c.downLocked()
	if down == c.isDown {
		return
	}
	c.isDown = down
	if down {
		close(c.downC)
		if c.onDown != nil {
			go c.onDown()
		}
		return
	}
	c.downC = make(chan struct{})
	c.log.Info("a broker is reachable again")
}

// wentDown returns a channel that is closed once the cluster is down
// (at once if it is).
func (c *connState) wentDown() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.downC
}

// withConnError adds to an unknown outcome why connecting to a broker last
// failed, if it did: "no acknowledgement" alone does not say that the
// password is wrong.
func (s *Sink) withConnError(err error) error {
	if connErr := s.conn.lastError(); connErr != nil {
		return fmt.Errorf("%w; %w", err, connErr)
	}
	return err
}

// OnReady registers the function called when a broker connection succeeds
// after one failed (switchyard.ReadyNotifier): a router that started without
// its cluster, or one that was away, publishes at once.
func (s *Sink) OnReady(fn func()) {
	s.conn.mu.Lock()
	s.conn.ready = fn
	s.conn.mu.Unlock()
}
