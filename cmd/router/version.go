package main

import (
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func versionString() string {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v = "dev-" + s.Value[:12]
			}
		}
	}
	return fmt.Sprintf("switchyard %s %s %s/%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// version prints versionString. It takes no flags and no arguments:
// `router version -json` printed the version and exited 0.
func (m *Main) version(args []string) error {
	fs := flag.NewFlagSet("router version", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	if err := parseFlagsOnly(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(m.Stdout, versionString())
	return nil
}
