package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// Every command's -o takes only the formats it writes, and refuses any
// other before doing anything: router db took `-o yaml` for a table.
func TestOutputFlagsRefuseAFormatTheyDoNotWrite(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "router.db") // never opened: the flag is refused first
	for args, want := range map[string]string{
		"db check -o yaml " + missing:   `invalid value "yaml" for flag -o: use table or json`,
		"db compact -o yaml " + missing: `invalid value "yaml" for flag -o: use table or json`,
		"db clock -o yaml " + missing:   `invalid value "yaml" for flag -o: use table or json`,
		"stats -o yaml":                 `invalid value "yaml" for flag -o: use table or json`,
		"dlq list -o text":              `invalid value "text" for flag -o: use table or json`,
		"bench -o table":                `invalid value "table" for flag -o: use text or json`,
		"run -log-format table":         `invalid value "table" for flag -log-format: use text or json`,
	} {
		var stderr bytes.Buffer
		err := NewMain(nil, &bytes.Buffer{}, &stderr).Run(context.Background(), strings.Fields(args))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("router %s: %v, want %q", args, err, want)
		}
		if name := want[strings.Index(want, "flag -")+5 : strings.LastIndex(want, ":")]; !strings.Contains(stderr.String(), name+" format") || exitCode(err) != 2 {
			t.Errorf("router %s: exit %d, no usage naming %s's formats:\n%s", args, exitCode(err), name, stderr.String())
		}
	}
}

// A command's flags say what it does with them: router backup offers no
// -timeout (it ignored the one its -h gave a 30s default), and a token
// given without -addr is refused (it was dropped without a word: the
// socket knows its caller by the file's permissions).
func TestFlagsThatDidNothingAreGoneOrRefused(t *testing.T) {
	var stderr bytes.Buffer
	NewMain(nil, &bytes.Buffer{}, &stderr).Run(context.Background(), []string{"backup", "-h"})
	if strings.Contains(stderr.String(), "-timeout") || !strings.Contains(stderr.String(), "-socket") {
		t.Errorf("router backup -h:\n%s", stderr.String())
	}
	// A one-time link no one can use is refused.
	if err := NewMain(nil, &bytes.Buffer{}, &bytes.Buffer{}).Run(context.Background(), []string{"ui", "-link-ttl", "0s"}); exitCode(err) != 2 || !strings.Contains(fmt.Sprint(err), "more than 0") {
		t.Errorf("router ui -link-ttl 0s: exit %d, %v", exitCode(err), err)
	}
	// Bad values of bench's flags are usage errors, exit 2 as elsewhere
	// (they exited 1, as a failed run does).
	if err := NewMain(nil, &bytes.Buffer{}, &bytes.Buffer{}).Run(context.Background(), []string{"bench", "-c", "0"}); exitCode(err) != 2 {
		t.Errorf("router bench -c 0: exit %d, %v", exitCode(err), err)
	}
	for _, args := range [][]string{{"dlq", "list", "-token", "t"}, {"stats", "-token-file", "/nonexistent"}} {
		err := NewMain(nil, &bytes.Buffer{}, &bytes.Buffer{}).Run(context.Background(), append(args, "-socket", filepath.Join(t.TempDir(), "none.sock")))
		if exitCode(err) != 2 || !strings.Contains(fmt.Sprint(err), "-token and -token-file are for -addr") {
			t.Errorf("router %q without -addr: exit %d, %v", args, exitCode(err), err)
		}
	}
}

// Each router db tool's -h shows its line of router db's usage, FILE
// and all, with what it does (it showed only its flags: a new user's
// trial), and no other tool's.
func TestDBToolHelpNamesTheFile(t *testing.T) {
	for _, tool := range dbTools {
		var stderr bytes.Buffer
		NewMain(nil, &bytes.Buffer{}, &stderr).Run(context.Background(), []string{"db", tool, "-h"})
		out := stderr.String()
		if !strings.Contains(out, "router db "+tool+" FILE") || strings.Count(out, "  router db ") != 1 || !strings.Contains(out, "-o format") {
			t.Errorf("router db %s -h:\n%s", tool, out)
		}
	}
}
