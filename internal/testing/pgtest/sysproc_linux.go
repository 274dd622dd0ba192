package pgtest

import "syscall"

// sysProcAttr runs a server process as cred (nil = the current user) in its own process
// group, so a Ctrl-C aimed at the Go program does not reach it: the program decides when
// the server stops. If the Go program dies without stopping it, the kernel sends the
// server SIGQUIT (immediate shutdown, which also ends its backends).
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: syscall.SIGQUIT}
}
