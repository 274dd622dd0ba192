package envoy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/countersign/countersign/internal/config"
)

// The Istio example has no Go types in this module (and gets none): it is
// read as generic YAML and its key fields are asserted.
const (
	istioValues = "istio/istiod-values.yaml"
	istioEgress = "istio/egress-gateway.yaml"
	// railHost is the rail the example guards.
	railHost = "api.stripe.com"
)

// yamlDocs splits a multi-document YAML file and parses each document.
func yamlDocs(data []byte) ([]map[string]any, error) {
	var out []map[string]any
	for i, part := range bytes.Split(append([]byte("\n"), data...), []byte("\n---\n")) {
		if len(bytes.TrimSpace(stripComments(part))) == 0 {
			continue
		}
		var m map[string]any
		if err := yaml.Unmarshal(part, &m); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		out = append(out, m)
	}
	return out, nil
}

func stripComments(b []byte) []byte {
	var out [][]byte
	for l := range bytes.Lines(b) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, nil)
}

// get walks nested maps by key.
func get(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func str(v any, keys ...string) string { s, _ := get(v, keys...).(string); return s }

func list(v any, keys ...string) []any { l, _ := get(v, keys...).([]any); return l }

// checkIstio asserts the example's contract: one fail-closed gRPC provider
// that sends the body, a CUSTOM policy naming it that checks every request
// to the rail host, and the ServiceEntries both depend on.
func checkIstio(values map[string]any, docs []map[string]any) error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	var provider map[string]any
	for _, p := range list(values, "meshConfig", "extensionProviders") {
		if get(p, "envoyExtAuthzGrpc") != nil {
			if provider != nil {
				fail("more than one envoyExtAuthzGrpc provider")
			}
			provider, _ = p.(map[string]any)
		}
	}
	if provider == nil {
		return errors.New("meshConfig.extensionProviders has no envoyExtAuthzGrpc provider")
	}
	name := str(provider, "name")
	g := get(provider, "envoyExtAuthzGrpc")
	service := str(g, "service")
	if service == "" || get(g, "port") != float64(9191) {
		fail("provider %q: service must be set and port 9191, are %q and %v", name, service, get(g, "port"))
	}
	if d, err := time.ParseDuration(str(g, "timeout")); err != nil || d < minCallTimeout {
		fail("provider %q: timeout must be at least %v (Istio's default is 600s), is %q", name, minCallTimeout, str(g, "timeout"))
	}
	if fo, ok := get(g, "failOpen").(bool); !ok || fo {
		fail("provider %q: failOpen must be set, to false", name)
	}
	if s, ok := get(g, "statusOnError").(string); !ok || s != "503" {
		fail(`provider %q: statusOnError must be the string "503", is %#v`, name, get(g, "statusOnError"))
	}
	body := get(g, "includeRequestBodyInCheck")
	if n, _ := get(body, "maxRequestBytes").(float64); n <= 0 || get(body, "allowPartialMessage") != true || get(body, "packAsBytes") != true {
		fail("provider %q: includeRequestBodyInCheck needs maxRequestBytes > 0, allowPartialMessage and packAsBytes true", name)
	}

	kinds := map[string][]map[string]any{}
	for i, d := range docs {
		kind := str(d, "kind")
		if str(d, "apiVersion") == "" || kind == "" || str(d, "metadata", "name") == "" {
			fail("document %d has no apiVersion, kind or metadata.name", i)
		}
		kinds[kind] = append(kinds[kind], d)
	}

	// The local ServiceEntry that makes the provider's service loopback.
	local := false
	for _, se := range kinds["ServiceEntry"] {
		if !slices.Contains(list(se, "spec", "hosts"), any(service)) {
			continue
		}
		local = true
		for _, ep := range list(se, "spec", "endpoints") {
			if ip, err := netip.ParseAddr(str(ep, "address")); err != nil || !ip.IsLoopback() {
				fail("ServiceEntry %s: endpoint %q is not loopback: Countersign runs in the gateway's pod", str(se, "metadata", "name"), str(ep, "address"))
			}
		}
		grpc := false
		for _, p := range list(se, "spec", "ports") {
			grpc = grpc || (get(p, "number") == get(g, "port") && str(p, "protocol") == "GRPC")
		}
		if !grpc {
			fail("ServiceEntry %s: no GRPC port %v", str(se, "metadata", "name"), get(g, "port"))
		}
	}
	if !local {
		fail("no ServiceEntry defines the provider's service %q", service)
	}
	rail := false
	for _, se := range kinds["ServiceEntry"] {
		rail = rail || slices.Contains(list(se, "spec", "hosts"), any(railHost))
	}
	if !rail {
		fail("no ServiceEntry for %s", railHost)
	}

	// The rail key rides on the gateway's connection to the rail: it must
	// be TLS that accepts only the rail's certificate name.
	pinned := false
	for _, dr := range kinds["DestinationRule"] {
		if str(dr, "spec", "host") != railHost {
			continue
		}
		for _, pl := range list(dr, "spec", "trafficPolicy", "portLevelSettings") {
			tls := get(pl, "tls")
			pinned = pinned || str(tls, "mode") == "SIMPLE" && slices.Equal(list(tls, "subjectAltNames"), []any{railHost})
		}
	}
	if !pinned {
		fail("no DestinationRule for %s originates TLS that accepts only subjectAltNames [%s]", railHost, railHost)
	}

	// An allowed request goes to the rail once: Istio gives a route
	// without retries its default policy (two retries, on a 503 among
	// others: pilot/pkg/networking/core/route/retry/retry.go,
	// DefaultPolicy), and attempts: 0 is how a VirtualService says none.
	// Every route of a VirtualService for the rail host carries a rail
	// call, the sidecar's to the gateway as much as the gateway's to the
	// rail: a sidecar that re-sent after the gateway's 503 (the rail's, or
	// ext_authz's status_on_error) would have it checked and sent again.
	toRail := 0
	for _, vs := range kinds["VirtualService"] {
		forRail := slices.Contains(list(vs, "spec", "hosts"), any(railHost))
		for i, r := range list(vs, "spec", "http") {
			sends := forRail && len(list(r, "route")) > 0
			for _, d := range list(r, "route") {
				sends = sends || str(d, "destination", "host") == railHost
			}
			if !sends {
				continue
			}
			toRail++
			if a, ok := get(r, "retries", "attempts").(float64); !ok || a != 0 {
				fail("VirtualService %s http[%d] carries a call to %s with retries %v: it must say retries.attempts: 0 (Istio's default retries a 503, a second rail call on one decision)",
					str(vs, "metadata", "name"), i, railHost, get(r, "retries"))
			}
		}
	}
	if toRail < 2 {
		fail("want the two VirtualService routes of a call to %s (sidecar to gateway, gateway to the rail), found %d", railHost, toRail)
	}

	covered := false
	for _, ap := range kinds["AuthorizationPolicy"] {
		n := str(ap, "metadata", "name")
		if str(ap, "spec", "action") != "CUSTOM" {
			fail("AuthorizationPolicy %s: action must be CUSTOM, is %q", n, str(ap, "spec", "action"))
			continue
		}
		if p := str(ap, "spec", "provider", "name"); p != name {
			fail("AuthorizationPolicy %s: provider %q is not the mesh provider %q", n, p, name)
		}
		if get(ap, "spec", "selector", "matchLabels") == nil {
			fail("AuthorizationPolicy %s: needs a selector for the egress gateway", n)
		}
		for _, r := range list(ap, "spec", "rules") {
			for _, to := range list(r, "to") {
				op := get(to, "operation")
				// Fewer requests checked means a request that reaches
				// the rail with the agent's credential in it.
				for _, k := range []string{"paths", "notPaths", "methods", "notMethods", "ports", "notPorts", "notHosts"} {
					if get(op, k) != nil {
						fail("AuthorizationPolicy %s: operation.%s narrows the check; every request to the rail must be checked", n, k)
					}
				}
				covered = covered || slices.Contains(list(op, "hosts"), any(railHost))
			}
		}
	}
	if !covered {
		fail("no CUSTOM AuthorizationPolicy covers %s", railHost)
	}
	return errors.Join(errs...)
}

