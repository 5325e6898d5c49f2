package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	bolt "go.etcd.io/bbolt"

	"github.com/switchyard-router/switchyard/internal/testkit"
	"github.com/switchyard-router/switchyard/storage"
)

// runBinary runs the real router binary with args and returns its exit
// error and combined output; a run still going after timeout is killed.
func runBinary(t *testing.T, timeout time.Duration, args ...string) (error, string) {
	t.Helper()
	cmd := exec.Command(routerBinary(t), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err, out.String()
	case <-time.After(timeout):
		cmd.Process.Kill()
		<-done
		t.Fatalf("router %v still running after %s:\n%s", args, timeout, out.String())
		return nil, ""
	}
}

// The router never deletes what stands at listen.socket unless it is a
// stale socket: a regular file or a folder there makes the real binary
// refuse to start, saying what is there, and leaves it as it was.
func TestSocketPathNotASocketIsLeftAlone(t *testing.T) {
	for _, kind := range []string{"file", "folder"} {
		t.Run(kind, func(t *testing.T) {
			path, sock := writeConfig(t, "")
			if kind == "file" {
				os.WriteFile(sock, []byte("precious"), 0o600)
			} else {
				os.Mkdir(sock, 0o700)
			}
			err, out := runBinary(t, 30*time.Second, "run", "-config", path)
			if err == nil {
				t.Fatalf("the router started with a %s at its socket path:\n%s", kind, out)
			}
			want := map[string]string{"file": "a regular file (8 bytes) is there, not a socket", "folder": "a folder is there, not a socket"}[kind]
			if !strings.Contains(out, want) || !strings.Contains(out, sock) {
				t.Errorf("the error does not say %q about %s:\n%s", want, sock, out)
			}
			fi, err := os.Lstat(sock)
			switch {
			case err != nil:
				t.Fatalf("the %s at the socket path is gone: %v", kind, err)
			case kind == "file":
				if b, _ := os.ReadFile(sock); string(b) != "precious" {
					t.Errorf("the file was changed: %q", b)
				}
			case !fi.IsDir():
				t.Errorf("the folder was replaced by %v", fi.Mode())
			}
		})
	}
}

// A socket path equal to the data file is a configuration error with its
// position, in `validate` and in `run`, and the data file stays.
func TestSocketPathIsTheDataFile(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	path := filepath.Join(dir, "policies.hcl")
	os.WriteFile(path, []byte("listen {\n  socket = \""+db+"\"\n}\nstorage {\n  path = \""+db+"\"\n}\n"), 0o600)
	for _, cmd := range []string{"validate", "run"} {
		err, out := runBinary(t, 30*time.Second, cmd, "-config", path)
		if err == nil {
			t.Fatalf("%s accepted the data file as the socket:\n%s", cmd, out)
		}
		if want := path + ":2:12: Socket path in use"; !strings.Contains(out, want) {
			t.Errorf("%s does not say %q:\n%s", cmd, want, out)
		}
	}
	if _, err := os.Stat(db); err == nil {
		t.Errorf("a refused config created the data file")
	}
}

