// Package chaos holds the kill points of the crash tests: places on the
// money path where a build with the `chaos` tag SIGKILLs its own process
// when COUNTERSIGN_CHAOS_KILL names the point. In a normal build Point is
// an empty function: nothing can arm it.
package chaos

// The kill points, in the order a request meets them.
const (
	BeforeWAL             = "before_wal"               // decided, nothing written
	AfterWALBeforeCall    = "after_wal_before_call"    // attempt durable, ALLOW not yet answered
	DuringCall            = "during_call"              // the rail answered; its body not yet read
	AfterCallBeforeCommit = "after_call_before_commit" // the rail's answer read, not committed
	AfterCommitBeforeAck  = "after_commit_before_ack"  // committed, Envoy not yet told
)

// Points lists every kill point.
func Points() []string {
	return []string{BeforeWAL, AfterWALBeforeCall, DuringCall, AfterCallBeforeCommit, AfterCommitBeforeAck}
}
