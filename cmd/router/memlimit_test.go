package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// The router in a memory cgroup keeps its heap under a share of the
// group's limit: its collector's limit (go_gc_gomemlimit_bytes) is at most
// the ceiling the limit gives (ceilingOf: half of a 64 MiB group), and its
// start's log says so; it collected as though it had the
// machine's memory, and a memory trial's router was killed by the kernel
// first. Needs root and
// cgroup v1's memory controller (cgroup v2: the same read, another file).
func TestTheCollectorKeepsUnderTheCgroupLimit(t *testing.T) {
	const root = "/sys/fs/cgroup/memory"
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: making a memory cgroup needs root")
	}
	if _, err := os.Stat(filepath.Join(root, "memory.limit_in_bytes")); err != nil {
		t.Skipf("SKIPPED: no cgroup v1 memory controller at %s (%v)", root, err)
	}
	group := filepath.Join(root, fmt.Sprintf("switchyard-test-%d", os.Getpid()))
	if err := os.Mkdir(group, 0o755); err != nil {
		t.Skipf("SKIPPED: cannot make a memory cgroup: %v", err)
	}
	t.Cleanup(func() { os.Remove(group) })
	const limit = 64 << 20 // under what the tuner alone would let the heap reach: live + stacks + 48 MiB
	if err := os.WriteFile(filepath.Join(group, "memory.limit_in_bytes"), []byte(strconv.Itoa(limit)), 0o644); err != nil {
		t.Fatal(err)
	}
	path, sock := writeConfig(t, "")
	cmd := exec.Command("sh", "-c", `echo $$ > "$1"/cgroup.procs && exec "$2" run -config "$3"`, "sh", group, routerBinary(t), path)
	cmd.Env = append(os.Environ(), "GOMEMLIMIT=", "GOGC=")
	var logs testkit.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	c := testkit.UnixClient(sock, 10*time.Second)
	var got float64
	gauge := regexp.MustCompile(`(?m)^go_gc_gomemlimit_bytes (\S+)$`)
	testkit.EventuallyWith(t, 30*time.Second, func() bool {
		resp, err := c.Get("http://r/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := gauge.FindSubmatch(b)
		if m == nil {
			return false
		}
		got, _ = strconv.ParseFloat(string(m[1]), 64)
		return true
	}, func() string { return "no go_gc_gomemlimit_bytes from the router in the cgroup" })
	if ceiling := float64(ceilingOf(limit, nil)); got <= 0 || got > ceiling {
		t.Fatalf("the collector's limit is %.0f bytes in a cgroup of %d: want at most %.0f", got, limit, ceiling)
	}
	// And the log says what the limit made of the router's memory.
	if want := fmt.Sprintf("under a cgroup memory limit: collector_ceiling_bytes=%d held_outputs_max_bytes=%d", ceilingOf(limit, nil), heldOutputBound(ceilingOf(limit, nil))); !strings.Contains(logs.String(), want) {
		t.Fatalf("the start's log does not say %q:\n%s", want, logs.String())
	}
}

// A cgroup limit gives the collector 90% of it, less in a small group,
// which keeps 32 MiB for the pages of files (the router's code among
// them), the collector at least half; and the batches a quarter of that,
// from 8 MiB to the default 64 MiB; no limit (none read, or v1's 2^63
// less a page) gives neither.
func TestMemoryBoundsFollowTheCgroupLimit(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		limit         uint64
		err           error
		ceiling, held int64
	}{
		{128 * mib, nil, 96 * mib, 24 * mib},       // 32 MiB kept for files
		{64 * mib, nil, 32 * mib, 8 * mib},         // half
		{16 * mib, nil, 8 * mib, 8 * mib},          // half
		{256 * mib, nil, 224 * mib, 56 * mib},      // 32 MiB kept for files
		{1 << 30, nil, 1 << 30 * 9 / 10, 64 * mib}, // 90%
		{4 << 30, nil, 4 << 30 * 9 / 10, 64 * mib}, // 90%
		{9223372036854771712, nil, 0, 0},
		{0, errors.New("no cgroup"), 0, 0},
	} {
		ceiling := ceilingOf(c.limit, c.err)
		if diff := ceiling - c.ceiling; diff > 1 || diff < -1 {
			t.Errorf("limit %d: ceiling %d, want %d", c.limit, ceiling, c.ceiling)
		}
		if held := heldOutputBound(ceiling); held-c.held > 1 || c.held-held > 1 {
			t.Errorf("limit %d: held bound %d, want %d", c.limit, held, c.held)
		}
	}
}

// A group under 64 MiB is said at start, as a warning: there the router's
// code and the embedded server leave the heap too little; 64 MiB is not.
func TestASmallGroupIsWarnedOf(t *testing.T) {
	for _, c := range []struct {
		limit uint64
		warn  bool
	}{{48 << 20, true}, {63 << 20, true}, {64 << 20, false}, {128 << 20, false}} {
		var logs testkit.Buffer
		logMemoryBudget(hclog.New(&hclog.LoggerOptions{Output: &logs}), ceilingOf(c.limit, nil))
		if got := strings.Contains(logs.String(), "[WARN]  the cgroup's memory limit is under 64 MiB"); got != c.warn {
			t.Errorf("a group of %d MiB: warned %v, want %v:\n%s", c.limit>>20, got, c.warn, logs.String())
		}
	}
}
