package nats

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
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
	url    atomic.Value // string: the server last connected to (redacted), for the log
	mu     sync.Mutex
	err    error // why the last connection attempt failed
	// ups counts the times the connection came up (connected).
	ups atomic.Uint64
}

// noteURL records the server nc is connected to.
func (w *connWatch) noteURL(nc *natsgo.Conn) {
	if u := nc.ConnectedUrlRedacted(); u != "" {
		w.url.Store(u)
	}
}

// lastURL is the server last connected to ("" before any).
func (w *connWatch) lastURL() string {
	u, _ := w.url.Load().(string)
	return u
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
	w.ups.Add(1)
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

// options are the options of every connection the router makes
// (reconnecting, under name) and the handlers that keep w: the status, why
// the last attempt failed (a refusal of the credentials among them:
// asyncErrors, which also logs). up runs, in nats.go's handler goroutine,
// after each connection is made (first: the connection's first); closed,
// if not nil, once it is closed for good.
func (w *connWatch) options(name string, log hclog.Logger, writeTimeout time.Duration, up func(nc *natsgo.Conn, first bool), closed func()) []natsgo.Option {
	return append(reconnecting(name),
		natsgo.DisconnectErrHandler(func(_ *natsgo.Conn, err error) {
			w.set(natsgo.RECONNECTING)
			if err != nil {
				w.failed(err)
				log.Warn("disconnected from NATS", "url", w.lastURL(), "error", err)
			} else {
				log.Debug("disconnected from NATS", "url", w.lastURL())
			}
		}),
		natsgo.ConnectHandler(func(nc *natsgo.Conn) {
			w.connected()
			w.noteURL(nc)
			up(nc, true)
		}),
		natsgo.ReconnectErrHandler(func(_ *natsgo.Conn, err error) { w.failed(err) }),
		natsgo.ReconnectHandler(func(nc *natsgo.Conn) {
			w.connected()
			w.noteURL(nc)
			up(nc, false)
		}),
		natsgo.ClosedHandler(func(*natsgo.Conn) {
			w.set(natsgo.CLOSED)
			if closed != nil {
				closed()
			}
		}),
		// A write the server's socket does not take (its buffer full, the
		// way silent: a publish, an ack) holds the connection's lock, and
		// Close, until it fails: no longer than a publish may take
		// (nats.go's default is a minute).
		natsgo.FlusherTimeout(writeTimeout),
		natsgo.ErrorHandler(asyncErrors(log, w)),
	)
}
