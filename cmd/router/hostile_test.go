package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// Hostile plugins in the real router: each is retried, then dead-lettered
// with a reason that names the plugin and the event, while another event
// type keeps flowing and the router stays up.
func TestHostilePluginsInTheRouter(t *testing.T) {
	hostile := map[string]string{ // plugin → what the DLQ reason must say
		"loop":      "timed out",
		"membomb":   "memory",
		"trap":      "unreachable",
		"toomany":   "output",
		"toolarge":  "output",
		"malformed": "output",
		"reject":    "order total is negative",
	}
	var hcl strings.Builder
	for name := range hostile {
		abs, err := filepath.Abs(filepath.Join("..", "..", "plugins", "wasm", "testdata", name+".wasm"))
		if err != nil {
			t.Fatal(err)
		}
		timeout := "100ms"
		if name == "membomb" {
			// Its memory limit is what must stop it: under the race
			// detector on a busy box, growing to 4 MiB took longer than
			// 100 ms once, and the timeout stopped it first (CI, 16ad83d).
			timeout = "10s"
		}
		fmt.Fprintf(&hcl, `
plugin %q {
  wasm = %q
  limits {
    timeout = %q
    memory  = "4MiB"
  }
}
event "h.%s" {
  plugins     = [%q]
  max_retries = 1
  backoff { enabled = false }
  polling {
    min = "10ms"
    max = "50ms"
  }
  route {
    to      = "nats.local"
    subject = "t.h"
  }
}
`, name, abs, timeout, name, name)
	}
	hcl.WriteString(`
event "calm" {
  polling { min = "10ms" }
  route {
    to      = "nats.local"
    subject = "t.calm"
  }
}
`)
	path, sock := writeConfig(t, hcl.String())
	runRouter(t, path, sock)
	c := testkit.UnixClient(sock, 10*time.Second)
	post := func(typ, id string) {
		t.Helper()
		resp, err := c.Post("http://r/v1/events", "application/cloudevents+json",
			strings.NewReader(fmt.Sprintf(`{"specversion":"1.0","type":%q,"source":"/t","id":%q,"data":{"n":1}}`, typ, id)))
		if err != nil || resp.StatusCode != 202 {
			t.Fatalf("post %s: %v %v", id, resp, err)
		}
		resp.Body.Close()
	}
	for name := range hostile {
		post("h."+name, "x-"+name) // ids starting with x set the traps off
	}
	// The calm type flows while the hostile plugins fail.
	var worst time.Duration
	for i := range 20 {
		id := fmt.Sprintf("calm-%d", i)
		start := time.Now()
		post("calm", id)
		waitState(t, c, id, "delivered", 10*time.Second)
		worst = max(worst, time.Since(start))
	}
	t.Logf("calm type's worst latency while hostile plugins ran: %v", worst)
	for name, want := range hostile {
		body := waitState(t, c, "x-"+name, "dlq", 20*time.Second)
		if !strings.Contains(body, fmt.Sprintf(`plugin \"%s\"`, name)) || !strings.Contains(body, `event \"x-`+name) ||
			!strings.Contains(strings.ToLower(body), want) {
			t.Errorf("%s: DLQ reason lacks the plugin, the event or %q: %s", name, want, body)
		}
	}
	if get(t, c, "/healthz") == "" {
		t.Fatal("router not healthy")
	}
}

// waitState polls GET /v1/events/{id} until its state is state.
func waitState(t *testing.T, c *http.Client, id, state string, timeout time.Duration) string {
	t.Helper()
	var body string
	testkit.EventuallyWith(t, timeout, func() bool {
		body = get(t, c, "/v1/events/"+id)
		return strings.Contains(body, `"state": "`+state+`"`)
	}, func() string { return fmt.Sprintf("%s not %s: %s", id, state, body) })
	return body
}
