//go:build linux || freebsd

package main

import "syscall"

// checkChildAttr makes the kernel kill a child process when the router
// dies (Linux PR_SET_PDEATHSIG, FreeBSD PROC_PDEATHSIG_CTL).
func checkChildAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
