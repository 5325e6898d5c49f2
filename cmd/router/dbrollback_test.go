package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/internal/testkit"
	"github.com/switchyard-router/switchyard/storage"
	"github.com/switchyard-router/switchyard/storage/storagetest"
)

// A router killed (between commits, its events delivered) on a file whose
// last commit its disk then tore refuses to start and names router db
// rollback; the rollback sets the file back one commit (a second finds
// nothing to do), and the next start checks the file, opens it, drains
// what the torn commit's loss set back (delivery's bookkeeping: sent
// again) and every acknowledged event is in the stream. That a torn
// commit's own events are lost and no other is, TestRollBackATornLastCommit
// shows on the storage alone.
func TestDBRollbackATornLastCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("kills the real binary")
	}
	config, sock := writeConfig(t, "")
	port := testkit.FreePort(t) // the stream is read after the restart, on the same port
	src := strings.Replace(mustRead(t, config), "port     = -1", "port     = "+strconv.Itoa(port), 1)
	if err := os.WriteFile(config, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(filepath.Dir(config), "r.db")
	c, _, proc := serveBinaryProcess(t, config, sock)
	acked := postRange(t, c, "t.order", 0, 2000)
	// Killed between commits: a commit under way when the process ends
	// may have written over pages of the commit before the last (bbolt
	// reuses what the last freed), which then does not check either.
	waitDrained(t, c, "", "before the kill", time.Minute)
	commits := func() float64 { return metricValue(t, c, "switchyard_storage_commit_seconds_count") }
	last := commits()
	testkit.Eventually(t, "a second without a commit", 30*time.Second, func() bool {
		time.Sleep(time.Second)
		n := commits()
		still := n == last
		last = n
		return still
	})
	proc.Kill()
	testkit.Eventually(t, "the killed router to end", 10*time.Second, func() bool { return proc.Signal(syscall.Signal(0)) != nil })
	storagetest.TearLastCommits(t, data, 1)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, routerBinary(t), "run", "-config", config).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "`router db rollback` on it") {
		t.Fatalf("the start on the torn file: %v\n%s", err, out)
	}
	var said bytes.Buffer
	if err := NewMain(nil, &said, &said).Run(ctx, []string{"db", "rollback", data}); err != nil || !strings.Contains(said.String(), "rolled back from commit") {
		t.Fatalf("db rollback: %v\n%s", err, said.String())
	}
	t.Logf("%s", said.String())
	said.Reset()
	if err := NewMain(nil, &said, &said).Run(ctx, []string{"db", "rollback", data}); err != nil || !strings.Contains(said.String(), "nothing to roll back") {
		t.Fatalf("db rollback again: %v\n%s", err, said.String())
	}

	c, logs, _ := serveBinaryProcess(t, config, sock)
	if !strings.Contains(logs.String(), "the data file is sound") {
		t.Errorf("the start after the rollback did not check the file:\n%s", logs.String())
	}
	waitDrained(t, c, "", "after the rollback", time.Minute)
	if missing := streamMissing(t, config, "", "events", acked); len(missing) > 0 {
		t.Fatalf("%d of %d acknowledged events are not in the stream after the rollback, e.g. %v", len(missing), len(acked), missing[:min(5, len(missing))])
	}
}

// A file whose last two commits are torn is not rolled back: the commit
// before the last does not check either, so db rollback says so, exits 1,
// and leaves the file byte for byte as it was.
func TestDBRollbackLeavesAFileItCannotMend(t *testing.T) {
	data := filepath.Join(t.TempDir(), "router.db")
	storagetest.MakeWithClock(t, data, time.Now())
	db, err := storage.Open(data, storage.Options{}) // a second commit, the clean stop's
	if err != nil || db.Close(context.Background()) != nil {
		t.Fatal(err)
	}
	storagetest.TearLastCommits(t, data, 2)
	before := mustRead(t, data)
	var said bytes.Buffer
	err = NewMain(nil, &said, &said).Run(context.Background(), []string{"db", "rollback", data})
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "does not check either") || !strings.Contains(err.Error(), "put back as it was") {
		t.Fatalf("db rollback of a file two commits torn: %v\n%s", err, said.String())
	}
	if mustRead(t, data) != before {
		t.Fatal("the refused rollback changed the file")
	}
	// -o json says the same: not rolled back, the problems, the error.
	said.Reset()
	err = NewMain(nil, &said, &said).Run(context.Background(), []string{"db", "rollback", data, "-o", "json"})
	var rep rollbackReport
	if exitCode(err) != 1 || json.Unmarshal(said.Bytes(), &rep) != nil || rep.RolledBack || len(rep.Problems) == 0 || !strings.Contains(rep.Error, "does not check either") {
		t.Fatalf("db rollback -o json of a file two commits torn: %v %+v\n%s", err, rep, said.String())
	}
}

// killOnceEnv names a file: the first checking child that finds it missing
// makes it and is killed (SIGKILL), as the OOM killer would end it.
const killOnceEnv = "SWITCHYARD_TEST_KILL_CHECKER_ONCE"

// killCheckerOnce is the checking child's part of killOnceEnv.
func killCheckerOnce() {
	mark := os.Getenv(killOnceEnv)
	if mark == "" {
		return
	}
	if f, err := os.OpenFile(mark, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600); err == nil {
		f.Close()
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
}

// A checking child ended from outside (the OOM killer) says nothing of the
// file: db rollback stops with that error and leaves a sound file as it is
// (it took the silence for damage and rolled the file back).
func TestDBRollbackWhenTheCheckIsKilled(t *testing.T) {
	data := filepath.Join(t.TempDir(), "router.db")
	storagetest.MakeWithClock(t, data, time.Now())
	before := mustRead(t, data)
	t.Setenv(killOnceEnv, filepath.Join(t.TempDir(), "killed"))
	var said bytes.Buffer
	err := NewMain(nil, &said, &said).Run(context.Background(), []string{"db", "rollback", data})
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "ended from outside") {
		t.Fatalf("db rollback with its check killed: %v\n%s", err, said.String())
	}
	if mustRead(t, data) != before {
		t.Fatal("db rollback changed a sound file whose check was killed")
	}
}
