//go:build !linux

package main

import "syscall"

// checkChildAttr is nil off Linux: no parent-death signal there, so a
// child outlives a router killed outright.
func checkChildAttr() *syscall.SysProcAttr { return nil }
