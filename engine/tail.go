package engine

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-router/switchyard"
)

// Published is one output a broker acknowledged, as the live tail shows it
// (`router tail`, the console).
type Published struct {
	At          time.Time
	Queue       string // the event type (or inbox queue) it left from
	Tenant      string // whose event it was made of (an inbox's: the default tenant)
	EventID     string // the id of the stored event it was made of
	Destination string // "nats.local:orders"
	Position    switchyard.Position
	Event       switchyard.Event // as the plugin chain left it
}

// tailBuffer is how many published outputs a watcher may fall behind
// before the newest are dropped for it (and counted): a slow watcher never
// slows delivery.
const tailBuffer = 1024

// Watcher receives the outputs published after it started watching.
type Watcher struct {
	C       <-chan Published
	c       chan Published
	queue   string // "" = every type
	dropped atomic.Uint64
}

// Dropped is how many outputs this watcher missed because it fell behind.
func (w *Watcher) Dropped() uint64 { return w.dropped.Load() }

// tail fans published outputs out to the watchers. With none, a commit
// pays one atomic load.
type tail struct {
	watching atomic.Int32
	mu       sync.Mutex
	watchers map[*Watcher]struct{}
}

// Watch starts a watcher of the outputs published from queue ("" = all);
// stop ends it and closes its channel.
func (e *Engine) Watch(queue string) (w *Watcher, stop func()) {
	c := make(chan Published, tailBuffer)
	w = &Watcher{C: c, c: c, queue: queue}
	t := &e.tail
	t.mu.Lock()
	if t.watchers == nil {
		t.watchers = make(map[*Watcher]struct{})
	}
	t.watchers[w] = struct{}{}
	t.watching.Add(1)
	t.mu.Unlock()
	var once sync.Once
	return w, func() {
		once.Do(func() {
			t.mu.Lock()
			delete(t.watchers, w)
			t.watching.Add(-1)
			close(w.c)
			t.mu.Unlock()
		})
	}
}

// published hands a committed batch's acknowledged outputs to the watchers.
func (t *tail) published(queue string, b *batch, at time.Time) {
	if t.watching.Load() == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range b.items {
		for _, o := range b.items[i].outputs {
			if o.result.Err != nil {
				continue
			}
			p := Published{At: at, Queue: queue, Tenant: b.items[i].rec.Tenant, EventID: b.items[i].rec.Event.ID, Destination: o.dest, Position: o.result.Position, Event: o.event}
			for w := range t.watchers {
				if w.queue != "" && w.queue != queue {
					continue
				}
				select {
				case w.c <- p:
				default:
					w.dropped.Add(1)
				}
			}
		}
	}
}
