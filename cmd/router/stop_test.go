package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/internal/testkit"
	"github.com/switchyard-router/switchyard/storage"
)

// stoppingRouter is the real binary on writeConfig's configuration with a
// TCP listener beside the socket, and a client that holds a request open
// on the socket: it announced a body and sends almost none of it.
type stoppingRouter struct {
	cmd     *exec.Cmd
	logs    *testkit.Buffer
	path    string
	sock    string
	addr    string
	exited  chan struct{}
	waitErr error
}

func startStoppingRouter(t *testing.T, args ...string) *stoppingRouter {
	t.Helper()
	path, sock := writeConfig(t, "")
	dir := filepath.Dir(path)
	r := &stoppingRouter{path: path, sock: sock, addr: fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t)),
		logs: new(testkit.Buffer), exited: make(chan struct{})}
	tokens := filepath.Join(dir, "tokens.json")
	os.WriteFile(tokens, []byte(`{"tokens":[{"token":"stop-test-token-0123456789","admin":true}]}`), 0o600)
	src := strings.Replace(mustRead(t, path), `listen  { socket = "`+sock+`" }`,
		fmt.Sprintf("listen {\n  socket = %q\n  http = %q\n  tokens_file = %q\n}", sock, r.addr, tokens), 1)
	os.WriteFile(path, []byte(src), 0o600)
	r.cmd = exec.Command(routerBinary(t), append([]string{"run", "-config", path}, args...)...)
	r.cmd.Stderr = r.logs
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.waitErr = r.cmd.Wait(); close(r.exited) }()
	t.Cleanup(func() {
		r.cmd.Process.Kill()
		<-r.exited
		if t.Failed() {
			t.Logf("router log:\n%s", r.logs.String())
		}
	})
	waitHealthy(t, testkit.UnixClient(sock, 10*time.Second))
	return r
}

// holdRequest opens a request on the socket that announces 200 bytes of
// body and sends one, and waits until the router reads it.
func (r *stoppingRouter) holdRequest(t *testing.T) {
	t.Helper()
	conn, err := net.Dial("unix", r.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprint(conn, "POST /v1/events HTTP/1.1\r\nHost: r\r\nContent-Type: application/cloudevents+json\r\nContent-Length: 200\r\n\r\n{")
	time.Sleep(200 * time.Millisecond) // the handler is reading the body
}

// exitWithin waits for the process to end within d.
func (r *stoppingRouter) exitWithin(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-r.exited:
	case <-time.After(d):
		t.Fatalf("the router did not exit within %v", d)
	}
}

// A stop with a client that holds a request open is still clean: both
// listeners stop taking requests at once, the held request is cut once
// half the stop's time is gone, and the engine and the data file close in
// the rest: exit status 0, a log line saying so (and the start's naming the
// file it runs on), and the next start finds no running mark.
// (Before, the TCP listener took requests while the socket drained, and
// the held request took the whole -shutdown-timeout: the data file's close
// got an expired context, and the next start checked the whole file.)
func TestStopCutsAHeldRequestAndStaysClean(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the router binary twice")
	}
	r := startStoppingRouter(t, "-shutdown-timeout", "4s")
	r.holdRequest(t)
	start := time.Now()
	r.cmd.Process.Signal(syscall.SIGTERM)
	testkit.Eventually(t, "the stop to begin", 5*time.Second, func() bool { return strings.Contains(r.logs.String(), "stopping") })
	time.Sleep(300 * time.Millisecond)
	if conn, err := net.DialTimeout("tcp", r.addr, time.Second); err == nil {
		conn.Close()
		t.Errorf("the TCP listener took a connection %v after the SIGTERM, while the socket's request was held", time.Since(start).Round(time.Millisecond))
	}
	r.exitWithin(t, 10*time.Second)
	if r.waitErr != nil {
		t.Errorf("exit: %v, want 0: a cut request is no failure of the stop", r.waitErr)
	}
	if log := r.logs.String(); !strings.Contains(log, "requests were still in flight") || strings.Contains(log, "deadline exceeded") ||
		!strings.Contains(log, "stopped: the data file is closed clean") || !strings.Contains(log, "config="+r.path) {
		t.Fatalf("the log names neither the file it runs on nor a clean stop, or the stop overran:\n%s", log)
	}
	_, logs, _ := runLogged(t, "", r.sock, routerBinary(t), "run", "-config", r.path)
	if strings.Contains(logs.String(), "did not stop cleanly") {
		t.Fatalf("the next start found the running mark:\n%s", logs.String())
	}
}

