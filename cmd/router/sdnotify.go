package main

// systemd integration without a dependency: the notify protocol (Type=notify)
// and socket activation (a .socket unit passes the API socket as fd 3).
// See docs/systemd/.

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
)

// sdNotify sends state ("READY=1", "STOPPING=1", "STATUS=...") to the
// service manager. Without $NOTIFY_SOCKET (not run by systemd, or not
// Type=notify) it does nothing. A name starting with '@' is an abstract
// socket; Go's net package maps the '@' to the leading NUL.
func sdNotify(state string) error {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil
	}
	if addr[0] != '/' && addr[0] != '@' {
		return fmt.Errorf("NOTIFY_SOCKET %q: only unix socket paths and abstract names are supported", addr)
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	return nil
}

// listenFDsStart is the first file descriptor systemd passes (SD_LISTEN_FDS_START).
const listenFDsStart = 3

// activationListener returns the socket systemd passed to this process, or
// nil when it passed none. The environment variables are cleared so that
// nothing the router starts inherits them.
func activationListener() (net.Listener, error) {
	ln, err := listenerFromEnv(os.Getenv, os.Getpid(), listenFDsStart)
	if ln != nil || err != nil {
		os.Unsetenv("LISTEN_PID")
		os.Unsetenv("LISTEN_FDS")
		os.Unsetenv("LISTEN_FDNAMES")
	}
	return ln, err
}

// listenerFromEnv implements sd_listen_fds for one socket: LISTEN_PID must
// name this process (pid) and LISTEN_FDS must be 1; the socket is fd.
func listenerFromEnv(getenv func(string) string, pid int, fd uintptr) (net.Listener, error) {
	pidStr, fdsStr := getenv("LISTEN_PID"), getenv("LISTEN_FDS")
	if pidStr == "" || fdsStr == "" {
		return nil, nil
	}
	if p, err := strconv.Atoi(pidStr); err != nil || p != pid {
		return nil, nil // meant for another process (a parent's leftovers)
	}
	n, err := strconv.Atoi(fdsStr)
	if err != nil || n < 0 {
		return nil, fmt.Errorf("socket activation: LISTEN_FDS=%q is not a count", fdsStr)
	}
	switch {
	case n == 0:
		return nil, nil
	case n > 1:
		return nil, fmt.Errorf("socket activation: %d sockets passed; the router serves one (ListenStream= the API socket)", n)
	}
	syscall.CloseOnExec(int(fd))
	f := os.NewFile(fd, "systemd-socket")
	if f == nil {
		return nil, fmt.Errorf("socket activation: fd %d is not open", fd)
	}
	defer f.Close() // FileListener holds its own duplicate
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("socket activation: fd %d: %w", fd, err)
	}
	return ln, nil
}
