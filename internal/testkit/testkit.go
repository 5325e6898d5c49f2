// Package testkit holds the test helpers that more than one package needs:
// one home for each, instead of one copy per package. It is imported only
// by tests.
package testkit

import (
	"bytes"
	"context"
	"errors"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
)

// SecretFile writes content (and a newline) to a new file of mode 0600, as
// an operator stores a password or token, and returns its path.
func SecretFile(t testing.TB, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Buffer is a bytes.Buffer safe for concurrent use: the code under test
// logs into it from its own goroutines while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Stranger is the uid GiveToStranger gives files to: another user's.
const Stranger = 4242

// GiveToStranger makes path another user's (uid and gid Stranger) and
// reports true. Without root it cannot: it says so in the test's log and
// reports false, and the caller leaves out the check that needs it.
func GiveToStranger(t testing.TB, path string) bool {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Log("not root: the check of a file another user owns is skipped (chown needs root)")
		return false
	}
	if err := os.Chown(path, Stranger, Stranger); err != nil {
		t.Fatal(err)
	}
	return true
}

// Eventually polls cond every 10 ms until it holds, and fails the test
// (naming what it waited for) if it does not within d.
func Eventually(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	EventuallyWith(t, d, cond, func() string { return "waiting for " + what })
}

// EventuallyWith polls cond every 10 ms until it holds, and fails the test
// with what explain says (called at the time out, so it can show the last
// state cond saw) if it does not within d.
func EventuallyWith(t testing.TB, d time.Duration, cond func() bool, explain func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s: %s", d, explain())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FreePort returns a loopback TCP port that was free a moment ago: for a
// broker a test stops and starts again on the same address. It is taken
// below the kernel's ephemeral range, so that no bind to port 0 (an
// embedded server's "port = -1") and no outgoing connection takes it in
// the meantime: CI once saw a router's embedded NATS server take the port
// a test kept for a broker it started later. A port is handed out once per
// process.
func FreePort(t testing.TB) int {
	t.Helper()
	low := ephemeralLow()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 200 {
		p := minPort + mrand.IntN(low-minPort)
		if portsGiven[p] {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		ln.Close()
		portsGiven[p] = true
		return p
	}
	t.Fatalf("no free port in %d-%d", minPort, low-1)
	return 0
}

// minPort is the lowest port FreePort hands out.
const minPort = 10000

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// ephemeralLow is the first port of the kernel's ephemeral range (Linux:
// net.ipv4.ip_local_port_range), 32768 where it cannot be read or leaves
// too little below it.
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > minPort+1000 {
				low = n
			}
		}
	}
	return low
}

// Kafka starts an in-process Kafka cluster (franz-go's kfake) with opts
// until the test ends.
func Kafka(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// NATS starts an in-process nats-server on a free loopback port, quiet,
// with whatever set changes in its options, and waits until it takes
// connections; it shuts down when the test ends.
func NATS(t testing.TB, set func(*server.Options)) *server.Server {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true}
	if set != nil {
		set(opts)
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return ns
}

// NATSConn is a NATS connection of the test's own to url (opts: its
// credentials, say), closed when the test ends.
func NATSConn(t testing.TB, url string, opts ...natsgo.Option) *natsgo.Conn {
	t.Helper()
	nc, err := natsgo.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream is a JetStream client of the test's own on the NATS server at
// url, its connection closed when the test ends.
func JetStream(t testing.TB, url string, opts ...natsgo.Option) jetstream.JetStream {
	t.Helper()
	return JetStreamOn(t, NATSConn(t, url, opts...))
}

// StreamInfo is what the NATS server at url says of stream (opts: the
// test's credentials), and whether the stream exists.
func StreamInfo(t testing.TB, url, stream string, opts ...natsgo.Option) (*jetstream.StreamInfo, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := JetStream(t, url, opts...).Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo(), true
}

// StreamMsgs is how many messages stream holds on the NATS server at url.
func StreamMsgs(t testing.TB, url, stream string, opts ...natsgo.Option) uint64 {
	t.Helper()
	info, ok := StreamInfo(t, url, stream, opts...)
	if !ok {
		t.Fatalf("no stream %q", stream)
	}
	return info.State.Msgs
}

// JetStreamOn is a JetStream client on the connection nc.
func JetStreamOn(t testing.TB, nc *natsgo.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
