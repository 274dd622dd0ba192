package e2e

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestProductionBinaryLinksNoTestSupport: the countersign binary that ships
// links none of the test rig — the mock rail, the Envoy stand-in, the
// PostgreSQL launcher, the demo — nor anything else under internal/testing.
// Those are for tests and `countersign-dev` only.
func TestProductionBinaryLinksNoTestSupport(t *testing.T) {
	for _, tags := range []string{"", "chaos"} {
		args := []string{"list", "-deps"}
		if tags != "" {
			args = append(args, "-tags", tags)
		}
		out, err := exec.Command("go", append(args, "../cmd/countersign")...).Output()
		if err != nil {
			t.Fatalf("go list -deps: %v", err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 50 || !slices.Contains(deps, "github.com/countersign/countersign/internal/server") {
			t.Fatalf("go list -deps listed %d packages without the server: %v", len(deps), deps)
		}
		for _, d := range deps {
			if strings.HasPrefix(d, "github.com/countersign/countersign/internal/testing/") ||
				d == "github.com/countersign/countersign/internal/demo" ||
				d == "github.com/countersign/countersign/internal/sim" ||
				strings.Contains(d, "mockrail") || strings.Contains(d, "pgtest") || strings.Contains(d, "standin") ||
				// client-go is in go.mod for the k8s-tagged e2e test only.
				strings.HasPrefix(d, "k8s.io/client-go/") {
				t.Errorf("the production binary (tags %q) links test support: %s", tags, d)
			}
		}
	}
	// The demo binary is where they belong: it must still have them.
	out, err := exec.Command("go", "list", "-deps", "../cmd/countersign-dev").Output()
	if err != nil {
		t.Fatalf("go list -deps countersign-dev: %v", err)
	}
	for _, want := range []string{"internal/testing/mockrail", "internal/testing/pgtest", "internal/testing/envoystandin"} {
		if !strings.Contains(string(out), "github.com/countersign/countersign/"+want+"\n") {
			t.Errorf("countersign-dev does not link %s: the check above would pass vacuously", want)
		}
	}
}
