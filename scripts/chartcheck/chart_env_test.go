package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/envoyconfig"
)

// helmTemplate renders charts/countersign with args, with helm at the
// version scripts/tool.sh pins (built once into the tool cache, as
// `make chart-test` does).
func helmTemplate(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("bash", "../tool.sh", "helm").Output()
	if err != nil {
		t.Fatalf("no helm from scripts/tool.sh, which builds the pinned version into the tool cache: %v", err)
	}
	home := t.TempDir()
	cmd := exec.Command(strings.TrimSpace(string(out)), append([]string{"template", "countersign", "../../charts/countersign",
		"--namespace", "agents", "--kube-version", "1.34.0"}, args...)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stderr.String(), err
	}
	return stdout.String(), nil
}

// TestChartSetsEachVariableOnce: the kubelet keeps the last definition of
// an environment variable and chartcheck read the first, so values that
// set one of the chart's variables again (the Envoy listener on TCP with
// the unsafe flag, a settle time shorter than the route timeout) ran
// unchecked. The chart refuses them, and chartcheck refuses a container
// that defines a name twice.
func TestChartSetsEachVariableOnce(t *testing.T) {
	refused := []struct {
		name string
		args []string
		want string
	}{
		{"settings moves the Envoy listener", []string{"--set-string", "countersign.settings.envoy-addr=0.0.0.0:9192"},
			"countersign.settings may not set envoy-addr (COUNTERSIGN_ENVOY_ADDR): the chart sets it"},
		{"settings sets the unsafe TCP flag", []string{"--set-string", "countersign.settings.unsafe-envoy-tcp-exposes-rail-keys=true"},
			"may not set unsafe-envoy-tcp-exposes-rail-keys"},
		{"settings sets an Envoy TLS certificate", []string{"--set-string", "countersign.settings.envoy-tls-cert=/c"}, "may not set envoy-tls-cert"},
		{"settings sets an Envoy TLS key", []string{"--set-string", "countersign.settings.envoy-tls-key=/k"}, "may not set envoy-tls-key"},
		{"settings sets Envoy's client CA", []string{"--set-string", "countersign.settings.envoy-client-ca=/ca"}, "may not set envoy-client-ca"},
		{"extraEnv moves the Envoy listener", []string{"--set", "countersign.extraEnv[0].name=COUNTERSIGN_ENVOY_ADDR", "--set-string", "countersign.extraEnv[0].value=0.0.0.0:9192"},
			"countersign.extraEnv may not set COUNTERSIGN_ENVOY_ADDR: the chart sets it"},
		{"extraEnv sets the settle time settings sets", []string{"--set", "countersign.extraEnv[0].name=COUNTERSIGN_RAIL_SETTLE_TIME", "--set-string", "countersign.extraEnv[0].value=1s"},
			"countersign.extraEnv may not set COUNTERSIGN_RAIL_SETTLE_TIME: countersign.settings.rail-settle-time sets it"},
		{"extraEnv sets a name twice", []string{"--set", "countersign.extraEnv[0].name=TZ", "--set", "countersign.extraEnv[1].name=TZ"},
			"countersign.extraEnv sets TZ twice"},
		{"two settings spell one variable", []string{"--set-string", "countersign.settings.lease_ttl=5s"},
			"countersign.settings lease-ttl and lease_ttl both set COUNTERSIGN_LEASE_TTL"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			msg, err := helmTemplate(t, tc.args...)
			if err == nil {
				t.Fatalf("rendered; want it refused with %q", tc.want)
			}
			if !strings.Contains(msg, tc.want) {
				t.Errorf("refused without saying %q:\n%s", tc.want, msg)
			}
		})
	}

	t.Run("a variable of its own in extraEnv renders and passes", func(t *testing.T) {
		out, err := helmTemplate(t, "--set", "countersign.extraEnv[0].name=COUNTERSIGN_AUDIT_SEAL_INTERVAL", "--set-string", "countersign.extraEnv[0].value=2s")
		if err != nil {
			t.Fatalf("refused: %s", out)
		}
		docs, err := splitDocs([]byte(out))
		if err != nil {
			t.Fatal(err)
		}
		if res, _ := check(docs); res.err() != nil {
			t.Fatal(res.err())
		}
	})

	t.Run("chartcheck refuses a name defined twice, as the kubelet would read it", func(t *testing.T) {
		out, err := helmTemplate(t)
		if err != nil {
			t.Fatalf("refused: %s", out)
		}
		docs, err := splitDocs([]byte(out))
		if err != nil {
			t.Fatal(err)
		}
		if err := appendEnv(docs, "countersign", "COUNTERSIGN_RAIL_SETTLE_TIME", "1s"); err != nil {
			t.Fatal(err)
		}
		res, _ := check(docs)
		if !res.has(invEnvOnce) {
			t.Fatalf("not caught by [%s]: %v", invEnvOnce, res.failures)
		}
		// And the settle time read is the kubelet's: the last.
		if !res.has(invEnvoy) {
			t.Errorf("the last COUNTERSIGN_RAIL_SETTLE_TIME (1s, under the 60s route timeout) was not the one checked: %v", res.failures)
		}
	})
}

