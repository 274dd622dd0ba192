package inject

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json from the current output")

// testConfig is the injector's configuration in every test: two rail
// accounts with the names envoy/egress.yaml routes to.
func testConfig() Config {
	return Config{
		Namespace:        "countersign-system",
		Version:          "test",
		CountersignImage: "registry.example/countersign:v0.1.0",
		EnvoyImage:       "envoyproxy/envoy:distroless-v1.40.2",
		PullPolicy:       "IfNotPresent",
		EnvoyConfigMap:   "countersign-envoy-sidecar", EnvoyConfigKey: "envoy.yaml",
		RailsConfigMap: "countersign-rails", RailsConfigKey: "rails.yaml",
		DatabaseSecret: "countersign-database", DatabaseKey: "url",
		RailKeys: []RailKey{
			{Account: "stripe_main", Secret: "countersign-stripe-main", Key: "key"},
			{Account: "razorpay_main", Secret: "countersign-razorpay-main", Key: "key"},
		},
		BaseURLs: []EnvVar{
			{Name: "STRIPE_API_BASE", Value: "http://stripe.egress.local:15001"},
			{Name: "RAZORPAY_API_BASE", Value: "http://razorpay.egress.local:15001"},
		},
		HTTPPort:       15080,
		DBPooler:       "pgbouncer",
		AuditKeySecret: "countersign-audit-key", AuditKeyKey: "key",
	}
}

// egressTestConfig is testConfig with the agent's direct egress closed:
// the agent runs as UID 1000; two rail hosts by name, an IPv4 and an IPv6
// range by CIDR.
func egressTestConfig() Config {
	cfg := testConfig()
	cfg.Egress = EgressConfig{
		Enabled: true, Image: "registry.example/iptables:1.8.11", AgentUID: 1000,
		Hosts: []string{"api.stripe.com", "api.razorpay.com"},
		CIDRs: []string{"203.0.113.0/24", "2001:db8:5::/48"},
	}
	return cfg
}

// configOf reads a case's injector configuration from its name: egress-*
// run with egress closed, every other case with testConfig.
func configOf(name string) Config {
	if strings.HasPrefix(name, "egress-") {
		return egressTestConfig()
	}
	return testConfig()
}

func TestTestConfigIsValid(t *testing.T) {
	for _, cfg := range []Config{testConfig(), egressTestConfig()} {
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
	}
}

// golden is what a case's .golden.json holds: the decoder's error, or the
// response with its patch spelled out and the pod the patch makes.
type golden struct {
	Error    string                         `json:"error,omitempty"`
	Response *admissionv1.AdmissionResponse `json:"response,omitempty"`
	Patch    json.RawMessage                `json:"patch,omitempty"`
	Pod      json.RawMessage                `json:"pod,omitempty"`
}

// scopeOf reads a case's scope from its name: ns-* (and egress-*) arrive
// through the namespace entry, pod-* through the pod entry; bad-* fail to
// decode.
func scopeOf(name string) Scope {
	if strings.HasPrefix(name, "pod-") {
		return ScopePod
	}
	return ScopeNamespace
}

func run(t *testing.T, body []byte, cfg Config, scope Scope) golden {
	t.Helper()
	req, pod, err := Decode(body)
	if err != nil {
		return golden{Error: err.Error()}
	}
	resp := Mutate(req, pod, cfg, scope)
	g := golden{Response: resp}
	if len(resp.Patch) > 0 {
		g.Patch = resp.Patch
		g.Pod = applyRaw(t, req.Object.Raw, resp.Patch)
		shown := *resp
		shown.Patch = nil // shown as "patch" above, not as base64
		g.Response = &shown
	}
	return g
}

func TestGolden(t *testing.T) {
	ins, err := filepath.Glob("testdata/*.in.json")
	if err != nil || len(ins) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".in.json")
		t.Run(name, func(t *testing.T) {
			body, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			g := run(t, body, configOf(name), scopeOf(name))
			got, err := json.MarshalIndent(g, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := strings.TrimSuffix(in, ".in.json") + ".golden.json"
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/inject -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the output (run go test ./internal/inject -update and review the diff):\n%s", path, got)
			}
			checkExpectation(t, name, g)
		})
	}
}

// checkExpectation holds each case to what its name promises, so that a
// refreshed golden file cannot quietly turn a refusal into an admission.
func checkExpectation(t *testing.T, name string, g golden) {
	t.Helper()
	switch {
	case strings.HasPrefix(name, "bad-"):
		if g.Error == "" {
			t.Errorf("a malformed review decoded")
		}
	case strings.Contains(name, "-refuse-"):
		if g.Response == nil || g.Response.Allowed || g.Response.Result == nil || g.Response.Result.Code != 403 {
			t.Errorf("not refused with 403: %+v", g.Response)
		}
	case strings.HasSuffix(name, "-basic") || strings.HasSuffix(name, "-merge-existing") || strings.HasSuffix(name, "-opt-in"):
		if g.Response == nil || !g.Response.Allowed || len(g.Patch) == 0 {
			t.Errorf("not injected: %+v", g.Response)
		}
	default: // skipped
		if g.Response == nil || !g.Response.Allowed || len(g.Patch) != 0 {
			t.Errorf("not left alone: %+v", g.Response)
		}
	}
}
