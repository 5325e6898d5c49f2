package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-router/switchyard/internal/testkit"
)

// router plugin dev rebuilds for the author's sources and build files,
// not for what the build, the router or a redirected command writes into
// the folder (a tail into tail.out rebuilt the plugin at each event).
func TestDevSkipsOutputsNotSources(t *testing.T) {
	for rel, skip := range map[string]bool{
		"plugin.rs": false, "stamp.c": false, "switchyard.h": false, "build.sh": false,
		"Cargo.toml": false, "assembly/index.ts": false, "notes.txt": false, "testdata/a.event.json": false,
		"hello.wasm": true, "router.log": true, "tail.out": true, "x.tmp": true, "plugin.rs~": true,
		".plugin.rs.swp": true,
	} {
		if got := devSkip(rel, false); got != skip {
			t.Errorf("devSkip(%q) = %v, want %v", rel, got, skip)
		}
	}
	for _, dir := range []string{"data", "target", "node_modules", ".git"} {
		if !devSkip(dir, true) {
			t.Errorf("the folder %s is watched", dir)
		}
	}
}

// devWatching runs devWatch, until the test ends, on a new folder holding
// plugin.wat and files (name → contents), with build (n counts the builds
// from 1), then edits plugin.wat once; it returns the folder, the count of
// builds and the count of what the watcher said.
func devWatching(t *testing.T, files map[string]string, build func(dir string, n int32) (tell func())) (string, *atomic.Int32, *atomic.Int32) {
	t.Helper()
	dir := t.TempDir()
	files["plugin.wat"] = "(module)"
	for name, contents := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(contents), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	builds, said := new(atomic.Int32), new(atomic.Int32)
	go devWatch(ctx, dir, func() (tell func()) { return build(dir, builds.Add(1)) }, func(string) { said.Add(1) })
	time.Sleep(2 * devPoll)
	if err := os.WriteFile(filepath.Join(dir, "plugin.wat"), []byte("(module) ;; edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, builds, said
}

// builtExactly waits for want builds, and fails if more follow within a
// few polls: the builds the watcher owed (why), and no more.
func builtExactly(t *testing.T, builds *atomic.Int32, want int32, why string) {
	t.Helper()
	testkit.Eventually(t, why, 10*time.Second, func() bool { return builds.Load() >= want })
	time.Sleep(4 * (devPoll + devSettle))
	if n := builds.Load(); n != want {
		t.Errorf("%d builds, want %d: %s", n, want, why)
	}
}

// An edit the author saves on seeing a build's outcome is a change that
// builds again: before, the watcher took its snapshot of the folder after
// telling the outcome, so a fix saved at once after "the build failed"
// could fall into it and never be built (TestPluginDevRebuildsAndReloads
// failed so in one CI run).
func TestDevWatchBuildsAnEditSavedOnSeeingTheOutcome(t *testing.T) {
	_, builds, _ := devWatching(t, map[string]string{}, func(dir string, n int32) func() {
		return func() {
			if n == 1 { // the author reads "the build failed" and saves the fix
				os.WriteFile(filepath.Join(dir, "plugin.wat"), []byte("(module) ;; fixed"), 0o644)
			}
		}
	})
	testkit.Eventually(t, "the fix saved on seeing the first build's outcome to be built", 5*time.Second, func() bool { return builds.Load() >= 2 })
}

// An edit saved while a build runs is built once the build is done: the
// look after a build took it for the build's own (a review: saved 200 ms
// into a 1 s build, never built). Files a build makes are its own.
func TestDevWatchBuildsAnEditSavedDuringTheBuild(t *testing.T) {
	_, builds, _ := devWatching(t, map[string]string{}, func(dir string, n int32) func() {
		if n == 1 {
			os.WriteFile(filepath.Join(dir, "generated.h"), []byte("// the build's"), 0o644)
			time.Sleep(200 * time.Millisecond)
			os.WriteFile(filepath.Join(dir, "plugin.wat"), []byte("(module) ;; saved while building"), 0o644)
			time.Sleep(800 * time.Millisecond) // the rest of a slow build
		}
		return func() {}
	})
	builtExactly(t, builds, 2, "the edit saved during the first build, and not a file the build made")
}

// A build that writes a file of the folder again as it was (bindings, a
// header it generates) does not build again: before, each such build
// counted as an edit, and one edit built for ever (a review: 8 builds in
// 5 s).
func TestDevWatchIgnoresABuildsOwnRewrite(t *testing.T) {
	_, builds, _ := devWatching(t, map[string]string{"plugin.js": "// bindings"}, func(dir string, n int32) func() {
		time.Sleep(20 * time.Millisecond) // a new time, the same contents
		os.WriteFile(filepath.Join(dir, "plugin.js"), []byte("// bindings"), 0o644)
		return func() {}
	})
	builtExactly(t, builds, 1, "the edit, and not the build's own rewrite of plugin.js")
}

// A file renamed (or deleted) while a build runs is built once the build
// is done: before, the look after a build counted only files that were
// there and read otherwise, and the module went on built from the old
// name until the next edit.
func TestDevWatchBuildsAFileRenamedDuringTheBuild(t *testing.T) {
	_, builds, _ := devWatching(t, map[string]string{"helper.wat": ";; helper"}, func(dir string, n int32) func() {
		if n == 1 {
			os.Rename(filepath.Join(dir, "helper.wat"), filepath.Join(dir, "helpers.wat"))
		}
		return func() {}
	})
	builtExactly(t, builds, 2, "the edit, and the rename during the first build")
}

// A file added while a build runs is built once the build is done (it may
// be the author's new source), and so are saves during two builds running.
// What changes during builds is built for devFollowUps times in a row: a
// build that changes the folder each time builds three times for an edit
// and says why it stops, not for ever (a review: a build that removed
// bundle-(n-1).js and wrote bundle-n.js built 10 times in 5 s).
func TestDevWatchBuildsBoundedlyForWhatChangesDuringBuilds(t *testing.T) {
	for name, c := range map[string]struct {
		build  func(dir string, n int32)
		builds int32
		says   int32
	}{
		"a file added by the first build only": {func(dir string, n int32) {
			if n == 1 {
				os.WriteFile(filepath.Join(dir, "new.wat"), []byte(";; new"), 0o644)
			}
		}, 2, 0},
		"the author's saves during the first two builds": {func(dir string, n int32) {
			if n <= 2 {
				os.WriteFile(filepath.Join(dir, "plugin.wat"), []byte(fmt.Sprintf("(module) ;; save %d", n)), 0o644)
			}
		}, 3, 0},
		"a new file each build": {func(dir string, n int32) {
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("new-%d.wat", n)), []byte(";; new"), 0o644)
		}, 1 + devFollowUps, 1},
		"an output renamed each build": {func(dir string, n int32) {
			os.Remove(filepath.Join(dir, fmt.Sprintf("bundle-%d.js", n-1)))
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("bundle-%d.js", n)), []byte("// out"), 0o644)
		}, 1 + devFollowUps, 1},
		"a file written differently each build": {func(dir string, n int32) {
			os.WriteFile(filepath.Join(dir, "stamp.h"), []byte(fmt.Sprintf("// build %d", n)), 0o644)
		}, 1 + devFollowUps, 1},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir, builds, said := devWatching(t, map[string]string{}, func(dir string, n int32) func() {
				c.build(dir, n)
				return func() {}
			})
			builtExactly(t, builds, c.builds, name)
			if s := said.Load(); s != c.says {
				t.Errorf("%d said, want %d", s, c.says)
			}
			// The author's next edit builds again.
			if err := os.WriteFile(filepath.Join(dir, "plugin.wat"), []byte("(module) ;; the next edit"), 0o644); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, "the next edit to be built", 5*time.Second, func() bool { return builds.Load() > c.builds })
		})
	}
}