// TestSelfTestCatchesEveryBrokenCopy runs chartcheck's self-test (what
// `make chart-test` runs on every rendering) on the default rendering and
// on mode injector's: each broken copy, a rail route that retries, hedges,
// mirrors or rewrites its request headers among them, is caught by the
// invariant meant to catch it.
func TestSelfTestCatchesEveryBrokenCopy(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"default", nil},
		{"injector", []string{"--values", "../../charts/countersign/ci/injector-values.yaml", "--namespace", "countersign-system"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := helmTemplate(t, tc.args...)
			if err != nil {
				t.Fatalf("refused: %s", out)
			}
			docs, err := splitDocs([]byte(out))
			if err != nil {
				t.Fatal(err)
			}
			if res, _ := check(docs); res.err() != nil {
				t.Fatal(res.err())
			}
			if _, err := selfTest(docs); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestChartRefusesPlainHTTPRailURLsInModeInjector: the injected
// countersign runs in the agent's pod (in-agent-pod), where loopback is
// the agent's too, and refuses to start on a rail URL that is not https;
// the chart refuses to render one in mode injector, and still renders it
// in mode egress (Countersign's own pod).
func TestChartRefusesPlainHTTPRailURLsInModeInjector(t *testing.T) {
	inj := []string{"--values", "../../charts/countersign/ci/injector-values.yaml", "--namespace", "countersign-system"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"baseURL on loopback", []string{"--set-string", "rails[0].baseURL=http://127.0.0.1:12111"},
			`rails[0] (stripe_main): baseURL "http://127.0.0.1:12111" must be https in mode injector: the injected countersign runs in the agent's pod`},
		{"mcp base_url over http", []string{"--set-string", "rails[1].mcp.base_url=http://stripe-mcp.tools.svc.cluster.local"},
			`rails[1] (stripe_mcp): mcp.base_url "http://stripe-mcp.tools.svc.cluster.local" must be https in mode injector`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := helmTemplate(t, append(append([]string{}, inj...), tc.args...)...)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Fatalf("helm template = %v %s, want a refusal saying %q", err, out, tc.want)
			}
		})
	}
	if out, err := helmTemplate(t, append(append([]string{}, inj...), "--set-string", "rails[0].baseURL=HTTPS://api.stripe.com")...); err != nil {
		t.Fatalf("an https baseURL is refused: %s", out)
	}
	if out, err := helmTemplate(t, "--values", "../../charts/countersign/ci/injector-values.yaml", "--set", "mode=egress",
		"--set-string", "rails[0].baseURL=http://127.0.0.1:12111"); err != nil || !strings.Contains(out, "base_url: http://127.0.0.1:12111") {
		t.Fatalf("mode egress refuses a loopback baseURL, which Countersign's own pod keeps: %s", out)
	}
}

// TestEnvoyMutationsStillLoad: a broken copy of the bootstrap that no
// longer parsed or validated would be caught by [envoy-bootstrap] for
// that, whatever the check of its meaning says; each must load as Envoy
// would load it, so that its meaning is what is caught.
func TestEnvoyMutationsStillLoad(t *testing.T) {
	out, err := helmTemplate(t)
	if err != nil {
		t.Fatalf("refused: %s", out)
	}
	docs, err := splitDocs([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range envoyMutations {
		if m.want != invEnvoy {
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			cp, err := deepCopy(docs)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.apply(cp); err != nil {
				t.Fatal(err)
			}
			data := ""
			for _, o := range cp {
				if d, ok := o["data"].(map[string]any); ok && o["kind"] == "ConfigMap" && d["envoy.yaml"] != nil {
					data = d["envoy.yaml"].(string)
				}
			}
			b, err := envoyconfig.ParseBootstrap([]byte(data))
			if err != nil {
				t.Fatalf("does not parse: %v", err)
			}
			if _, err := envoyconfig.ValidateDeep(b); err != nil {
				t.Fatalf("does not validate: %v", err)
			}
			res, _ := check(cp)
			if !res.has(m.want) {
				t.Fatalf("not caught by [%s]: %v", m.want, res.failures)
			}
		})
	}
}

// TestChartRefusesAnExposingEnvoy: values that would have Envoy log the
// rail key (its router logs every request's headers at debug, ext_authz
// the ones it sets at trace) or open its plain-HTTP listener beyond the
// cluster are refused by the chart's schema; chartcheck's self-test breaks
// a rendering both ways as well (envoyMutations).
func TestChartRefusesAnExposingEnvoy(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"Envoy at debug", []string{"--set", "envoy.logLevel=debug"}, "/envoy/logLevel"},
		{"Envoy at trace", []string{"--set", "envoy.logLevel=trace"}, "/envoy/logLevel"},
		{"a LoadBalancer Service", []string{"--set", "service.type=LoadBalancer"}, "/service/type"},
		{"a NodePort Service", []string{"--set", "service.type=NodePort"}, "/service/type"},
		{"a NodePort Service without the NetworkPolicy", []string{"--set", "service.type=NodePort", "--set", "networkPolicy.enabled=false"}, "/service/type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := helmTemplate(t, tc.args...)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Fatalf("helm template = %v %.300s, want a refusal at %s", err, out, tc.want)
			}
		})
	}
	for _, level := range safeEnvoyLogLevels {
		out, err := helmTemplate(t, "--set", "envoy.logLevel="+level)
		if err != nil {
			t.Fatalf("envoy.logLevel=%s is refused: %s", level, out)
		}
		docs, err := splitDocs([]byte(out))
		if err != nil {
			t.Fatal(err)
		}
		if res, _ := check(docs); res.err() != nil {
			t.Errorf("envoy.logLevel=%s: %v", level, res.err())
		}
	}
}
