//go:build unix && !linux

package pgbouncer

import "syscall"

// sysProcAttr runs PgBouncer as cred (nil = the current user) in its own
// process group. Without Linux's parent-death signal it outlives a Go
// program that dies without stopping it.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}
