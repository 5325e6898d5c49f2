package main

import "syscall"

// checkChildAttr makes the kernel kill a child process when the router
// dies (PR_SET_PDEATHSIG).
func checkChildAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
