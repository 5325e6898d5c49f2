package nats

import (
	"errors"
	"io"
	"testing"

	natsgo "github.com/nats-io/nats.go"
)

// connWatch keeps what its handlers said: a status read at dial time does
// not undo a CONNECTED a handler recorded first, the EOF that follows a
// refusal of the credentials does not replace the refusal, and a
// connection made clears the last error.
func TestConnWatch(t *testing.T) {
	var w connWatch
	w.connected()
	w.dialed(natsgo.RECONNECTING) // read before the handler ran
	if st := w.get(); st != natsgo.CONNECTED {
		t.Fatalf("status after a stale dial-time read: %s", st)
	}
	var fresh connWatch
	fresh.dialed(natsgo.RECONNECTING)
	if st := fresh.get(); st != natsgo.RECONNECTING {
		t.Fatalf("status of a connection dialed before any handler: %s", st)
	}

	w.set(natsgo.RECONNECTING)
	w.failed(natsgo.ErrAuthorization)
	w.failed(io.EOF)
	if err := w.notConnected("nats.x"); !errors.Is(w.lastError(), natsgo.ErrAuthorization) || err == nil {
		t.Fatalf("after a refusal and the EOF: last %v, %v", w.lastError(), err)
	}
	refused := errors.New("dial tcp 127.0.0.1:4222: connect: connection refused")
	w.failed(refused)
	if !errors.Is(w.lastError(), refused) {
		t.Fatalf("a later failure other than EOF: last %v", w.lastError())
	}
	w.connected()
	if err := w.notConnected("nats.x"); err != nil || w.lastError() != nil {
		t.Fatalf("connected again: %v, last %v", err, w.lastError())
	}
}
