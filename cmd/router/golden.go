package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	switchyard "github.com/switchyard-router/switchyard"
	"github.com/switchyard-router/switchyard/api"
	"github.com/switchyard-router/switchyard/plugins/wasm"
)

// Golden tests of `router plugin test`: -expect FILE compares one result
// with FILE; -dir DIR runs every NAME.event.json there against
// NAME.expected.json. -update writes the files instead. The comparison is
// of the JSON values, without what changes from run to run (took, and a
// trap's wasm stack detail).

// goldenExitDiffer is the exit code when a result differs from its file.
const goldenExitDiffer = 1

// volatileFields are left out of a golden comparison, and of what -update
// writes: the time a call took, a trap's stack, and the plugin's name (how
// it was invoked — its file's name, -name, a policies block — is not what
// it does).
var volatileFields = []string{"took", "detail", "plugin"}

// golden compares got (a result's JSON) with the file, or writes it.
func (c *PluginCommand) golden(file string, got []byte, update bool) error {
	if update {
		if err := os.WriteFile(file, stripVolatile(got), 0o644); err != nil {
			return &exitError{code: pluginExitError, err: err}
		}
		fmt.Fprintf(c.Stdout, "wrote %s\n", file)
		return nil
	}
	diff, err := goldenDiff(file, got)
	if err != nil {
		return &exitError{code: pluginExitError, err: err}
	}
	if diff != "" {
		fmt.Fprintf(c.Stdout, "FAIL %s\n%s", file, diff)
		return &exitError{code: goldenExitDiffer, err: fmt.Errorf("%s: the result differs (run with -update to accept it)", file)}
	}
	fmt.Fprintf(c.Stdout, "ok   %s\n", file)
	return nil
}

// testDir runs every NAME.event.json of dir through one loaded plugin.
func (c *PluginCommand) testDir(ctx context.Context, f *pluginFlags, dir string, update bool) error {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		if err == nil {
			err = fmt.Errorf("%s is not a folder", dir)
		}
		return &exitError{code: pluginExitError, err: fmt.Errorf("-dir: %w", err)}
	}
	events, err := filepath.Glob(filepath.Join(dir, "*.event.json"))
	if err != nil || len(events) == 0 {
		return &exitError{code: pluginExitError, err: fmt.Errorf("%s: no NAME.event.json files (each with its NAME.expected.json)", dir)}
	}
	sort.Strings(events)
	p, closeRT, err := c.load(ctx, f)
	if err != nil {
		return err
	}
	defer closeRT()
	state := wasm.MemoryState{}
	ctx = switchyard.WithState(ctx, state)
	failed := 0
	for _, evFile := range events {
		src, err := os.ReadFile(evFile)
		if err != nil {
			return &exitError{code: pluginExitError, err: err}
		}
		res, _, _ := runPluginOnce(ctx, p, src, f.known)
		res.State = stateSnapshot(state)
		want := strings.TrimSuffix(evFile, ".event.json") + ".expected.json"
		if update && res.Verdict != "ok" {
			// A trap written as the expected result passes from then on
			// while the plugin keeps failing (a plugin trial: "ok: 3
			// cases", nothing else said).
			fmt.Fprintf(c.Stdout, "note %s: the plugin's verdict is %s (%s): written as expected; check that it is meant to fail on this event\n", want, res.Verdict, switchyard.Truncate(res.Reason, 200))
		}
		if err := c.golden(want, res.json(), update); err != nil {
			var ee *exitError
			if errors.As(err, &ee) && ee.code != goldenExitDiffer {
				return err
			}
			failed++
		}
	}
	if failed > 0 {
		return &exitError{code: goldenExitDiffer, err: fmt.Errorf("%d of %d cases differ (run with -update to accept them)", failed, len(events))}
	}
	fmt.Fprintf(c.Stdout, "ok: %d cases\n", len(events))
	return nil
}

// goldenDiff says how got differs from the file's JSON, "" when it does
// not, as the lines that differ.
func goldenDiff(file string, got []byte) (string, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%s does not exist: run with -update to write it from this result", file)
	}
	if err != nil {
		return "", err
	}
	var want, have any
	if err := json.Unmarshal(b, &want); err != nil {
		return "", fmt.Errorf("%s: not JSON: %w", file, err)
	}
	if err := json.Unmarshal(got, &have); err != nil {
		return "", err
	}
	dropVolatile(want)
	dropVolatile(have)
	if reflect.DeepEqual(want, have) {
		return "", nil
	}
	return lineDiff(indent(want), indent(have)), nil
}

func stripVolatile(b []byte) []byte {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return b
	}
	dropVolatile(v)
	return []byte(indent(v))
}

func dropVolatile(v any) {
	if m, ok := v.(map[string]any); ok {
		for _, k := range volatileFields {
			delete(m, k)
		}
	}
}

func indent(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	enc.Encode(v)
	return buf.String()
}

// lineDiff lists the lines of want missing from got ("-") and of got
// missing from want ("+"), in order: enough to see what changed in a small
// JSON document.
func lineDiff(want, got string) string {
	w, g := strings.Split(strings.TrimRight(want, "\n"), "\n"), strings.Split(strings.TrimRight(got, "\n"), "\n")
	// The longest common subsequence, by dynamic programming: the files
	// are a few dozen lines.
	lcs := make([][]int, len(w)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(g)+1)
	}
	for i := len(w) - 1; i >= 0; i-- {
		for j := len(g) - 1; j >= 0; j-- {
			if w[i] == g[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var b strings.Builder
	i, j := 0, 0
	for i < len(w) || j < len(g) {
		switch {
		case i < len(w) && j < len(g) && w[i] == g[j]:
			i, j = i+1, j+1
		case j < len(g) && (i == len(w) || lcs[i][j+1] >= lcs[i+1][j]):
			fmt.Fprintf(&b, "  + %s\n", g[j])
			j++
		default:
			fmt.Fprintf(&b, "  - %s\n", w[i])
			i++
		}
	}
	return b.String()
}

// stateSnapshot is the state router plugin test keeps (in memory: empty
// at the start of the command, kept from event to event of a -dir run, in
// name order) as a result shows it: text values as they are, others as
// "base64:...".
func stateSnapshot(s wasm.MemoryState) map[string]string {
	if len(s) == 0 {
		return nil
	}
	out := make(map[string]string, len(s))
	for k, v := range s {
		if api.IsText(v) {
			out[k] = string(v)
		} else {
			out[k] = "base64:" + base64.StdEncoding.EncodeToString(v)
		}
	}
	return out
}
