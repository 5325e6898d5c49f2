package main

import (
	"bufio"
	"bytes"
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
// the load generator ~21 µs of CPU per single-event request — as much as
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
	return status, c.respBody.Bytes(), nil
}

func (c *benchConn) roundTrip(head, body []byte) (int, error) {
	if c.timeout > 0 {
		if err := c.conn.SetDeadline(time.Now().Add(c.timeout)); err != nil {
			return 0, err
		}
	}
	c.bw.Write(head)
	c.bw.Write(body)
	if err := c.bw.Flush(); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return 0, err
	}
	c.respBody.Reset()
	_, err = c.respBody.ReadFrom(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, err
	}
	if resp.Close {
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
