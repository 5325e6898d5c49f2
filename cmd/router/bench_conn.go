package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"time"
)

// benchConn is one bench worker's keep-alive connection to the router: the
// worker writes each request and reads its response in its own goroutine.
//
// Why not net/http's client: its Transport runs two goroutines per
// connection and hands every request and response between them, which cost
// the load generator 22–30 µs of CPU per single-event request (now ~11) —
// two thirds of what the router spent on it, on the same two cores
// (BENCHMARKS.md, "Issue 14, session 9"). Responses are still parsed by
// net/http (http.ReadResponse), so any answer a server may give is read
// correctly.
type benchConn struct {
	ctx     context.Context // the worker's: cancelling it ends a request in flight
	socket  string
	timeout time.Duration // per request; 0 = none

	conn     net.Conn
	stop     func() bool // ends the AfterFunc that unblocks conn on cancel
	lastUsed time.Time
	br       *bufio.Reader
	bw       *bufio.Writer
	respBody bytes.Buffer
}

// requestHead is the request line and headers of every POST of a run: the
// bodies of a run all have the same length (client ids are written over
// same-length placeholders).
func requestHead(media string, bodyLen int) []byte {
	return fmt.Appendf(nil, "POST /v1/events HTTP/1.1\r\nHost: router\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", media, bodyLen)
}

// post sends head and body and returns the response's status and body. The
// body is valid until the next post. After an error the connection is
// closed, and the next post dials a new one.
func (c *benchConn) post(head, body []byte) (int, []byte, error) {
	if c.conn != nil && time.Since(c.lastUsed) > benchIdleReuse {
		c.close() // the server may have closed it meanwhile (its IdleTimeout)
	}
	if c.conn == nil {
		if err := c.dial(); err != nil {
			return 0, nil, err
		}
	}
	status, err := c.roundTrip(head, body)
	if err != nil {
		c.close()
		if c.ctx.Err() != nil {
			err = c.ctx.Err()
		}
		return 0, nil, err
	}
	c.lastUsed = time.Now()
	return status, c.respBody.Bytes(), nil
}

// benchIdleReuse is how long a connection may sit idle and still be used:
// well under the router's IdleTimeout (2 minutes, api/server.go), after
// which it closes the connection; net/http's client notices such a close
// while the connection is idle, this one does not.
const benchIdleReuse = 30 * time.Second

func (c *benchConn) roundTrip(head, body []byte) (int, error) {
	if c.timeout > 0 {
		if err := c.conn.SetDeadline(time.Now().Add(c.timeout)); err != nil {
			return 0, err
		}
		// A cancel between the worker's check and SetDeadline had its past
		// deadline overwritten: look again.
		if err := c.ctx.Err(); err != nil {
			return 0, err
		}
	}
	c.bw.Write(head)
	c.bw.Write(body)
	werr := c.bw.Flush()
	// A server may answer (413, 503) and close before it has read the
	// whole body, failing the write: the answer is still the result.
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return 0, cmp.Or(werr, err)
	}
	c.respBody.Reset()
	_, err = c.respBody.ReadFrom(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, err
	}
	if resp.Close || werr != nil {
		c.close()
	}
	return resp.StatusCode, nil
}

func (c *benchConn) dial() error {
	var d net.Dialer
	conn, err := d.DialContext(c.ctx, "unix", c.socket)
	if err != nil {
		return err
	}
	c.conn = conn
	c.stop = context.AfterFunc(c.ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	if c.br == nil {
		c.br = bufio.NewReaderSize(conn, 4096)
		c.bw = bufio.NewWriterSize(conn, 64<<10)
	} else {
		c.br.Reset(conn)
		c.bw.Reset(conn)
	}
	return nil
}

func (c *benchConn) close() {
	if c.conn == nil {
		return
	}
	c.stop()
	c.conn.Close()
	c.conn = nil
}
