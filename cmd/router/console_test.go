package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"
)

// deadType is a type whose subject no stream captures until the test makes
// one: its events dead-letter at once (max_retries = 0), and a retry from
// the DLQ delivers them once the stream exists.
const deadType = "dead.letter"

// The operator console in a real headless Chromium, through `router ui`
// against the real binary: the overview lists the configured types and its
// counts follow events as they are posted; an event is found by id and by
// idempotency key; a dead letter is retried from the DLQ page (after a
// confirmation that says how many) and is then delivered; the live tail
// shows a newly posted event. Each page's screenshot is saved
// ($SWITCHYARD_SCREENSHOTS, else the test's temporary directory).
func TestConsoleInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the router binary and a browser")
	}
	browser := findChromium()
	if browser == "" {
		t.Skip("SKIPPED: no Chromium on this machine (chromium, chromium-browser or google-chrome on PATH); " +
			"the console's browser tests need one: .ci/run installs Debian's chromium")
	}
	r := newCrashRouter(t, 2*time.Minute)
	appendConfig(t, r.config, fmt.Sprintf(`
event %q {
  max_retries = 0
  route {
    to      = "nats.local"
    subject = %q
  }
}
`, deadType, deadType))
	r.start()
	link := startUI(t, r)
	shots := screenshotDir(t)

	ctx := newBrowser(t, browser)
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(actx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			png, err := chromedp.FullScreenshot(100)(ctx, tg) // 100: PNG
			if err != nil {
				return err
			}
			path := filepath.Join(shots, name+".png")
			t.Logf("screenshot %s", path)
			return os.WriteFile(path, png, 0o644)
		})
	}

	// Overview: both configured types, and live counts.
	run("open the link", chromedp.Navigate(link),
		chromedp.WaitVisible(chromedp.CSS(`#types tr[data-type="`+crashType+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#types tr[data-type="`+deadType+`"]`)))
	ids := postBatches(t, r.client, crashType, 20)
	keyed := postWithKey(t, r.client, crashType, "order-42")
	dead := postBatches(t, r.client, deadType, 1)[0]
	waitState(t, r.client, dead, "dlq", 30*time.Second)
	run("overview counts", chromedp.WaitVisible(chromedp.CSS(`#types tr[data-type="`+deadType+`"] td[data-col="dlq"].bad`)),
		textIs(`#types tr[data-type="`+deadType+`"] td[data-col="dlq"]`, "1"), shot("overview"))

	// An event by id, and by idempotency key.
	waitState(t, r.client, ids[3], "delivered", 30*time.Second)
	run("event by id", chromedp.Navigate(link0(link)+"#/event?id="+ids[3]),
		chromedp.WaitVisible(chromedp.CSS(`section[data-event="`+ids[3]+`"] td.state.ok`)),
		textIs(`section[data-event="`+ids[3]+`"] td.state`, "delivered"),
		chromedp.WaitVisible(chromedp.CSS(`section[data-event="`+ids[3]+`"] pre.data`)), shot("event"))
	run("event by key", chromedp.Navigate(link0(link)+"#/event?key=order-42"),
		chromedp.WaitVisible(chromedp.CSS(`section[data-event="`+keyed+`"]`)))

	// The DLQ: retry the dead letter once its subject has a stream.
	makeStream(t, r, "dead", deadType)
	run("retry from the DLQ", chromedp.Navigate(link0(link)+"#/dlq?status=dlq"),
		chromedp.WaitVisible(chromedp.CSS(`#dlq-rows tr[data-id="`+dead+`"] button.row-retry`)), shot("dlq"),
		chromedp.Click(chromedp.CSS(`#dlq-rows tr[data-id="`+dead+`"] button.row-retry`)),
		textIs(`#confirm-question`, "Retry 1 dead letter(s)?"),
		chromedp.Click(chromedp.CSS(`#confirm-yes`)),
		textIs(`#dlq-result`, "retry: 1 of 1 done"))
	waitState(t, r.client, dead, "delivered", 30*time.Second)
	run("the retried event", chromedp.Navigate(link0(link)+"#/event?id="+dead),
		textIs(`section[data-event="`+dead+`"] td.state`, "delivered"))

	// The live tail.
	run("open the tail", chromedp.Navigate(link0(link)+"#/tail"), textIs(`#tail-state`, "watching"))
	newID := postWithKey(t, r.client, crashType, "tail-me")
	run("the tail shows it", chromedp.WaitVisible(chromedp.CSS(`#tail-rows tr[data-id="`+newID+`"]`)), shot("tail"))
}

// findChromium is the path of a Chromium-based browser, or "".
func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// newBrowser starts a headless browser for the test.
func newBrowser(t *testing.T, path string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// textIs waits until the element's text is want.
func textIs(sel, want string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		for {
			got, err := chromedp.Text(chromedp.CSS(sel))(ctx, tg)
			if err != nil {
				return err
			}
			if strings.TrimSpace(got) == want {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s reads %q, want %q", sel, got, want)
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
}

// startUI runs `router ui` against r and returns the link it prints.
func startUI(t *testing.T, r *crashRouter) string {
	t.Helper()
	cmd := exec.Command(r.bin, "ui", "-socket", r.socket)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatalf("router ui printed nothing: %v", sc.Err())
	}
	link, ok := strings.CutPrefix(sc.Text(), "Switchyard console: ")
	if !ok {
		t.Fatalf("router ui printed %q", sc.Text())
	}
	go func() {
		for sc.Scan() {
		}
	}()
	return link
}

// link0 is the console's address without the one-time token.
func link0(link string) string {
	base, _, _ := strings.Cut(link, "#")
	return base
}

func screenshotDir(t *testing.T) string {
	if d := os.Getenv("SWITCHYARD_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

func appendConfig(t *testing.T, path, extra string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, extra...), 0o600); err != nil {
		t.Fatal(err)
	}
}

// postWithKey posts one event of type typ with an Idempotency-Key and
// returns its id.
func postWithKey(t *testing.T, c *http.Client, typ, key string) string {
	t.Helper()
	id := fmt.Sprintf("%s-%s", typ, key)
	req, _ := http.NewRequest(http.MethodPost, "http://r/v1/events",
		strings.NewReader(fmt.Sprintf(`{"specversion":"1.0","type":%q,"source":"/console","id":%q,"datacontenttype":"application/json","data":{"key":%q,"items":[1,2,3]}}`, typ, id, key)))
	req.Header.Set("Content-Type", "application/cloudevents+json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("post %s: %v %v", id, resp, err)
	}
	resp.Body.Close()
	return id
}

// makeStream creates a JetStream stream on r's embedded server.
func makeStream(t *testing.T, r *crashRouter, name string, subjects ...string) {
	t.Helper()
	js := routerJetStream(t, r.config, r.natsURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: subjects}); err != nil {
		t.Fatal(err)
	}
}
