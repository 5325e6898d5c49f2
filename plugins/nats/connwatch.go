package nats

import (
	"fmt"
	"sync"
	"sync/atomic"

	natsgo "github.com/nats-io/nats.go"
)

// connWatch is a connection's state as its handlers last reported it (and
// as reconnectIfSilent leaves it), with why its last attempt failed: what
// the sink and the inbox source read where nc.Status and nc.LastError
// would wait. nats.go holds the connection's lock across a whole reconnect
// dial, 2 s to an address that drops packets, and every publish asking
// "connected?" waited for it (a review's find, measured: one publish in
// four took 2 s while the sink reconnected).
type connWatch struct {
	status atomic.Int32 // a natsgo.Status
	mu     sync.Mutex
	err    error // why the last connection attempt failed
}

// set records the connection's status.
func (w *connWatch) set(st natsgo.Status) { w.status.Store(int32(st)) }

// get is the status last recorded.
func (w *connWatch) get() natsgo.Status { return natsgo.Status(w.status.Load()) }

// failed keeps why the last connection attempt failed.
func (w *connWatch) failed(err error) {
	w.mu.Lock()
	w.err = err
	w.mu.Unlock()
}

// lastError is why the last connection attempt failed.
func (w *connWatch) lastError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// going is reconnectIfSilent's going: the connection is dropped for why.
func (w *connWatch) going(why error) {
	w.set(natsgo.RECONNECTING)
	w.failed(why)
}

// notConnected says why the connection is down, with the last connection
// error (a refused password, a server not there, a silence), or nil while
// it is up. name begins the message.
func (w *connWatch) notConnected(name string) error {
	st := w.get()
	if st == natsgo.CONNECTED {
		return nil
	}
	if last := w.lastError(); last != nil {
		return fmt.Errorf("%s: not connected (connection %s; last error: %v)", name, st, last)
	}
	return fmt.Errorf("%s: not connected (connection %s)", name, st)
}
