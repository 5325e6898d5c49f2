// Package every runs a function at a fixed interval on a goroutine of its
// own, until told to stop: the shape of the router's keep-alives (a start
// that tells systemd it goes on, a batch that tells JetStream it is still
// being worked on, a start that says what it waits for).
package every

import (
	"sync"
	"time"
)

// Start calls fn every d, the first time d from now, until stop is
// called. stop returns once fn is not running and will not run again (a
// keep-alive must not follow the end it kept alive); calling it again
// does nothing.
func Start(d time.Duration, fn func()) (stop func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			select { // a tick and a stop both ready: the stop wins
			case <-done:
				return
			default:
			}
			fn()
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-ended
	}
}