func loadIstio(t *testing.T) (map[string]any, []map[string]any) {
	t.Helper()
	raw, err := os.ReadFile(istioValues)
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	raw, err = os.ReadFile(istioEgress)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := yamlDocs(raw)
	if err != nil {
		t.Fatal(err)
	}
	return values, docs
}

func TestIstioExample(t *testing.T) {
	files, err := filepath.Glob("istio/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(files, []string{istioEgress, istioValues}) {
		t.Fatalf("istio/ holds %v; every file must be checked here", files)
	}
	values, docs := loadIstio(t)
	if len(docs) < 7 {
		t.Fatalf("%s: %d documents, want the 7 of the example", istioEgress, len(docs))
	}
	if err := checkIstio(values, docs); err != nil {
		t.Fatal(err)
	}
}

func TestIstioBrokenCopiesAreCaught(t *testing.T) {
	provider := func(v map[string]any) map[string]any {
		return get(list(v, "meshConfig", "extensionProviders")[0], "envoyExtAuthzGrpc").(map[string]any)
	}
	ofKind := func(docs []map[string]any, kind string) map[string]any {
		for _, d := range docs {
			if str(d, "kind") == kind {
				return d
			}
		}
		panic("no " + kind)
	}
	policy := func(docs []map[string]any) map[string]any {
		return get(ofKind(docs, "AuthorizationPolicy"), "spec").(map[string]any)
	}
	cases := []struct {
		name   string
		edit   func(values map[string]any, docs []map[string]any)
		errHas string
	}{
		{"fails open", func(v map[string]any, _ []map[string]any) { provider(v)["failOpen"] = true }, "failOpen must be set, to false"},
		{"failOpen left to the default", func(v map[string]any, _ []map[string]any) { delete(provider(v), "failOpen") }, "failOpen must be set"},
		{"statusOnError as a number", func(v map[string]any, _ []map[string]any) { provider(v)["statusOnError"] = 503 }, "statusOnError must be the string"},
		{"statusOnError 403", func(v map[string]any, _ []map[string]any) { provider(v)["statusOnError"] = "403" }, "statusOnError must be"},
		{"Istio's 600s timeout", func(v map[string]any, _ []map[string]any) { delete(provider(v), "timeout") }, "timeout must be at least"},
		{"no partial message", func(v map[string]any, _ []map[string]any) {
			get(provider(v), "includeRequestBodyInCheck").(map[string]any)["allowPartialMessage"] = false
		}, "includeRequestBodyInCheck"},
		{"action ALLOW", func(_ map[string]any, d []map[string]any) { policy(d)["action"] = "ALLOW" }, "action must be CUSTOM"},
		{"provider name mismatch", func(_ map[string]any, d []map[string]any) {
			policy(d)["provider"] = map[string]any{"name": "countersign-grpc"}
		}, "is not the mesh provider"},
		{"only some paths checked", func(_ map[string]any, d []map[string]any) {
			get(list(list(policy(d), "rules")[0], "to")[0], "operation").(map[string]any)["paths"] = []any{"/v1/refunds"}
		}, "operation.paths narrows the check"},
		{"rail host not covered", func(_ map[string]any, d []map[string]any) {
			get(list(list(policy(d), "rules")[0], "to")[0], "operation").(map[string]any)["hosts"] = []any{"api.razorpay.com"}
		}, "no CUSTOM AuthorizationPolicy covers"},
		{"the rail's certificate name not pinned", func(_ map[string]any, d []map[string]any) {
			for _, doc := range d {
				if str(doc, "kind") == "DestinationRule" && str(doc, "spec", "host") == railHost {
					for _, pl := range list(doc, "spec", "trafficPolicy", "portLevelSettings") {
						delete(get(pl, "tls").(map[string]any), "subjectAltNames")
					}
				}
			}
		}, "accepts only subjectAltNames"},
		{"Istio's default retries on the route to the rail", func(_ map[string]any, d []map[string]any) {
			for _, r := range list(ofKind(d, "VirtualService"), "spec", "http") {
				delete(r.(map[string]any), "retries")
			}
		}, "must say retries.attempts: 0"},
		{"Istio's default retries on the sidecar's route to the gateway (a 503 re-sent, checked and allowed again)", func(_ map[string]any, d []map[string]any) {
			for _, r := range list(ofKind(d, "VirtualService"), "spec", "http") {
				if str(list(r, "route")[0], "destination", "host") != railHost {
					delete(r.(map[string]any), "retries")
				}
			}
		}, "http[0] carries a call to api.stripe.com with retries <nil>"},
		{"the rail call retried", func(_ map[string]any, d []map[string]any) {
			for _, r := range list(ofKind(d, "VirtualService"), "spec", "http") {
				if get(r, "retries") != nil {
					r.(map[string]any)["retries"] = map[string]any{"attempts": 2, "retryOn": "5xx"}
				}
			}
		}, "must say retries.attempts: 0"},
		{"Countersign not on loopback", func(_ map[string]any, d []map[string]any) {
			list(ofKind(d, "ServiceEntry"), "spec", "endpoints")[0].(map[string]any)["address"] = "10.0.0.7"
		}, "is not loopback"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			values, docs := loadIstio(t)
			tc.edit(values, docs)
			// Through JSON and back, as a client would send it.
			js, err := json.Marshal(docs)
			if err != nil {
				t.Fatal(err)
			}
			docs = nil
			if err := json.Unmarshal(js, &docs); err != nil {
				t.Fatal(err)
			}
			js, err = json.Marshal(values)
			if err != nil {
				t.Fatal(err)
			}
			values = nil
			if err := json.Unmarshal(js, &values); err != nil {
				t.Fatal(err)
			}
			err = checkIstio(values, docs)
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("checkIstio = %v, want an error saying %q", err, tc.errHas)
			}
		})
	}
}

