package main

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// A power cut in the default configuration loses nothing acknowledged. The
// simulation: under load, copy the embedded JetStream store at a random
// moment (what it had synced by then), go on for less than its
// sync_interval (1 s), SIGKILL the router, put the copy back in place of
// the store, start again. The router finds its running mark, asks the
// stream which of the events it delivered in the last 2×sync_interval+5s it
// still holds and republishes the others: every acknowledged event ends up
// in the stream exactly once. 3 cuts here, 20 with -long.
func TestPowerLossEmbeddedJetStream(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: runs the router binary for a while")
	}
	cuts := 3
	if *long {
		cuts = 20
	}
	powerCuts(t, cuts, 30*time.Minute, 0)
}

// The same holds when the machine stays off for longer than the stream's
// duplicates window, so that JetStream no longer drops a republished
// message it kept: the router republishes only what the stream lost.
func TestPowerLossLongerThanTheDedupWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: runs the router binary for a while")
	}
	powerCuts(t, 2, time.Second, 1500*time.Millisecond)
}

// powerCuts cuts the power cuts times under load, with the stream's
// duplicates window dup, and keeps the machine off for off each time.
func powerCuts(t *testing.T, cuts int, dup, off time.Duration) {
	t.Helper()
	r := newCrashRouter(t, dup)
	store := filepath.Join(filepath.Dir(r.config), "data", "nats")
	l := &loader{client: r.client}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.start()
	wait := l.run(ctx, 4)
	for i := range cuts {
		time.Sleep(time.Duration(500+rand.N(1500)) * time.Millisecond)
		snap := filepath.Join(t.TempDir(), "nats")
		if out, err := exec.Command("cp", "-a", store, snap).CombinedOutput(); err != nil {
			t.Fatalf("copy the store: %v\n%s", err, out)
		}
		time.Sleep(time.Duration(500+rand.N(400)) * time.Millisecond) // what the copy holds was marked delivered before the kill
		r.kill()
		if err := os.RemoveAll(store); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(snap, store); err != nil {
			t.Fatal(err)
		}
		t.Logf("cut %d: store restored to its copy", i+1)
		time.Sleep(off)
		r.start()
	}
	time.Sleep(300 * time.Millisecond)
	cancel()
	wait()
	acked := l.ackedIDs()
	t.Logf("%d power cuts: %d events acknowledged", cuts, len(acked))
	if len(acked) == 0 {
		t.Fatal("no event was acknowledged")
	}
	checkExactlyOnce(t, r, acked)
}
