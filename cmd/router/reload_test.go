package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/config"
	"github.com/switchyard-router/switchyard/internal/testkit"
)

// SIGHUP to the real binary: a new event type is taken without a restart,
// one routed where no declared stream captures with a warning, and a
// stream's new subject; a bad config, or a stream change the server
// refuses, is refused (with file:line:col in the log) and the old one
// stays in force.
func TestReloadOnSIGHUP(t *testing.T) {
	bin := routerBinary(t)
	path, sock := writeConfig(t, "")
	base := mustRead(t, path)
	cmd, logs, c := runLogged(t, "", sock, bin, "run", "-config", path)
	post := func(typ string) int {
		resp, err := c.Post("http://r/v1/events", "application/cloudevents+json",
			strings.NewReader(`{"specversion":"1.0","type":"`+typ+`","source":"/t"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post("t.new"); got != 422 {
		t.Fatalf("unknown type before the reload: %d", got)
	}
	waitLog := func(want string) {
		t.Helper()
		testkit.EventuallyWith(t, 10*time.Second, func() bool { return strings.Contains(logs.String(), want) },
			func() string { return fmt.Sprintf("log lacks %q:\n%s", want, logs.String()) })
	}

	os.WriteFile(path, []byte(base+`
event "t.new" {
  route {
    to      = "nats.local"
    subject = "t.new"
  }
}
`), 0o600)
	cmd.Process.Signal(syscall.SIGHUP)
	waitLog("configuration reloaded")
	if got := post("t.new"); got != 202 {
		t.Fatalf("new type after the reload: %d", got)
	}

	// A route no declared stream captures is taken (a stream may be made by
	// hand), with a warning at its file:line:col.
	lost := base + `
event "t.new" {
  route {
    to      = "nats.local"
    subject = "t.new"
  }
}
event "t.lost" {
  route {
    to      = "nats.local"
    subject = "x.lost"
  }
}
`
	os.WriteFile(path, []byte(lost), 0o600)
	cmd.Process.Signal(syscall.SIGHUP)
	waitLog(fmt.Sprintf(`%s:%d:1: event "t.lost" routes to subject "x.lost", which no stream of nats "local" captures`, path, strings.Count(base, "\n")+8))
	if got := post("t.lost"); got != 202 {
		t.Fatalf("the type with an uncaptured route after the reload: %d", got)
	}

	os.WriteFile(path, []byte(base+"\nevent \"t.other\" {\n  batch_size = \"lots\"\n}\n"), 0o600)
	cmd.Process.Signal(syscall.SIGHUP)
	waitLog("reload refused")
	if !strings.Contains(logs.String(), path+":") {
		t.Fatalf("refusal does not name the file: %s", logs.String())
	}
	if post("t.new") != 202 || post("t.order") != 202 {
		t.Fatal("the running configuration did not stay in force")
	}

	blockAt := func(src, block string) string {
		for i, line := range strings.Split(src, "\n") {
			if c := strings.Index(line, block); c >= 0 {
				return fmt.Sprintf("%s:%d:%d: ", path, i+1, c+1)
			}
		}
		t.Fatalf("the test config has no %s block", block)
		return ""
	}
	// A stream's new subject, for a new type, is taken too: the stream
	// captures it at once, and the type's event is delivered (a new-user
	// trial: validate asked for the subject, and the reload refused it as a
	// change that needs a restart). A stream change beyond an addition
	// (file storage to memory) refuses the reload, at the nats block, and
	// what was in force stays.
	widened := strings.Replace(base, `subjects = ["t.>"]`, `subjects = ["t.>", "u.>"]`, 1) + `
event "u.new" {
  route {
    to      = "nats.local"
    subject = "u.new"
  }
}
`
	reloads := strings.Count(logs.String(), "configuration reloaded")
	os.WriteFile(path, []byte(widened), 0o600)
	cmd.Process.Signal(syscall.SIGHUP)
	testkit.EventuallyWith(t, 10*time.Second, func() bool { return strings.Count(logs.String(), "configuration reloaded") == reloads+1 },
		func() string { return "the reload with a stream's new subject was not taken:\n" + logs.String() })
	waitState(t, c, postAs(t, c, "default", "u.new", "u-1", "{}"), "delivered", 20*time.Second)
	memory := strings.Replace(widened, `stream "events" { subjects = ["t.>", "u.>"] }`, `stream "events" {
    subjects = ["t.>", "u.>"]
    storage  = "memory"
  }`, 1)
	os.WriteFile(path, []byte(memory), 0o600)
	cmd.Process.Signal(syscall.SIGHUP)
	waitLog(blockAt(memory, `nats "local"`) + "reload: nats.local: stream ")
	waitLog("the block changes its storage on the server: a reload only creates streams and adds subjects to them")
	if post("u.new") != 202 || strings.Count(logs.String(), "configuration reloaded") != reloads+1 {
		t.Fatalf("the refused stream change changed what was in force:\n%s", logs.String())
	}

	// A change that needs a restart is refused, at the file:line:col of the
	// block that changed: the data file's commit_delay (policies.hcl says
	// so).
	delayed := regexp.MustCompile(`storage \{ (path = "[^"]*") \}`).ReplaceAllString(base, "storage {\n  $1\n  commit_delay = \"1ms\"\n}")
	if delayed == base {
		t.Fatal("the test config has no storage block to change")
	}
	os.WriteFile(path, []byte(delayed), 0o600)
	cmd.Process.Signal(syscall.SIGHUP)
	waitLog(blockAt(delayed, "storage {") + "reload: the storage blocks changed")
}

// A start takes a route no declared stream captures as a reload does
// (TestReloadOnSIGHUP): it runs, stores the type's events, and logs the
// same warning at the same file:line:col; only validate refuses it.
func TestStartTakesAnUncapturedRouteAsAReloadDoes(t *testing.T) {
	bin := routerBinary(t)
	lost := `
event "t.lost" {
  route {
    to      = "nats.local"
    subject = "x.lost"
  }
}
`
	path, sock := writeConfig(t, lost)
	_, logs, c := runLogged(t, "", sock, bin, "run", "-config", path)
	want := fmt.Sprintf(`%s:%d:1: event "t.lost" routes to subject "x.lost", which no stream of nats "local" captures`,
		path, strings.Count(mustRead(t, path), "\n")-strings.Count(lost, "\n")+2)
	if !strings.Contains(logs.String(), want) {
		t.Fatalf("log lacks %q:\n%s", want, logs.String())
	}
	resp, err := c.Post("http://r/v1/events", "application/cloudevents+json",
		strings.NewReader(`{"specversion":"1.0","type":"t.lost","source":"/t"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 202 {
		t.Fatalf("the type with an uncaptured route: %d", resp.StatusCode)
	}
	if out, err := exec.Command(bin, "validate", "-config", path).CombinedOutput(); err == nil || !strings.Contains(string(out), want) {
		t.Fatalf("validate took it: %v\n%s", err, out)
	}
}

// A reload while ./policies.hcl is missing (moved away for a moment by a
// deploy) is refused, and the running configuration stays in force: it
// took the embedded demo defaults instead, and every type and plugin the
// file had was gone (an adversarial trial). The refusal shows beyond the
// log, in switchyard_config_last_reload_successful and the status line
// systemd shows (it was in the log alone: a reload trial), and the next
// reload that takes sets both back. A start that names a file that does
// not exist fails, as does a stray argument before the flags.
func TestReloadWithoutTheFileKeepsTheConfig(t *testing.T) {
	path, sock := writeConfig(t, "")
	dir := filepath.Dir(path)
	notify := listenNotify(t, filepath.Join(dir, "notify.sock"))
	cmd, logs, c := runLogged(t, dir, sock, routerBinary(t), "run") // ./policies.hcl, the default
	if got := readNotify(t, notify, 10*time.Second); !strings.Contains(got, "READY=1") {
		t.Fatalf("the start's notification: %q", got)
	}
	if err := os.Rename(path, path+".deploying"); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGHUP)
	testkit.EventuallyWith(t, 10*time.Second, func() bool { return strings.Contains(logs.String(), "reload refused") },
		func() string { return logs.String() })
	if !strings.Contains(logs.String(), "the configuration file is gone") || strings.Contains(logs.String(), "configuration reloaded") {
		t.Errorf("the reload without the file:\n%s", logs.String())
	}
	reloadSaid := func(want string) {
		t.Helper()
		for got := ""; !strings.Contains(got, "READY=1"); {
			got = readNotify(t, notify, 10*time.Second)
			if strings.Contains(got, "READY=1") && !strings.Contains(got, want) {
				t.Errorf("the reload's notification: %q, want %q", got, want)
			}
		}
	}
	reloadSaid("STATUS=running; the last reload was refused, the configuration before it stays in force: the configuration file is gone")
	if ok, refused := metricValue(t, c, "switchyard_config_last_reload_successful"), metricValue(t, c, `switchyard_config_reloads_total{result="refused"}`); ok != 0 || refused != 1 {
		t.Errorf("metrics after a refused reload: last successful %v, refused %v", ok, refused)
	}
	resp, err := c.Post("http://r/v1/events", "application/cloudevents+json", strings.NewReader(`{"specversion":"1.0","type":"t.order","source":"/t"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 202 {
		t.Errorf("a type of the file after the refused reload: %d", resp.StatusCode)
	}
	if err := os.Rename(path+".deploying", path); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGHUP)
	reloadSaid("STATUS=running; the configuration was reloaded")
	if ok, applied := metricValue(t, c, "switchyard_config_last_reload_successful"), metricValue(t, c, `switchyard_config_reloads_total{result="applied"}`); ok != 1 || applied != 1 {
		t.Errorf("metrics after the file came back and a reload took it: last successful %v, applied %v", ok, applied)
	}
	os.Rename(path, path+".deploying") // the starts below name it

	for _, args := range [][]string{
		{"run", "-config", filepath.Join(dir, "nope.hcl")},
		{"run", "extra", "-config", path + ".deploying"},
	} {
		err, out := runBinary(t, 30*time.Second, args...)
		if err == nil || strings.Contains(out, "switchyard is running") {
			t.Errorf("router %v started:\n%s", args, out)
		}
		t.Logf("router %v: %s", args, out)
	}
}

// A SIGHUP that comes while the router is still opening (systemd's
// ExecReload right after the start, a deploy script) neither stops it nor
// is lost: it is a reload once the router runs. (The router took SIGHUP
// only once it served, and Go's default for it is to exit; a test that
// reloaded right after the API answered failed on it in CI.)
func TestSIGHUPWhileStartingIsAReload(t *testing.T) {
	path, sock := writeConfig(t, "")
	logs := new(testkit.Buffer)
	cmd := exec.Command(routerBinary(t), "run", "-config", path)
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	})
	testkit.Eventually(t, "the embedded NATS server to start (the router is opening)", 10*time.Second, func() bool {
		return strings.Contains(logs.String(), "embedded NATS server started")
	})
	cmd.Process.Signal(syscall.SIGHUP)
	testkit.EventuallyWith(t, 10*time.Second, func() bool { return strings.Contains(logs.String(), "configuration reloaded") },
		func() string {
			select {
			case <-exited:
				return fmt.Sprintf("the router exited (%v):\n%s", waitErr, logs.String())
			default:
				return "no reload:\n" + logs.String()
			}
		})
	if log := logs.String(); !strings.Contains(log[:strings.Index(log, "configuration reloaded")], "switchyard is running") {
		t.Fatalf("reloaded before it ran:\n%s", logs.String())
	}
	waitHealthy(t, testkit.UnixClient(sock, 10*time.Second))
}

// runLogged starts the router binary bin with args in dir ("": here), its
// log kept, and waits until it serves sock; the test's end stops it.
func runLogged(t *testing.T, dir, sock, bin string, args ...string) (*exec.Cmd, *testkit.Buffer, *http.Client) {
	t.Helper()
	logs := new(testkit.Buffer)
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Stderr = dir, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	c := testkit.UnixClient(sock, 10*time.Second)
	waitHealthy(t, c)
	return cmd, logs, c
}

// A reload may change a nats block's streams, but not the stream an
// inbox on it reads (the inbox keeps the one it found at its start, and
// would read nothing more): moving its subject to another stream, or
// leaving it in none, is refused; widening its stream is not.
func TestReloadKeepsAnInboxsStream(t *testing.T) {
	old := config.NewNATS("local")
	old.Streams = []config.Stream{config.NewStream("EVENTS", "t.>")}
	cfg := &config.Config{Inboxes: []config.Inbox{{Name: "alerts", From: "nats.local", Subject: "t.alerts"}}}
	for _, c := range []struct {
		name    string
		streams []config.Stream
		refused bool
	}{
		{"widened", []config.Stream{config.NewStream("EVENTS", "t.>", "u.>")}, false},
		{"another stream added", []config.Stream{config.NewStream("EVENTS", "t.>"), config.NewStream("U", "u.>")}, false},
		{"moved", []config.Stream{config.NewStream("EVENTS", "t.orders"), config.NewStream("ALERTS", "t.alerts")}, true},
		{"in none", []config.Stream{config.NewStream("EVENTS", "t.orders")}, true},
	} {
		now := old
		now.Streams = c.streams
		err := inboxStreamsKept(cfg, old, now)
		if (err != nil) != c.refused || (err != nil && !strings.Contains(err.Error(), `inbox "alerts" reads subject "t.alerts"`)) {
			t.Errorf("%s: %v, refused want %t", c.name, err, c.refused)
		}
	}
}

// A reload that adds a nats block with stream blocks, refused for another
// change (a listen setting needs a restart), changes no stream on the
// server: an added block is opened, and sets its streams up, only once
// the engine would take the rest; and then only adding, as the blocks in
// force do (its max_age for the router's own stream is refused). Before, the refused reload had opened
// it first: an adversarial trial's block naming the router's own stream
// with max_age = "1s" emptied it, and the log said the configuration in
// force stayed.
func TestARefusedReloadChangesNoStream(t *testing.T) {
	bin := routerBinary(t)
	port := testkit.FreePort(t)
	path, sock := writeConfig(t, "")
	base := strings.Replace(mustRead(t, path), "port     = -1", fmt.Sprintf("port     = %d", port), 1)
	os.WriteFile(path, []byte(base), 0o600)
	cmd, logs, c := runLogged(t, "", sock, bin, "run", "-config", path)
	waitState(t, c, postAs(t, c, "default", "t.order", "kept-1", "{}"), "delivered", 20*time.Second)

	remote := fmt.Sprintf(`
nats "remote" {
  url           = "nats://127.0.0.1:%d"
  user          = "switchyard"
  password_file = %q
  stream "events" {
    subjects = ["t.>"]
    max_age  = "1s"
  }
}
`, port, filepath.Join(filepath.Dir(path), "nats-local.password"))
	refused := regexp.MustCompile(`listen  \{ (socket = "[^"]*") \}`).ReplaceAllString(base, "listen {\n  $1\n  max_body = \"2MiB\"\n}") + remote
	if refused == base+remote {
		t.Fatal("the test config has no listen block to change")
	}
	os.WriteFile(path, []byte(refused), 0o600)
	cmd.Process.Signal(syscall.SIGHUP)
	testkit.EventuallyWith(t, 10*time.Second, func() bool { return strings.Contains(logs.String(), "reload refused") },
		func() string { return "no refusal:\n" + logs.String() })
	if !strings.Contains(logs.String(), "the listen blocks changed") {
		t.Fatalf("refused for another reason than the listen block:\n%s", logs.String())
	}
	time.Sleep(1500 * time.Millisecond) // past the max_age the refused block asked for
	js := routerJetStream(t, path, "local", fmt.Sprintf("nats://127.0.0.1:%d", port))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "events")
	if err != nil {
		t.Fatal(err)
	}
	if info := st.CachedInfo(); info.Config.MaxAge != 0 || info.State.Msgs != 1 {
		t.Fatalf("after the refused reload stream events has max_age %s and %d messages, want 0 (unlimited) and its 1", info.Config.MaxAge, info.State.Msgs)
	}

	// The same block without the listen change: its stream blocks are set
	// up as a reload's, only adding, so max_age is refused, not applied.
	refusals := strings.Count(logs.String(), "reload refused")
	os.WriteFile(path, []byte(base+remote), 0o600)
	cmd.Process.Signal(syscall.SIGHUP)
	testkit.EventuallyWith(t, 10*time.Second, func() bool { return strings.Count(logs.String(), "reload refused") == refusals+1 },
		func() string { return "the added block's max_age was not refused:\n" + logs.String() })
	if !strings.Contains(logs.String(), "the block changes its max_age on the server") {
		t.Fatalf("refused for another reason than the max_age:\n%s", logs.String())
	}
	// The refusal says where the added block is (it said no place: a
	// reload trial).
	at := regexp.MustCompile(regexp.QuoteMeta(fmt.Sprintf("%s:%d:1: reload: nats ", path, strings.Count(base, "\n")+2)) + `\\?"remote`)
	if !at.MatchString(logs.String()) {
		t.Fatalf("the refusal does not say where the block is (%s):\n%s", at, logs.String())
	}
	time.Sleep(1500 * time.Millisecond)
	if st, err = js.Stream(ctx, "events"); err != nil {
		t.Fatal(err)
	}
	if info := st.CachedInfo(); info.Config.MaxAge != 0 || info.State.Msgs != 1 {
		t.Fatalf("after the added block's refusal stream events has max_age %s and %d messages, want 0 and its 1", info.Config.MaxAge, info.State.Msgs)
	}
}

// systemd's status line after a reload says which of three it was: refused
// (the configuration before it stays), applied but for the tokens_file
// (it said "refused", the new configuration in force: a review), applied;
// an error's first line only, so that it cannot add lines of its own.
func TestReloadStatus(t *testing.T) {
	for _, c := range []struct {
		err, tokens error
		want        string
	}{
		{errors.New("policies.hcl:3:1: bad\nSTOPPING=1"), nil, "STATUS=running; the last reload was refused, the configuration before it stays in force: policies.hcl:3:1: bad"},
		{nil, errors.New("tokens_file not reloaded: unexpected EOF"), "STATUS=running; the configuration was reloaded, but for the tokens_file (the tokens before it stay in force): tokens_file not reloaded: unexpected EOF"},
		{nil, nil, "STATUS=running; the configuration was reloaded"},
	} {
		if got := reloadStatus(c.err, c.tokens); got != c.want {
			t.Errorf("reloadStatus(%v, %v) = %q, want %q", c.err, c.tokens, got, c.want)
		}
	}
}
