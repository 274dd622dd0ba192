//go:build chaos

package chaos

import (
	"os"
	"syscall"
)

// Armed is true in a chaos build.
const Armed = true

var armed = os.Getenv("COUNTERSIGN_CHAOS_KILL")

// Point SIGKILLs this process when it is the armed point: no deferred
// function, no flush, no graceful anything.
func Point(name string) {
	if armed != "" && armed == name {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
