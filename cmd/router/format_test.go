package main

import (
	"bytes"
	"context"
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
