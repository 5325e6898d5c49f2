package main

import (
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// idempotentService applies an effect once per Idempotency-Key, however
// often it is called: what a receiver of an at-least-once router must do.
type idempotentService struct {
	mu       sync.Mutex
	calls    int
	effects  map[string]int
	sock     string
	received map[string]string // id → data, the service's state
}

func startIdempotentService(t *testing.T) *idempotentService {
	t.Helper()
	dir, err := os.MkdirTemp("", "sv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &idempotentService{effects: map[string]int{}, received: map[string]string{}, sock: filepath.Join(dir, "svc.sock")}
	ln, err := net.Listen("unix", s.sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		s.mu.Lock()
		defer s.mu.Unlock()
		s.calls++
		if _, done := s.received[key]; !done {
			s.effects[key]++
			s.received[key] = r.Header.Get("Ce-Type")
		}
		w.WriteHeader(http.StatusOK)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return s
}

// runOutboxToInbox sends n events out through Kafka and back in through an
// inbox of the same router to the service, and returns the service's final
// state and how many calls it got.
func runOutboxToInbox(t *testing.T, n int, args ...string) (state map[string]string, effects map[string]int, calls int) {
	kc := testkit.Kafka(t, kfake.SeedTopics(2, "loop"))
	svc := startIdempotentService(t)
	path, sock := writeConfig(t, fmt.Sprintf(`
kafka "main" { brokers = [%q] }
event "loop.order" {
  polling { min = "10ms" }
  route {
    to    = "kafka.main"
    topic = "loop"
  }
}
inbox "loop" {
  from   = "kafka.main"
  topics = ["loop"]
  polling { min = "10ms" }
  deliver { url = "unix://%s/in" }
}
`, kc.ListenAddrs()[0], svc.sock))
	runRouter(t, path, sock, args...)
	c := testkit.UnixClient(sock, 10*time.Second)
	for i := range n {
		resp, err := c.Post("http://r/v1/events", "application/cloudevents+json",
			strings.NewReader(fmt.Sprintf(`{"specversion":"1.0","type":"loop.order","source":"/t","id":"L-%d"}`, i)))
		if err != nil || resp.StatusCode != 202 {
			t.Fatalf("post: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	got := func() int {
		svc.mu.Lock()
		defer svc.mu.Unlock()
		return len(svc.received)
	}
	testkit.EventuallyWith(t, 30*time.Second, func() bool { return got() == n },
		func() string { return fmt.Sprintf("service got %d of %d", got(), n) })
	time.Sleep(300 * time.Millisecond) // let any second delivery land
	svc.mu.Lock()
	defer svc.mu.Unlock()
	return maps.Clone(svc.received), maps.Clone(svc.effects), svc.calls
}

// Double-send mode: every publish and every delivery is made twice. The
// service's final state must equal a normal run's: any missing idempotency
// shows up here before production.
func TestDoubleSendOutboxToInbox(t *testing.T) {
	const n = 100
	normal, normalEffects, normalCalls := runOutboxToInbox(t, n)
	doubled, doubledEffects, doubledCalls := runOutboxToInbox(t, n, "-double-send")
	if !maps.Equal(normal, doubled) || !maps.Equal(normalEffects, doubledEffects) {
		t.Fatalf("final state differs:\nnormal  %v\ndoubled %v", normalEffects, doubledEffects)
	}
	for id, k := range doubledEffects {
		if k != 1 {
			t.Errorf("%s applied %d times", id, k)
		}
	}
	// The mode really doubles: Kafka got every record twice (the inbox
	// dropped one copy) and the service every delivery twice.
	if doubledCalls != 2*n || normalCalls != n {
		t.Fatalf("service calls: normal %d, doubled %d; want %d and %d", normalCalls, doubledCalls, n, 2*n)
	}
	t.Logf("normal run: %d calls; double-send: %d calls; effects equal (%d ids)", normalCalls, doubledCalls, len(doubled))
}
