package main

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// `router plugin dev` is the plugin author's loop: it runs the router on
// the folder's policies.hcl and, whenever a file there changes (but what
// devSkip names), runs the build script and reloads the router with the
// new module (as SIGHUP does). A build that fails is shown and changes
// nothing.

// devPoll is how often the folder is scanned for changes; devSettle how
// long it must stay unchanged before a build (editors write in steps).
const (
	devPoll   = 300 * time.Millisecond
	devSettle = 300 * time.Millisecond
	// devFollowUps bounds the builds in a row for what changed during a
	// build (devWatch): an author who saves during two builds running is
	// still built for; a build that changes the folder each time costs
	// that many builds more per edit.
	devFollowUps = 2
)

// devSkip are folders and files whose changes are the build's, the
// router's or a command's output, not the author's sources: a tail
// redirected into the folder (tail.out) rebuilt the plugin at each event
// (a plugin author's trial).
func devSkip(rel string, dir bool) bool {
	base := filepath.Base(rel)
	if dir {
		return slices.Contains(devSkipFolders, base)
	}
	for _, output := range devSkipSuffixes {
		if strings.HasSuffix(base, output) {
			return true
		}
	}
	return strings.HasPrefix(base, ".")
}

// The folders and the ends of names devSkip skips (and hidden files).
var (
	devSkipFolders  = []string{"data", "node_modules", ".git", "target"}
	devSkipSuffixes = []string{".wasm", ".log", ".out", ".tmp", "~"}
	devSkipped      = "the folders " + strings.Join(devSkipFolders, ", ") + "; names ending " + strings.Join(devSkipSuffixes, ", ") + "; hidden files"
)

func (c *PluginCommand) dev(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("router plugin dev", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	configPath := fs.String("config", "policies.hcl", "the router's configuration (the one router plugin init wrote)")
	build := fs.String("build", "./build.sh", "the command that builds the module")
	watch := fs.String("watch", ".", "the folder whose changes trigger a build")
	logLevel := fs.String("log-level", "info", "the router's log level")
	if err := parseFlags(fs, args); err != nil {
		return flagError(err)
	}
	if err := devBuild(ctx, *build, c.Stderr); err != nil {
		return &exitError{code: pluginExitError, err: fmt.Errorf("the first build failed: %w", err)}
	}
	reloads := make(chan struct{}, 1)
	go devWatch(ctx, *watch, func() (tell func()) {
		fmt.Fprintf(c.Stderr, "router plugin dev: a change: building with %s\n", *build)
		if err := devBuild(ctx, *build, c.Stderr); err != nil {
			return func() {
				fmt.Fprintf(c.Stderr, "router plugin dev: the build failed, the running module stays: %v\n", err)
			}
		}
		return func() {
			select {
			case reloads <- struct{}{}:
			default: // one is pending already
			}
		}
	}, func(msg string) { fmt.Fprintf(c.Stderr, "router plugin dev: %s\n", msg) })
	run := &RunCommand{Main: c.Main, ConfigPath: *configPath, LogLevel: *logLevel, LogFormat: formatText,
		ShutdownTimeout: 10 * time.Second, Reloads: reloads}
	return run.Run(ctx)
}

// devBuild runs the build command (through sh, from the working directory).
func devBuild(ctx context.Context, build string, out io.Writer) error {
	cmd := exec.CommandContext(ctx, "sh", "-c", build)
	cmd.Stdout, cmd.Stderr = out, out
	return cmd.Run()
}

// devWatch calls build once the files under dir have changed and then
// stayed still for devSettle, and then the tell it returns (the build's
// outcome: a failure said, a reload asked for); it scans until ctx ends.
// say tells the author what the watcher decided on its own.
func devWatch(ctx context.Context, dir string, build func() (tell func()), say func(string)) {
	last := devSnapshot(dir)
	var pendingSince time.Time
	followUps := 0 // builds in a row for what changed during the one before
	t := time.NewTicker(devPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := devSnapshot(dir)
		if !maps.Equal(now, last) {
			last, pendingSince, followUps = now, time.Now(), 0
			continue
		}
		if !pendingSince.IsZero() && time.Since(pendingSince) >= devSettle {
			pendingSince = time.Time{}
			sums := last.sums(dir)
			tell := build()
			// What changed while the build ran (a file edited, added,
			// renamed or removed) is built once it settles: the author's
			// edit or the build's own change, which no look can tell
			// apart (a file it wrote again as it was, bindings or a
			// header, is no change). At most devFollowUps such builds in
			// a row: a build that changes the folder each time (an output
			// under a new name, a timestamp inside) would build for ever;
			// then the author is told, and the next change builds. The
			// outcome is told after this look, so that a fix saved on
			// reading it is a change.
			after := devSnapshot(dir)
			switch changed, how := last.changeIn(after, dir, sums); {
			case how == devUnchanged:
			case followUps == devFollowUps:
				say(fmt.Sprintf("the folder changed during each of the last %d builds (the last time: %s %s): not building again until the next change (saved it yourself? save again; a build's own output belongs in what is not watched: %s)", devFollowUps+1, changed, how, devSkipped))
				followUps = 0
			default:
				pendingSince = time.Now()
				followUps++
			}
			last = after
			tell()
		}
	}
}

// devFiles is a look at the author's files: each one's size and time, by
// its path under the folder.
type devFiles map[string]string

// sums is a digest of each file of f's contents, read from dir.
func (f devFiles) sums(dir string) map[string][sha256.Size]byte {
	sums := make(map[string][sha256.Size]byte, len(f))
	for rel := range f {
		if b, err := os.ReadFile(filepath.Join(dir, rel)); err == nil {
			sums[rel] = sha256.Sum256(b)
		}
	}
	return sums
}

// devChange is how a file of the folder changed between two looks.
type devChange int

const (
	devUnchanged devChange = iota
	devEdited              // its size or time changed, and its contents
	devAdded
	devRemoved // or renamed: its new name is added
)

func (c devChange) String() string {
	return [...]string{"unchanged", "edited", "added", "removed"}[c]
}

// changeIn names the first file, in path order, that changed from f to
// later, and how (devUnchanged when none did): a file whose size or time
// changed is edited only if its contents differ from what sums, f's, says.
func (f devFiles) changeIn(later devFiles, dir string, sums map[string][sha256.Size]byte) (string, devChange) {
	for _, rel := range slices.Sorted(maps.Keys(mergedFiles(f, later))) {
		v, was := f[rel]
		w, is := later[rel]
		switch {
		case !is:
			return rel, devRemoved
		case !was:
			return rel, devAdded
		case w == v:
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, rel))
		if sum, ok := sums[rel]; err != nil || !ok || sha256.Sum256(b) != sum {
			return rel, devEdited
		}
	}
	return "", devUnchanged
}

// mergedFiles is the paths of a and b.
func mergedFiles(a, b devFiles) map[string]bool {
	paths := make(map[string]bool, len(a)+len(b))
	for rel := range a {
		paths[rel] = true
	}
	for rel := range b {
		paths[rel] = true
	}
	return paths
}

// devSnapshot looks at the author's files under dir (devSkip).
func devSnapshot(dir string) devFiles {
	files := devFiles{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if rel != "." && devSkip(rel, d.IsDir()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if info, err := d.Info(); err == nil && !d.IsDir() {
			files[rel] = fmt.Sprintf("%d %d", info.Size(), info.ModTime().UnixNano())
		}
		return nil
	})
	return files
}
