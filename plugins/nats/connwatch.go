package nats

import (
	"errors"
	"fmt"
	"io"
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

// dialed records the status of a connection just dialed (nc.Status), unless
// a handler has already said what became of it: read before the handler
// ran, it would undo a CONNECTED that no other handler comes to mend.
func (w *connWatch) dialed(st natsgo.Status) {
	w.status.CompareAndSwap(int32(natsgo.DISCONNECTED), int32(st))
}

// get is the status last recorded.
func (w *connWatch) get() natsgo.Status { return natsgo.Status(w.status.Load()) }

// connected records that the connection is up: no attempt has failed
// since (before, a refusal long mended stayed its "last error").
func (w *connWatch) connected() {
	w.set(natsgo.CONNECTED)
	w.failed(nil)
}

// failed keeps why the last connection attempt failed. A server that
// refuses a connection's credentials closes it, and the EOF that follows
// does not replace the refusal (nats.go hands the refusal of a reconnect
// only to the async error handler: asyncErrors).
func (w *connWatch) failed(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if errors.Is(err, io.EOF) && authRefusal(w.err) {
		return
	}
	w.err = err
}

// authRefusal says whether err is a server's refusal of the credentials.
func authRefusal(err error) bool {
	return errors.Is(err, natsgo.ErrAuthorization) || errors.Is(err, natsgo.ErrAuthExpired) ||
		errors.Is(err, natsgo.ErrAuthRevoked) || errors.Is(err, natsgo.ErrAccountAuthExpired)
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
