package inject

import (
	"os"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestEnvoyBootstrapFitsTheInjectedPod: the injector does not write an
// Envoy bootstrap; the operator's ConfigMap holds envoy/egress.yaml, which
// envoy/'s tests parse and validate in depth with go-control-plane. This
// holds the two to one contract: Envoy's upstream and admin sockets are in
// the socket volume the injector mounts, its egress listener is the
// loopback port the base URLs name, and it routes every base URL host.
func TestEnvoyBootstrapFitsTheInjectedPod(t *testing.T) {
	raw, err := os.ReadFile("../../envoy/egress.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var pipes, domains []string
	var sockets []map[string]any
	walk(doc, func(key string, v any) {
		switch key {
		case "pipe":
			pipes = append(pipes, v.(map[string]any)["path"].(string))
		case "domains":
			for _, d := range v.([]any) {
				domains = append(domains, d.(string))
			}
		case "socket_address":
			sockets = append(sockets, v.(map[string]any))
		}
	})
	if !slices.Contains(pipes, EnvoySocket) {
		t.Errorf("Envoy does not reach Countersign at %s (pipes: %v)", EnvoySocket, pipes)
	}
	for _, p := range pipes {
		if !strings.HasPrefix(p, SocketDir+"/") {
			t.Errorf("pipe %s is outside the socket volume %s", p, SocketDir)
		}
	}
	if !slices.ContainsFunc(sockets, func(s map[string]any) bool {
		return s["address"] == "127.0.0.1" && s["port_value"] == float64(EnvoyPort)
	}) {
		t.Errorf("no egress listener on 127.0.0.1:%d: %v", EnvoyPort, sockets)
	}
	for _, h := range aliasHosts(testConfig()) {
		if !slices.Contains(domains, h) {
			t.Errorf("no virtual host for base URL host %s: %v", h, domains)
		}
	}
}

func walk(v any, f func(string, any)) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			f(k, e)
			walk(e, f)
		}
	case []any:
		for _, e := range v {
			walk(e, f)
		}
	}
}
