package fsperm

import (
	"fmt"
	"io"
	"os"
)

// Limits on the files the router reads whole: a path to something endless
// (/dev/zero, a growing log) was read until memory ran out.
const (
	MaxConfigFile = 8 << 20   // a configuration file
	MaxSecretFile = 1 << 20   // a password, token, tokens or CA file
	MaxPluginFile = 128 << 20 // a plugin's WebAssembly module
)

// ReadFile reads the file at path whole, or says it holds more than limit
// bytes (what, such as "a configuration file", names it then).
func ReadFile(path string, limit int64, what string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s holds more than the %d MiB %s may: is it the right file?", path, limit>>20, what)
	}
	return b, nil
}