// The embedded NATS server, as shipped (loopback, a fixed port), admits no
// client without the router's credentials: another local process can
// neither read the stream nor publish into it, so it cannot forge an
// event under an id a local service is about to use (it published
// "victim-1" first, and JetStream dropped the real event as a duplicate).
func TestEmbeddedNATSIsClosed(t *testing.T) {
	r := newCrashRouter(t, 2*time.Minute)
	r.start()
	for _, opts := range [][]natsgo.Option{nil, {natsgo.UserInfo("switchyard", "")}, {natsgo.Token("switchyard")}} {
		nc, err := natsgo.Connect(r.natsURL(), opts...)
		if err == nil {
			// What the attacker did on main: read a stored event, forge one.
			_, rerr := nc.Request("$JS.API.STREAM.MSG.GET."+crashStream, []byte(`{"seq":1}`), time.Second)
			m := natsgo.NewMsg(crashSubject + ".events")
			m.Header.Set("Nats-Msg-Id", "victim-1")
			m.Data = []byte(`{"forged":true}`)
			perr := nc.PublishMsg(m)
			nc.Close()
			t.Fatalf("connected without the router's password (%d options); read: %v, publish: %v", len(opts), rerr, perr)
		}
		if !strings.Contains(err.Error(), "Authorization Violation") {
			t.Errorf("unexpected error: %v", err)
		}
	}
	pw := filepath.Join(filepath.Dir(r.config), "data", "nats-local.password")
	if fi, err := os.Stat(pw); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("password file %s: %v %v", pw, fi, err)
	}

	body := `{"specversion":"1.0","type":"` + crashType + `","source":"/t","id":"victim-1","data":{"real":true}}`
	resp, err := r.client.Post("http://router/v1/events", "application/cloudevents+json", strings.NewReader(body))
	if err != nil || resp.StatusCode != 202 {
		t.Fatalf("post: %v %v", resp, err)
	}
	resp.Body.Close()
	waitState(t, r.client, "victim-1", "delivered", 30*time.Second)
	js := routerJetStream(t, r.config, "local", r.natsURL())
	s, err := js.Stream(context.Background(), crashStream)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.GetLastMsgForSubject(context.Background(), crashSubject+".events")
	if err != nil {
		t.Fatal(err)
	}
	if string(msg.Data) != `{"real":true}` || msg.Header.Get("ce-id") != "victim-1" {
		t.Errorf("the stream holds %s %v, want the posted event", msg.Data, msg.Header)
	}
}

