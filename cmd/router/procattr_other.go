//go:build !linux && !freebsd

package main

import "syscall"

// checkChildAttr is nil where the kernel has no parent-death signal: a
// child outlives a router killed outright.
func checkChildAttr() *syscall.SysProcAttr { return nil }