// The first SIGTERM begins a graceful stop; a second one ends the process
// at once, even while a held request would keep the stop waiting (before,
// every signal after the first was dropped: only SIGKILL ended it).
func TestSecondSIGTERMStopsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the router binary")
	}
	r := startStoppingRouter(t, "-shutdown-timeout", "60s")
	r.holdRequest(t)
	r.cmd.Process.Signal(syscall.SIGTERM)
	testkit.Eventually(t, "the stop to begin", 5*time.Second, func() bool { return strings.Contains(r.logs.String(), "stopping") })
	r.cmd.Process.Signal(syscall.SIGTERM)
	r.exitWithin(t, 5*time.Second)
}

// A start that first checks the whole data file (the last run was
// killed) tells systemd before the check that it goes on
// (EXTEND_TIMEOUT_USEC): a large file's check must not be killed by the
// unit's start timeout, which would leave the mark and begin the same
// check at the next try.
func TestNotifyExtendsAStartThatChecksTheFile(t *testing.T) {
	path := killedRun(t)
	conn := listenNotify(t, filepath.Join(filepath.Dir(path), "notify"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewMain(nil, io.Discard, io.Discard).Run(ctx, []string{"run", "-config", path}) }()
	if got, want := readNotify(t, conn, 30*time.Second), "EXTEND_TIMEOUT_USEC=15000000"; got != want {
		t.Errorf("first notification %q, want %q", got, want)
	}
	if got := readNotify(t, conn, 30*time.Second); got != "READY=1" {
		t.Errorf("second notification %q, want READY=1", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// killedRun is the path of a configuration whose router was killed
// (SIGKILL) once it ran: its data file is marked as not stopped cleanly.
// It runs the binary, so a -short run skips the test.
func killedRun(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the router binary")
	}
	path, sock := writeConfig(t, "")
	cmd, _, _ := runLogged(t, "", sock, routerBinary(t), "run", "-config", path)
	cmd.Process.Kill()
	cmd.Wait()
	return path
}

// cancelAt is a log writer that cancels a start the moment the router
// logs a line with mark: a stop that lands at a known step of the start.
type cancelAt struct {
	testkit.Buffer
	mark   string
	cancel context.CancelFunc
}

func (w *cancelAt) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.mark) {
		w.cancel()
	}
	return w.Buffer.Write(p)
}

// A stop that lands while the router opens ends the start without
// announcing it: no "switchyard is running" line, no READY=1 (before, a
// stop no later step noticed was announced as a start, then a stop).
func TestStopDuringTheStartIsNotAnnounced(t *testing.T) {
	path, _ := writeConfig(t, "")
	conn := listenNotify(t, filepath.Join(filepath.Dir(path), "notify"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &cancelAt{mark: "NATS sink ready", cancel: cancel}
	NewMain(nil, io.Discard, logs).Run(ctx, []string{"run", "-config", path})
	if strings.Contains(logs.String(), "switchyard is running") {
		t.Errorf("a start stopped while it opened was announced:\n%s", logs.String())
	}
	conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	buf := make([]byte, 4096)
	if n, err := conn.Read(buf); err == nil {
		t.Errorf("systemd was told %q", buf[:n])
	}
}

// A stop during the check of the whole data file (the last run was
// killed) cuts the check short, and is not taken for damage: the file
// keeps its mark, and the next start checks it again and opens it. (The
// check ran on to its end whatever the stop, and only a second SIGTERM
// ended a long one.)
func TestStopDuringTheFileCheckIsNotDamage(t *testing.T) {
	path := killedRun(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &cancelAt{mark: "checking the whole data file", cancel: cancel}
	err := NewMain(nil, io.Discard, logs).Run(ctx, []string{"run", "-config", path})
	if out := logs.String() + fmt.Sprint(err); strings.Contains(out, "the data file is sound") || strings.Contains(out, "damaged") {
		t.Errorf("a start stopped at the file's check: %v\n%s", err, logs.String())
	}
	again, stop := context.WithCancel(context.Background())
	defer stop()
	logs = &cancelAt{mark: "switchyard is running", cancel: stop}
	if err := NewMain(nil, io.Discard, logs).Run(again, []string{"run", "-config", path}); err != nil || !strings.Contains(logs.String(), "the data file is sound") {
		t.Errorf("the next start: %v; want the file checked again and opened:\n%s", err, logs.String())
	}
}

// A router killed outright (SIGKILL, the OOM killer) during the check of
// the whole data file takes the checking process with it. It ran on,
// orphaned, beside the next start's own check (an upgrade trial: that
// check took 2.5 s against 0.6 s).
func TestAKilledRouterTakesItsFileCheckWithIt(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the router binary on a file of 500,000 events")
	}
	if runtime.GOOS != "linux" {
		t.Skip("finds the check's process in /proc (Linux)")
	}
	path, sock := writeConfig(t, "")
	// Its check takes 1.5 s here, alone: long enough to be seen running
	// after the router is killed, a kill takes it at once.
	fillDataFile(t, filepath.Join(filepath.Dir(path), "r.db"), 500_000)
	bin := routerBinary(t)
	killed, _, _ := runLogged(t, "", sock, bin, "run", "-config", path)
	killed.Process.Kill()
	killed.Wait()
	cmd := exec.Command(bin, "run", "-config", path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var check int
	for deadline := time.Now().Add(20 * time.Second); check == 0 && time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		check = childWithEnv(cmd.Process.Pid, checkWorkerEnv+"=1")
	}
	if check == 0 {
		t.Fatal("no check of the whole data file seen")
	}
	cmd.Process.Kill()
	cmd.Wait()
	for deadline := time.Now().Add(200 * time.Millisecond); processRuns(check); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			syscall.Kill(check, syscall.SIGKILL)
			t.Fatalf("the check (pid %d) runs on after its router was killed", check)
		}
	}
}

// An upgrade of the data file's schema, which routers before it then
// refuse, is told: db check names the file's schema and says that router
// run upgrades it, one way, and the start that upgrades it logs it (it
// was silent, and nothing showed a file's schema).
func TestTheSchemaUpgradeIsTold(t *testing.T) {
	path, _ := writeConfig(t, "")
	data := filepath.Join(filepath.Dir(path), "r.db")
	fillDataFile(t, data, 10)
	bdb, err := bolt.Open(data, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	bdb.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("schema"), []byte("2")) })
	bdb.Close()
	check := func(want string) {
		t.Helper()
		var out bytes.Buffer
		if err := NewMain(nil, &out, &out).Run(context.Background(), []string{"db", "check", data}); err != nil || !strings.Contains(out.String(), want) {
			t.Errorf("db check: %v\n%s\nwant %q", err, out.String(), want)
		}
	}
	check(", schema 2 (router run upgrades it to " + storage.SchemaVersion + ", one way), 10 events")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &cancelAt{mark: "switchyard is running", cancel: cancel}
	if err := NewMain(nil, io.Discard, logs).Run(ctx, []string{"run", "-config", path}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "the data file was upgraded to this router's schema") || !strings.Contains(logs.String(), "schema_before=2") {
		t.Errorf("the start that upgraded the file:\n%s", logs.String())
	}
	check(", schema " + storage.SchemaVersion + ", 10 events")
	logs = &cancelAt{mark: "switchyard is running"}
	ctx, cancel = context.WithCancel(context.Background())
	logs.cancel = cancel
	if err := NewMain(nil, io.Discard, logs).Run(ctx, []string{"run", "-config", path}); err != nil || !strings.Contains(logs.String(), "switchyard is running") {
		t.Fatalf("the second start: %v\n%s", err, logs.String())
	}
	if strings.Contains(logs.String(), "upgraded") {
		t.Errorf("a start on a file at this schema:\n%s", logs.String())
	}
	// A newer router's file: not one this router would upgrade.
	bdb, err = bolt.Open(data, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	bdb.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("schema"), []byte("99")) })
	bdb.Close()
	var out bytes.Buffer
	NewMain(nil, &out, &out).Run(context.Background(), []string{"db", "check", data})
	if want := ", schema 99 (a newer router's: this one reads up to " + storage.SchemaVersion + ")"; !strings.Contains(out.String(), want) {
		t.Errorf("db check of a newer router's file:\n%s\nwant %q", out.String(), want)
	}
}

