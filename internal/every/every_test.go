package every

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// Start calls fn repeatedly, and never again once stop has returned, even
// when stop is called twice.
func TestStartRepeatsUntilStopped(t *testing.T) {
	var n atomic.Int32
	stop := Start(time.Millisecond, func() { n.Add(1) })
	testkit.EventuallyWith(t, 5*time.Second, func() bool { return n.Load() >= 3 },
		func() string { return fmt.Sprintf("fn ran %d times in 5 s at a 1 ms interval", n.Load()) })
	stop()
	after := n.Load()
	time.Sleep(20 * time.Millisecond)
	stop()
	if got := n.Load(); got != after {
		t.Fatalf("fn ran %d more times after stop returned", got-after)
	}
}

// stop waits for a call of fn under way to end.
func TestStopWaitsForTheRunningCall(t *testing.T) {
	inside, release := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	var once atomic.Bool
	stop := Start(time.Millisecond, func() {
		if once.Swap(true) {
			return
		}
		close(inside)
		<-release
		finished.Store(true)
	})
	<-inside
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("stop returned while fn was running")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	<-stopped
	if !finished.Load() {
		t.Fatal("stop returned before fn ended")
	}
}