// serveCommandRE finds the command the Istio README has the operator run in
// the gateway's pod, in backquotes, possibly across lines.
var serveCommandRE = regexp.MustCompile("`(countersign serve [^`]*)`")

// TestIstioReadmeServeCommandStarts: the README's `countersign serve`
// command, parsed by serve's own flags and validated as serve validates it
// at start, is accepted, and listens for ext_authz where the mesh provider
// calls. It once could not start: --envoy-addr 127.0.0.1:9191 was also
// --grpc-addr's default, a clash Validate refuses.
func TestIstioReadmeServeCommandStarts(t *testing.T) {
	raw, err := os.ReadFile("istio/README.md")
	if err != nil {
		t.Fatal(err)
	}
	found := serveCommandRE.FindAllStringSubmatch(string(raw), -1)
	if len(found) != 1 {
		t.Fatalf("istio/README.md has %d `countersign serve …` commands, want 1: %q", len(found), found)
	}
	argv := strings.Fields(found[0][1])[2:]
	c := config.Defaults()
	// The ledger comes from COUNTERSIGN_DATABASE_URL in the pod, not the
	// command line.
	c.DatabaseURL = "postgres://countersign@db.example:5432/countersign?sslmode=verify-full"
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	c.BindServe(fs)
	if err := fs.Parse(argv); err != nil {
		t.Fatalf("serve refuses the README's flags %q: %v", argv, err)
	}
	if fs.NArg() != 0 {
		t.Fatalf("serve takes no arguments, the README gives %q", fs.Args())
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("serve %q does not start:\n%v", argv, err)
	}
	values, _ := loadIstio(t)
	var port any
	for _, p := range list(values, "meshConfig", "extensionProviders") {
		if g := get(p, "envoyExtAuthzGrpc"); g != nil {
			port = get(g, "port")
		}
	}
	if want := fmt.Sprintf("127.0.0.1:%v", port); c.EnvoyAddr != want {
		t.Errorf("the README's serve listens for ext_authz on %q, the mesh provider calls %s", c.EnvoyAddr, want)
	}
	if c.ExtProcInPath {
		t.Error("the README's serve expects ext_proc in the path; Istio runs none here")
	}
}
