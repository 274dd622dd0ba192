package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/inject"
)

// TestServeInAgentPodRefusesAtStart: `countersign serve` in the agent's
// pod (COUNTERSIGN_IN_AGENT_POD, as the injector sets it) refuses, before
// it opens the ledger or a listener, a ledger URL without
// sslmode=verify-full and an http rail URL on loopback, which the agent
// shares (found by a review).
func TestServeInAgentPodRefusesAtStart(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte("sk_test_x"), 0o600); err != nil {
		t.Fatal(err)
	}
	railsFile := func(baseURL string) string {
		p := filepath.Join(t.TempDir(), "rails.yaml")
		body := "rails:\n- account: stripe_main\n  rail: stripe\n  hosts: [api.stripe.com]\n  base_url: " + baseURL + "\n  key_file: " + key + "\n"
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const verifyFull = "postgres://cs@db.example:5432/cs?sslmode=verify-full"
	cases := []struct {
		name, db, rails, want string
	}{
		{"ledger without verify-full", "postgres://cs@db.example:5432/cs?sslmode=require", railsFile("https://api.stripe.com"),
			"database-url (COUNTERSIGN_DATABASE_URL) with in-agent-pod (COUNTERSIGN_IN_AGENT_POD): host db.example:5432 is reached with sslmode=require"},
		{"ledger on loopback", "postgres://cs@127.0.0.1:5432/cs?sslmode=verify-full", railsFile("https://api.stripe.com"), "host 127.0.0.1:5432 is a loopback address"},
		{"rail over http on loopback", verifyFull, railsFile("http://127.0.0.1:12111"),
			`rails-file (COUNTERSIGN_RAILS_FILE): rails[0] (stripe_main): base_url "http://127.0.0.1:12111" is http: this process runs in the agent's pod`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, v := range []string{"PGSSLMODE", "PGSSLROOTCERT", "PGHOST", "PGSERVICE", "PGSSLCERTMODE"} {
				t.Setenv(v, "")
				_ = os.Unsetenv(v)
			}
			t.Setenv(config.EnvName(config.InAgentPodFlag), "true")
			var out, errOut strings.Builder
			root := NewRoot(&out, &errOut)
			root.SetArgs([]string{"serve", "--database-url", tc.db, "--rails-file", tc.rails})
			// Were it to start, it ends with the context.
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			err := root.ExecuteContext(ctx)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("serve = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	// Without the setting the mock rail on loopback is loaded as before.
	cfg := config.Defaults()
	cfg.RailsFile = railsFile("http://127.0.0.1:12111")
	if _, err := loadRails(cfg); err != nil {
		t.Fatalf("without in-agent-pod: %v", err)
	}
}

// TestInjectorSetsServesInAgentPodSetting: the variable the injector sets
// on its countersign container is the one serve reads.
func TestInjectorSetsServesInAgentPodSetting(t *testing.T) {
	if inject.InAgentPodEnv != config.EnvName(config.InAgentPodFlag) {
		t.Fatalf("the injector sets %s, serve reads %s", inject.InAgentPodEnv, config.EnvName(config.InAgentPodFlag))
	}
}
