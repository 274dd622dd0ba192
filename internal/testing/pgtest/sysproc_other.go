//go:build unix && !linux

package pgtest

import "syscall"

// sysProcAttr runs a server process as cred (nil = the current user) in its own process
// group, so a Ctrl-C aimed at the Go program does not reach it. Without Linux's
// parent-death signal, a server outlives a Go program that dies without stopping it.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}
