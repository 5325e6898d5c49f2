package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// listenNotify is a unixgram socket standing in for systemd's notify
// socket; it sets $NOTIFY_SOCKET to it.
func listenNotify(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", name)
	return conn
}

func readNotify(t *testing.T, conn *net.UnixConn, timeout time.Duration) string {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return string(buf[:n])
}

// A notification reaches systemd at a socket path or an abstract "@"
// address, is a no-op without NOTIFY_SOCKET, and fails for an address
// it cannot reach (vsock).
func TestNotifyPathAndAbstractSockets(t *testing.T) {
	dir, err := os.MkdirTemp("", "sy")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	conn := listenNotify(t, filepath.Join(dir, "notify"))
	if err := sdNotify("READY=1"); err != nil {
		t.Fatal(err)
	}
	if got := readNotify(t, conn, 5*time.Second); got != "READY=1" {
		t.Fatalf("got %q", got)
	}
	abstract := listenNotify(t, "@switchyard-test-"+strconv.Itoa(os.Getpid()))
	if err := sdNotify("STOPPING=1"); err != nil {
		t.Fatal(err)
	}
	if got := readNotify(t, abstract, 5*time.Second); got != "STOPPING=1" {
		t.Fatalf("abstract: got %q", got)
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if err := sdNotify("READY=1"); err != nil {
		t.Fatalf("without NOTIFY_SOCKET: %v", err)
	}
	t.Setenv("NOTIFY_SOCKET", "vsock:2:1")
	if err := sdNotify("READY=1"); err == nil {
		t.Fatal("vsock address accepted")
	}
}

// The router says READY=1 once it serves, and STOPPING=1 when it stops.
func TestNotifyReadyAndStopping(t *testing.T) {
	path, sock := writeConfig(t, "")
	conn := listenNotify(t, filepath.Join(filepath.Dir(path), "notify"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewMain(nil, io.Discard, io.Discard).Run(ctx, []string{"run", "-config", path}) }()
	if got := readNotify(t, conn, 30*time.Second); got != "READY=1" {
		t.Fatalf("first notification %q", got)
	}
	// READY means serving: the socket answers now.
	if resp, err := testkit.UnixClient(sock, 10*time.Second).Get("http://r/healthz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("not serving at READY=1: %v", err)
	}
	cancel()
	if got := readNotify(t, conn, 30*time.Second); got != "STOPPING=1" {
		t.Fatalf("second notification %q", got)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// unixListenerFile returns a listening unix socket as a file, as systemd
// would hold it.
func unixListenerFile(t *testing.T, path string) *os.File {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false) // the "manager" owns the file
	f, err := ln.File()
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	t.Cleanup(func() { f.Close() })
	return f
}

// A socket is taken from systemd, and served, only when LISTEN_PID is this
// process and LISTEN_FDS is 1; LISTEN_FDS of 2, negative or not a number is
// an error, and any other environment means not activated.
func TestSocketActivationEnv(t *testing.T) {
	dir, err := os.MkdirTemp("", "sy")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "a.sock")
	f := unixListenerFile(t, path)
	env := func(pid, fds string) func(string) string {
		return func(k string) string {
			return map[string]string{"LISTEN_PID": pid, "LISTEN_FDS": fds}[k]
		}
	}
	me := os.Getpid()
	for name, c := range map[string]struct {
		pid, fds string
		err      string
	}{
		"not activated":     {"", "", ""},
		"another process":   {strconv.Itoa(me + 1), "1", ""},
		"zero":              {strconv.Itoa(me), "0", ""},
		"two sockets":       {strconv.Itoa(me), "2", "2 sockets"},
		"garbage":           {strconv.Itoa(me), "x", "not a count"},
		"garbage pid":       {"x", "1", ""},
		"negative":          {strconv.Itoa(me), "-1", "not a count"},
		"pid with trailing": {strconv.Itoa(me) + " ", "1", ""},
	} {
		ln, err := listenerFromEnv(env(c.pid, c.fds), me, f.Fd())
		if ln != nil {
			ln.Close()
			t.Errorf("%s: got a listener", name)
		}
		if (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: error %v, want %q", name, err, c.err)
		}
	}
	// Activated: the passed socket is served.
	dup, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := listenerFromEnv(env(strconv.Itoa(me), "1"), me, uintptr(dup))
	if err != nil || ln == nil {
		t.Fatalf("activation: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hi") })}
	go srv.Serve(ln)
	defer srv.Close()
	if got := get(t, testkit.UnixClient(path, 10*time.Second), "/"); got != "hi" {
		t.Fatalf("served %q", got)
	}
}

// The real binary, started the way systemd starts it: the API socket as
// fd 3, LISTEN_PID and LISTEN_FDS set. It serves there, does not create
// its configured socket, and leaves the passed socket's file alone when it
// stops; at the configured path too, as docs/systemd sets it up (the
// check for another router serving there refused systemd's own socket).
func TestSocketActivationBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := routerBinary(t)
	for _, atConfigured := range []bool{false, true} {
		t.Run(fmt.Sprintf("at the configured path %v", atConfigured), func(t *testing.T) {
			testSocketActivation(t, bin, atConfigured)
		})
	}
}

func testSocketActivation(t *testing.T, bin string, atConfigured bool) {
	path, confSock := writeConfig(t, "")
	actSock := filepath.Join(filepath.Dir(path), "act.sock")
	if atConfigured {
		actSock = confSock
	}
	f := unixListenerFile(t, actSock)
	// LISTEN_PID must be the router's own pid: the shell sets it to its
	// pid and execs the router in its place, as systemd does after fork.
	cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" "$@"`, bin, "run", "-config", path)
	cmd.ExtraFiles = []*os.File{f}
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
	}()
	c := testkit.UnixClient(actSock, 10*time.Second)
	var err error
	testkit.EventuallyWith(t, 30*time.Second, func() bool {
		var resp *http.Response
		if resp, err = c.Get("http://r/healthz"); err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, func() string { return fmt.Sprintf("no answer on the passed socket: %v\n%s", err, logs.String()) })
	if _, err := os.Stat(confSock); !atConfigured && !os.IsNotExist(err) {
		t.Errorf("the configured socket was created too: %v", err)
	}
	if !strings.Contains(get(t, c, "/v1/stats"), "types") {
		t.Error("stats over the passed socket")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
	if _, err := os.Stat(actSock); err != nil {
		t.Errorf("the passed socket's file was removed: %v", err)
	}
	if !strings.Contains(logs.String(), "socket systemd passed") {
		t.Errorf("log does not say so:\n%s", logs.String())
	}
}
