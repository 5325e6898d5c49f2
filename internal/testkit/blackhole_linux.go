package testkit

import (
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"
)

// Blackhole makes 127.0.0.1:port an address that drops connection attempts
// (port 0: a free one), as a host gone dark or a network that drops packets
// does: a dial there is neither taken nor refused, it times out. It returns
// the address; the port is given back when the test ends (or at the
// returned stop, for a broker that comes back on it).
//
// How: a listening socket with a backlog of 0 that never accepts. Its one
// queued connection (a dial of Blackhole's own) fills the accept queue, and
// Linux drops the SYN of every dial after it.
func Blackhole(t testing.TB, port int) (addr string, stop func()) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	stop = func() {
		if !closed {
			closed = true
			syscall.Close(fd)
		}
	}
	t.Cleanup(stop)
	// A broker just stopped on this port leaves connections in TIME_WAIT.
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("blackhole on port %d: %v", port, err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr = fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	fillAcceptQueue(t, addr)
	return addr, stop
}

// fillAcceptQueue dials addr until a dial times out: the queue is full.
func fillAcceptQueue(t testing.TB, addr string) {
	t.Helper()
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				return
			}
			t.Fatalf("blackhole %s: %v", addr, err)
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Fatalf("blackhole %s: still taking connections after 8 dials", addr)
}