// fillDataFile stores n pending events in a new data file at path.
func fillDataFile(t *testing.T, path string, n int) {
	t.Helper()
	db, err := storage.Open(path, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	for first := 0; first < n; first += 5000 {
		if err := db.Update(context.Background(), func(tx *storage.Tx) error {
			for i := first; i < min(n, first+5000); i++ {
				ev := switchyard.Event{ID: fmt.Sprint("e", i), Type: "t.order", Source: "/fill", SpecVersion: "1.0"}
				if err := tx.InsertNewEvent(&storage.Record{CreatedAt: time.Now(), Event: ev}, false); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// childWithEnv is the pid of a child of ppid whose environment holds env
// ("NAME=value"), or 0.
func childWithEnv(ppid int, env string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		if parent, _ := procStat(pid); parent != ppid {
			continue
		}
		environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		for _, kv := range strings.Split(string(environ), "\x00") {
			if kv == env {
				return pid
			}
		}
	}
	return 0
}

// processRuns says whether pid is a process that has not ended (a zombie
// has: no one may reap it in a container whose first process does not).
func processRuns(pid int) bool {
	_, state := procStat(pid)
	return state != "" && state != "Z"
}

// procStat reads a process's parent and state from /proc/PID/stat.
func procStat(pid int) (ppid int, state string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, ""
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
	fmt.Sscan(rest, &state, &ppid)
	return ppid, state
}

// closeFunc is a Close of a test's making.
type closeFunc func(context.Context) error

func (f closeFunc) Close(ctx context.Context) error { return f(ctx) }

// The stop closes inboxes (and sinks, and NATS servers) side by side: one
// that holds until the deadline (its cluster dark) leaves those after it
// the whole time. Closed one after another, the others found the time
// spent and left their consumer groups without leaving.
func TestCloseAllGivesEachTheWholeTime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	dark := closeFunc(func(ctx context.Context) error { <-ctx.Done(); return fmt.Errorf("dark: %w", ctx.Err()) })
	var late []string
	var mu sync.Mutex
	quick := func(name string) closeFunc {
		return func(ctx context.Context) error {
			if ctx.Err() != nil {
				mu.Lock()
				late = append(late, name)
				mu.Unlock()
			}
			return nil
		}
	}
	err := closeAll(ctx, []closeFunc{dark, quick("a"), dark, quick("b")})
	if len(late) > 0 {
		t.Errorf("%v were closed after the deadline", late)
	}
	if err == nil || strings.Count(err.Error(), "dark:") != 2 {
		t.Errorf("err = %v, want both dark closes' errors", err)
	}
}
