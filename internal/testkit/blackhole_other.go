//go:build !linux

package testkit

import "testing"

// Blackhole needs Linux's accept queue (blackhole_linux.go): elsewhere the
// test is skipped.
func Blackhole(t testing.TB, port int) (addr string, stop func()) {
	t.Skip("testkit.Blackhole needs Linux (a full accept queue drops SYNs)")
	return "", nil
}
