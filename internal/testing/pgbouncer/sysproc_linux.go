package pgbouncer

import "syscall"

// sysProcAttr runs PgBouncer as cred (nil = the current user) in its own
// process group, so a Ctrl-C aimed at the Go program does not reach it, and
// has the kernel kill it if the Go program dies without stopping it.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: syscall.SIGKILL}
}
