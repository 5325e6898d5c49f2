package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/engine"
)

// tailKeepAlive is how often an idle tail stream sends a comment, so that
// proxies and clients see the connection is alive.
var tailKeepAlive = 15 * time.Second // a test shortens it

// getTail streams the outputs published from now on as server-sent events
// (admin): GET /v1/tail[?type=T]. Each is one "published" event whose data
// is one line of JSON: when, the type, the destination, the broker position
// and the event as published. A watcher that falls behind loses the newest
// outputs, never slows delivery, and is told: a "dropped" event carries
// how many it has missed in all.
func (s *Server) getTail(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		s.writeError(w, r, &switchyard.Error{Code: switchyard.EINTERNAL, Message: "this connection cannot stream"})
		return
	}
	watcher, stop := s.engine.Watch(r.URL.Query().Get("type"))
	defer stop()
	ctx, cancel := s.untilClosing(r)
	defer cancel()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// Each flush moves the write deadline on first (answerDeadline): a
	// client that reads gets every write, however long the stream was quiet.
	fmt.Fprint(w, ": tailing\n\n")
	flusher.Flush()
	keepAlive := time.NewTicker(tailKeepAlive)
	defer keepAlive.Stop()
	var told uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-keepAlive.C:
			fmt.Fprint(w, ": keep-alive\n\n")
		case p := <-watcher.C:
			w.Write(tailEvent(&p))
			if n := watcher.Dropped(); n != told {
				told = n
				fmt.Fprintf(w, "event: dropped\ndata: {\"dropped\":%d}\n\n", n)
			}
		}
		flusher.Flush()
	}
}

// tailView is a published output in the tail's JSON (the event is added
// by withEvent, its data byte for byte).
type tailView struct {
	At          time.Time            `json:"at"`
	Type        string               `json:"type"`
	Tenant      string               `json:"tenant"`
	EventID     string               `json:"event_id"` // the stored event's, which a plugin may have changed in the output
	Destination string               `json:"destination"`
	Position    *switchyard.Position `json:"position,omitempty"`
}

// tailEvent is p as one server-sent event. Its data must be one line: JSON
// data that spans lines (pretty-printed) is shown compacted — the tail is
// for watching; pull and the DLQ give the bytes as stored.
func tailEvent(p *engine.Published) []byte {
	v := tailView{At: p.At, Type: p.Queue, Tenant: p.Tenant, EventID: p.EventID, Destination: p.Destination}
	if p.Position != (switchyard.Position{}) {
		v.Position = &p.Position
	}
	line := withEvent(v, &p.Event)
	if bytes.ContainsAny(line, "\r\n") {
		var c bytes.Buffer
		if json.Compact(&c, line) == nil {
			line = c.Bytes()
		} else {
			line = bytes.Map(func(r rune) rune {
				if r == '\r' || r == '\n' {
					return ' '
				}
				return r
			}, line)
		}
	}
	b := append([]byte("event: published\ndata: "), line...)
	return append(b, "\n\n"...)
}