// filledDataFile is the data file of a router that stored 4,000 events of
// 400 bytes of data, stopped cleanly.
func filledDataFile(t *testing.T) []byte {
	t.Helper()
	path, sock := writeConfig(t, "")
	stop := runRouter(t, path, sock)
	c := testkit.UnixClient(sock, 10*time.Second)
	data := strings.Repeat("x", 400)
	for b := 0; b < 40; b++ {
		var batch []string
		for i := range 100 {
			batch = append(batch, fmt.Sprintf(`{"specversion":"1.0","type":"t.order","source":"/t","id":"e-%d-%d","data":%q}`, b, i, data))
		}
		resp, err := c.Post("http://r/v1/events", "application/cloudevents-batch+json", strings.NewReader("["+strings.Join(batch, ",")+"]"))
		if err != nil || resp.StatusCode != 202 {
			t.Fatalf("post: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	stop()
	full, err := os.ReadFile(filepath.Join(filepath.Dir(path), "r.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("data file: %d bytes", len(full))
	return full
}

// runOnDataFile starts the real binary on a data file holding content and
// wants it to refuse, without a crash (SIGBUS, a panic, a goroutine dump);
// it returns the file's path and what the binary printed.
func runOnDataFile(t *testing.T, content []byte) (string, string) {
	t.Helper()
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	os.WriteFile(db, content, 0o600)
	cfg := filepath.Join(dir, "policies.hcl")
	os.WriteFile(cfg, []byte(fmt.Sprintf("listen { socket = %q }\nstorage { path = %q }\n", filepath.Join(dir, "r.sock"), db)), 0o600)
	err, out := runBinary(t, 30*time.Second, "run", "-config", cfg)
	if err == nil {
		t.Fatalf("the router ran on the file:\n%s", out)
	}
	for _, bad := range []string{"SIGBUS", "goroutine ", "panic"} {
		if strings.Contains(out, bad) {
			t.Fatalf("the router crashed (%s):\n%s", bad, out)
		}
	}
	return db, out
}

// A data file with damaged pages (bit rot, a torn write) makes the real
// binary exit with one clear error that says the file is damaged and how
// to go on — never a panic from the goroutine bbolt walks the pages on —
// and leaves the file as it was.
func TestDamagedDataFile(t *testing.T) {
	full := filledDataFile(t)
	const page = 4096
	damaged := bytes.Clone(full)
	for at := 4 * page; at+16 <= len(damaged); at += 8 * page {
		copy(damaged[at:], "\xde\xad\xbe\xef\xde\xad\xbe\xef\xde\xad\xbe\xef\xde\xad\xbe\xef")
	}
	db, out := runOnDataFile(t, damaged)
	if !strings.Contains(out, "the data file is damaged") || !strings.Contains(out, "router db check") {
		t.Errorf("the error does not say the file is damaged:\n%s", out)
	}
	if after, _ := os.ReadFile(db); !bytes.Equal(after, damaged) {
		t.Error("the file changed")
	}
}

// uncleanDataFile is filledDataFile with the running mark an unclean stop
// leaves, and the path of a copy of it.
func uncleanDataFile(t *testing.T) ([]byte, string) {
	t.Helper()
	marked := filepath.Join(t.TempDir(), "marked.db")
	os.WriteFile(marked, filledDataFile(t), 0o600)
	bdb, err := bolt.Open(marked, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bdb.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("running"), []byte("x")) }); err != nil {
		t.Fatal(err)
	}
	bdb.Close()
	marks, _ := os.ReadFile(marked)
	return marks, marked
}

// A data file left by an unclean stop whose newest root page is
// overwritten makes the real binary say the file is damaged, and what to
// do once (a new user's trial saw it twice, the check's report carrying
// it too); router db check reports the damage without telling its reader
// to run router db check.
func TestDamagedRootAfterUncleanStopIsSaidOnce(t *testing.T) {
	marks, marked := uncleanDataFile(t)
	metas, _, err := storage.Metas(marked)
	if err != nil {
		t.Fatal(err)
	}
	m := metas[0]
	if metas[1].Valid && metas[1].TxID > m.TxID {
		m = metas[1]
	}
	damaged := bytes.Clone(marks)
	for i := range int(m.PageSize) {
		damaged[int(m.Root)*int(m.PageSize)+i] = 0xff
	}
	db, out := runOnDataFile(t, damaged)
	if !strings.Contains(out, "the data file is damaged") || strings.Count(out, "restore it from a backup") != 1 {
		t.Errorf("the error does not say once that the file is damaged and what to do:\n%s", out)
	}
	var said bytes.Buffer
	err = NewMain(nil, &said, &said).Run(context.Background(), []string{"db", "check", db})
	if err == nil || !strings.Contains(said.String(), "damaged") || strings.Contains(said.String(), "check it with `router db check`") {
		t.Errorf("router db check on it: %v\n%s", err, said.String())
	}
}

// The real binary does not start in a data directory anyone may write to:
// another user could move its socket aside and bind their own, or plant
// the password of its embedded broker. It says why and what to do, and
// leaves the directory as it was.
func TestOpenDataDirectoryIsRefused(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	os.Mkdir(data, 0o700)
	os.Chmod(data, 0o777)
	cfg := filepath.Join(dir, "policies.hcl")
	os.WriteFile(cfg, []byte(fmt.Sprintf("listen { socket = %q }\nstorage { path = %q }\n", filepath.Join(data, "r.sock"), filepath.Join(data, "r.db"))), 0o600)
	err, out := runBinary(t, 30*time.Second, "run", "-config", cfg)
	if err == nil || !strings.Contains(out, data+" may be written by anyone (mode 0777)") || !strings.Contains(out, "chmod o-w") {
		t.Fatalf("the router on a world-writable data directory: %v\n%s", err, out)
	}
	if entries, _ := os.ReadDir(data); len(entries) != 0 {
		t.Errorf("the router left %d files in the directory", len(entries))
	}
}

// A data file left by an unclean stop with damage inside its pages (a leaf
// element that points past the file: a torn write) makes the real binary
// exit with one clear error from the check it runs in a process of its own
// — where bbolt's own walk would have ended the router with a stack
// trace — and leaves the file as it was.
func TestDamagedDataFileAfterUncleanStop(t *testing.T) {
	marks, _ := uncleanDataFile(t)
	damaged, leaves := elementsPastTheFile(t, marks)
	db, out := runOnDataFile(t, damaged)
	if !strings.Contains(out, "the last run did not stop cleanly, and the data file "+db+" is damaged") || !strings.Contains(out, "restore it from a backup") {
		t.Errorf("the error does not say the file is damaged (%d leaf pages damaged):\n%s", leaves, out)
	}
	if after, _ := os.ReadFile(db); !bytes.Equal(after, damaged) {
		t.Error("the file changed")
	}
}

// A data file whose last run stopped cleanly, with damage inside its leaf
// pages (bit rot: a key now out of order; elements that point past the
// file), makes the real binary exit with one clear error, the same on
// every start — not a panic from bbolt's walk of the pages when it opens
// the file — and leaves the file as it was.
func TestDamagedLeafAfterCleanStop(t *testing.T) {
	full := filledDataFile(t)
	past, _ := elementsPastTheFile(t, full)
	for _, c := range []struct {
		name, says string
		damaged    []byte
	}{
		// Found by walkPages now: bbolt's walk reported it and went on
		// walking on a goroutine of its own while the file closed, and
		// faulted now and then (CI at fbb5d95).
		{"a key out of order", "the data file is damaged (its pages do not hold together: page ", keyOutOfOrder(t, full)},
		{"elements past the file", "the data file is damaged (its pages do not hold together: page ", past},
		// A branch element's key past its page: bbolt's walk read it on
		// its own goroutine, a panic nothing catches (an operator trial's
		// flipped file); walkPages reads it first.
		{"a branch key past its page", "the data file is damaged (its pages do not hold together: page ", branchKeyPastThePage(t, full)},
	} {
		for range 2 {
			db, out := runOnDataFile(t, c.damaged)
			if !strings.Contains(out, c.says) || !strings.Contains(out, "router db check") {
				t.Errorf("%s: the error does not say the file is damaged, and how:\n%s", c.name, out)
			}
			if after, _ := os.ReadFile(db); !bytes.Equal(after, c.damaged) {
				t.Errorf("%s: the file changed", c.name)
			}
		}
	}
}

// elementsPastTheFile is full with every leaf page's first element (after
// the 16-byte page header: flags, pos, ksize, vsize, 4 bytes each) pointing
// far past its page, and how many leaves that is.
func elementsPastTheFile(t *testing.T, full []byte) ([]byte, int) {
	t.Helper()
	return damageFirstElements(t, full, 0x02, 4, 0x7ffffff0)
}

// branchKeyPastThePage is full with every branch page's first element
// (after the 16-byte page header: pos, ksize, 4 bytes each, then the child
// page) holding a key size far past its page.
func branchKeyPastThePage(t *testing.T, full []byte) []byte {
	t.Helper()
	damaged, _ := damageFirstElements(t, full, 0x01, 4, 0xcd000000)
	return damaged
}

// damageFirstElements is full with the 4 bytes at off in the first element
// of every page of the type flags (0x01 branch, 0x02 leaf) set to v, and
// how many pages that is.
func damageFirstElements(t *testing.T, full []byte, flags uint16, off int, v uint32) ([]byte, int) {
	t.Helper()
	damaged := bytes.Clone(full)
	const page = 4096
	n := 0
	for at := 2 * page; at+page <= len(damaged); at += page {
		if binary.LittleEndian.Uint16(damaged[at+8:]) == flags && binary.LittleEndian.Uint16(damaged[at+10:]) > 0 {
			binary.LittleEndian.PutUint32(damaged[at+16+off:], v)
			n++
		}
	}
	if n == 0 {
		t.Fatalf("no page of flags %#x found to damage", flags)
	}
	return damaged, n
}

// keyOutOfOrder is full with the first key of one leaf page the buckets
// reach made to start with 0xff, so that it sorts after the next. The page
// is chosen on the undamaged file, by bbolt's own account of its pages (a
// leaf in use, not free: in a file without a synced freelist every page in
// use is reached; one page long, with two keys at least), walking over
// overflow pages. Opening damaged copies in this process to find one, as it
// did, could fault in bbolt's walk goroutine (a continuation page read as a
// leaf, its element headers damaged) and kill the test binary.
func keyOutOfOrder(t *testing.T, full []byte) []byte {
	t.Helper()
	const page = 4096
	copyAt := filepath.Join(t.TempDir(), "full.db")
	os.WriteFile(copyAt, full, 0o600)
	// PreLoadFreelist: a read-only open does not build the freelist, and
	// tx.Page needs it.
	bdb, err := bolt.Open(copyAt, 0o600, &bolt.Options{ReadOnly: true, PreLoadFreelist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	leaf := -1
	bdb.View(func(tx *bolt.Tx) error {
		for p := 2; p < len(full)/page; {
			info, err := tx.Page(p)
			if err != nil || info == nil {
				break
			}
			at := p * page
			el := at + 16 // the first element: flags, pos, ksize, vsize, 4 bytes each
			pos, ksize := int(binary.LittleEndian.Uint32(full[el+4:])), binary.LittleEndian.Uint32(full[el+8:])
			if info.Type == "leaf" && info.OverflowCount == 0 && info.Count >= 2 && ksize > 0 && el+pos < at+page && full[el+pos] != 0xff {
				leaf = p
				return nil
			}
			p += 1 + info.OverflowCount
		}
		return nil
	})
	if leaf < 0 {
		t.Fatal("no leaf page in use found to damage")
	}
	damaged := bytes.Clone(full)
	el := leaf*page + 16
	damaged[el+int(binary.LittleEndian.Uint32(full[el+4:]))] = 0xff
	t.Logf("leaf page %d damaged", leaf)
	return damaged
}

// A data file cut short (a copy interrupted, a disk that filled) makes the
// real binary exit with one clear error that names the file and its
// expected and actual sizes — never SIGBUS and a goroutine dump — and
// leaves the file byte for byte as it was.
func TestTruncatedDataFile(t *testing.T) {
	full := filledDataFile(t)
	// The first cut is far into the file's pages; its error says how many
	// bytes the metadata holds, and the next cuts fall inside those.
	used := 0
	cuts := []func() int{
		func() int { return 64 << 10 },
		func() int { return used / 4 },
		func() int { return used / 2 },
		func() int { return used - 4096 },
	}
	for _, at := range cuts {
		cut := at()
		if cut >= len(full) || cut <= 0 {
			t.Fatalf("the data file (%d bytes, %d in use) cannot be cut at %d", len(full), used, cut)
		}
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			db, out := runOnDataFile(t, full[:cut])
			want := fmt.Sprintf("%s: the data file is truncated: it has %d bytes", db, cut)
			if !strings.Contains(out, want) || !strings.Contains(out, "restore it from a backup") {
				t.Errorf("the error does not say %q:\n%s", want, out)
			}
			if m := regexp.MustCompile(`, (\d+) bytes;`).FindStringSubmatch(out); m != nil && used == 0 {
				used, _ = strconv.Atoi(m[1])
				t.Logf("the metadata holds %d bytes", used)
			}
			if after, _ := os.ReadFile(db); !bytes.Equal(after, full[:cut]) {
				t.Errorf("the file changed: %d bytes, was %d", len(after), cut)
			}
		})
		if used == 0 {
			t.Fatal("the first cut's error does not say how many bytes the file holds")
		}
	}
}

// A client cannot create event types without end through the catch-all:
// past max_types a new type is refused with too_many_event_types and
// nothing stored, known types keep flowing, and /metrics carries series
// for the admitted types only.
func TestCatchAllTypesAreBounded(t *testing.T) {
	path, sock := writeConfig(t, `
event "*" {
  max_types = 20
  route {
    to      = "nats.local"
    subject = "t.any"
  }
}
`)
	runRouter(t, path, sock)
	c := testkit.UnixClient(sock, 10*time.Second)
	post := func(typ string) (int, string) {
		body := `{"specversion":"1.0","type":"` + typ + `","source":"/flood","data":1}`
		resp, err := c.Post("http://r/v1/events", "application/cloudevents+json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for i := range 50 {
		status, body := post(fmt.Sprintf("flood.%d", i))
		switch {
		case i < 20 && status != 202:
			t.Fatalf("type %d refused: %d %s", i, status, body)
		case i >= 20 && (status != 422 || !strings.Contains(body, `"code":"too_many_event_types"`)):
			t.Fatalf("type %d past max_types: %d %s", i, status, body)
		}
	}
	if status, body := post("flood.3"); status != 202 {
		t.Errorf("an admitted type refused: %d %s", status, body)
	}
	if status, body := post("t.order"); status != 202 {
		t.Errorf("the type with its own block refused: %d %s", status, body)
	}
	if status, body := post(strings.Repeat("x", 300)); status != 400 || !strings.Contains(body, "type is longer than 256 bytes") {
		t.Errorf("a 300-byte type: %d %s", status, body)
	}
	metrics := get(t, c, "/metrics")
	if n := strings.Count(metrics, `switchyard_events_ingested_total{type="flood.`); n != 20 {
		t.Errorf("/metrics has %d ingested series for flood types, want 20", n)
	}
	stats := get(t, c, "/v1/stats")
	if strings.Contains(stats, "flood.20") || strings.Count(stats, `"flood.`) != 20 {
		t.Errorf("stats list refused types: %s", stats)
	}
}

// Unauthenticated TCP clients that open connections, announce a body and
// send nothing cannot starve the router: the TCP listener holds at most
// max_connections of them and cuts each off after read_timeout, so the
// real binary, under a file-descriptor limit a flood would otherwise
// exhaust, keeps answering on its unix socket throughout and delivers
// what it accepted, without a restart.
func TestHeldConnectionFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 1,500 connections to the real binary")
	}
	dir := t.TempDir()
	sockDir, _ := os.MkdirTemp("/tmp", "sy")
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "r.sock")
	tokens := filepath.Join(dir, "tokens.json")
	os.WriteFile(tokens, []byte(`{"tokens":[{"token":"a-long-token-for-the-flood-test","tenant":"acme"}]}`), 0o600)
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	path := filepath.Join(dir, "policies.hcl")
	os.WriteFile(path, []byte(fmt.Sprintf(`
listen {
  socket          = %q
  http            = %q
  tokens_file     = %q
  max_connections = 100
  read_timeout    = "3s"
}
storage { path = %q }
nats "local" {
  embedded = true
  port     = -1
  stream "events" { subjects = ["t.>"] }
}
event "t.order" {
  route {
    to      = "nats.local"
    subject = "t.orders"
  }
  polling { min = "10ms" }
}
`, sock, addr, tokens, filepath.Join(dir, "data", "r.db"))), 0o600)

	// 400 descriptors: the 1,500 held connections would take them all.
	var logs testkit.Buffer
	cmd := exec.Command("bash", "-c", `ulimit -n 400 && exec "$0" run -config "$1"`, routerBinary(t), path)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	c := testkit.UnixClient(sock, 10*time.Second)
	waitHealthy(t, c)

	// The flood: connections that send headers announcing a body, then hold.
	var conns []net.Conn
	for range 1500 {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			continue // the kernel's backlog is full: the flood is at its limit
		}
		conn.Write([]byte("POST /v1/events HTTP/1.1\r\nHost: r\r\nContent-Type: application/cloudevents+json\r\nContent-Length: 100000\r\n\r\n"))
		conns = append(conns, conn)
	}
	t.Logf("%d connections held", len(conns))

	// The unix socket answers throughout, and what it accepts is delivered.
	var ids []string
	for i := range 20 {
		id := fmt.Sprintf("during-%d", i)
		start := time.Now()
		c.Timeout = 5 * time.Second
		resp, err := c.Post("http://r/v1/events", "application/cloudevents+json",
			strings.NewReader(`{"specversion":"1.0","type":"t.order","source":"/t","id":"`+id+`","data":{}}`))
		if err != nil || resp.StatusCode != 202 {
			t.Fatalf("unix-socket ingest during the flood: %v %v (after %s)\n%s", resp, err, time.Since(start), logs.String())
		}
		resp.Body.Close()
		ids = append(ids, id)
		time.Sleep(100 * time.Millisecond)
	}
	for _, id := range ids {
		waitState(t, c, id, "delivered", 30*time.Second)
	}

	// The router cut the held connections off after read_timeout.
	closed := 0
	deadline := time.Now().Add(15 * time.Second)
	for _, conn := range conns {
		conn.SetReadDeadline(deadline)
		if _, err := conn.Read(make([]byte, 1)); err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			closed++ // an answer (408/400) or EOF: the router let go
		}
		conn.Close()
	}
	if closed < 100 {
		t.Errorf("the router let go of %d held connections, want at least the first 100", closed)
	}
	// And after the flood: ingest, delivery and readiness as before.
	resp, err := c.Post("http://r/v1/events", "application/cloudevents+json",
		strings.NewReader(`{"specversion":"1.0","type":"t.order","source":"/t","id":"after","data":{}}`))
	if err != nil || resp.StatusCode != 202 {
		t.Fatalf("ingest after the flood: %v %v", resp, err)
	}
	resp.Body.Close()
	waitState(t, c, "after", "delivered", 30*time.Second)
	if ready := get(t, c, "/readyz"); !strings.Contains(ready, `"ready": true`) {
		t.Errorf("readyz after the flood: %s", ready)
	}
	if strings.Contains(logs.String(), "too many open files") {
		t.Errorf("the router ran out of file descriptors:\n%s", logs.String())
	}
}
