package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/credential"
)

// TestOwnerCLI drives the owner commands against a running server: an
// owner is bootstrapped in the ledger, then creates an agent, issues it a
// credential, lists and revokes through the owner API.
func TestOwnerCLI(t *testing.T) {
	e := newRailEnv(t, envOptions{})
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(bin, "countersign"), args...).CombinedOutput()
		if err != nil {
			t.Fatalf("countersign %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	boot := strings.Split(strings.TrimSpace(run("owner", "bootstrap", "--name", "ops", "--database-url", e.dbURL)), "\n")
	token := boot[len(boot)-1]
	if !strings.HasPrefix(token, "cso_") {
		t.Fatalf("bootstrap printed %q", boot)
	}
	owner := []string{"--server", e.grpcAddr, "--owner-token", token}
	agentID := strings.TrimSpace(run(append([]string{"agent", "create", "cli-bot"}, owner...)...))
	issued := strings.Split(strings.TrimSpace(run(append([]string{"credential", "issue", agentID, "--scope", "propose"}, owner...)...)), "\n")
	if _, err := credential.Hash(issued[len(issued)-1]); err != nil {
		t.Fatalf("issued secret: %q (%v)", issued, err)
	}
	if list := run(append([]string{"agent", "list"}, owner...)...); !strings.Contains(list, agentID) || !strings.Contains(list, "ACTIVE") {
		t.Fatalf("agent list:\n%s", list)
	}
	if out := run(append([]string{"approvals", "list"}, owner...)...); !strings.HasPrefix(out, "APPROVAL") {
		t.Fatalf("approvals list:\n%s", out)
	}
	run(append([]string{"agent", "revoke", agentID}, owner...)...)
	if list := run(append([]string{"agent", "list"}, owner...)...); !strings.Contains(list, "REVOKED") {
		t.Fatalf("after revoke:\n%s", list)
	}
	// The agent's credential is not an owner token.
	out, err := exec.Command(filepath.Join(bin, "countersign"), "agent", "list", "--server", e.grpcAddr, "--owner-token", e.secret).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Unauthenticated") {
		t.Fatalf("agent credential as owner token: %v\n%s", err, out)
	}
}
