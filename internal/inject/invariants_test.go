package inject

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
)

// applyRaw applies an RFC 6902 patch to the object as the API server would.
func applyRaw(t *testing.T, raw, patch []byte) []byte {
	t.Helper()
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("the patch is not RFC 6902: %v", err)
	}
	out, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("the patch does not apply to the pod: %v", err)
	}
	return out
}

// injectedCases decodes every golden input the injector patches and
// returns the request and the pod the API server would store.
func injectedCases(t *testing.T) map[string]struct {
	req     *admissionv1.AdmissionRequest
	patched *corev1.Pod
	raw     []byte
} {
	t.Helper()
	out := map[string]struct {
		req     *admissionv1.AdmissionRequest
		patched *corev1.Pod
		raw     []byte
	}{}
	ins, _ := filepath.Glob("testdata/*.in.json")
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".in.json")
		body, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		req, pod, err := Decode(body)
		if err != nil {
			continue
		}
		resp := Mutate(req, pod, configOf(name), scopeOf(name))
		if len(resp.Patch) == 0 {
			continue
		}
		if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
			t.Fatalf("%s: patch type %v", name, resp.PatchType)
		}
		raw := applyRaw(t, req.Object.Raw, resp.Patch)
		var p corev1.Pod
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
		out[name] = struct {
			req     *admissionv1.AdmissionRequest
			patched *corev1.Pod
			raw     []byte
		}{req, &p, raw}
	}
	if len(out) < 4 {
		t.Fatalf("only %d injected cases", len(out))
	}
	return out
}

// TestInjectedPodInvariants checks each patched pod directly, without
// Guarded (which Mutate itself uses): the properties the isolation rests on.
func TestInjectedPodInvariants(t *testing.T) {
	scripts := map[string]bool{}
	egressCases := 0
	for name, c := range injectedCases(t) {
		cfg := configOf(name)
		if cfg.Egress.Enabled {
			egressCases++
		}
		t.Run(name, func(t *testing.T) {
			p := c.patched
			// The egress container, when egress is closed, before everything.
			off := 0
			if cfg.Egress.Enabled {
				off = 1
				scripts[checkEgressContainer(t, p, cfg)] = true
			}
			checkCapabilities(t, p, cfg)
			// Native sidecars, Countersign first, ahead of the pod's own.
			if len(p.Spec.InitContainers) < off+2 || p.Spec.InitContainers[off].Name != CountersignContainer || p.Spec.InitContainers[off+1].Name != EnvoyContainer {
				t.Fatalf("init containers do not start with %scountersign, envoy: %v", map[int]string{1: EgressContainer + ", "}[off], names(p.Spec.InitContainers))
			}
			for _, sc := range p.Spec.InitContainers[off : off+2] {
				if sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
					t.Errorf("%s is not a native sidecar", sc.Name)
				}
				s := sc.SecurityContext
				if s == nil || !*s.RunAsNonRoot || *s.RunAsUser == 0 || !*s.ReadOnlyRootFilesystem || *s.AllowPrivilegeEscalation ||
					!slices.Equal(s.Capabilities.Drop, []corev1.Capability{"ALL"}) || s.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
					t.Errorf("%s is not hardened: %+v", sc.Name, s)
				}
			}
			cs := p.Spec.InitContainers[off]
			if !slices.Contains(envNames(cs.Env), "COUNTERSIGN_ENVOY_ADDR") || env(cs.Env, "COUNTERSIGN_ENVOY_ADDR") != "unix:"+EnvoySocket ||
				env(cs.Env, "COUNTERSIGN_GRPC_ADDR") != "unix:"+APISocket {
				t.Errorf("countersign does not listen on the sockets: %v", cs.Env)
			}
			// It runs in the agent's pod, and knows it (verify-full ledger, https rails).
			if env(cs.Env, InAgentPodEnv) != "true" {
				t.Errorf("countersign does not run with %s=true: %v", InAgentPodEnv, cs.Env)
			}
			// The ledger through PgBouncer, and the audit log's signing key,
			// a Secret file of countersign's (checked with the rail keys below).
			if env(cs.Env, "COUNTERSIGN_DB_POOLER") != "pgbouncer" || env(cs.Env, "COUNTERSIGN_AUDIT_SIGNING_KEY") != AuditKeyDir+"/key" ||
				!slices.ContainsFunc(cs.VolumeMounts, func(m corev1.VolumeMount) bool {
					return m.Name == AuditKeyVolume && m.MountPath == AuditKeyDir && m.ReadOnly
				}) ||
				!slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == cfg.AuditKeySecret }) {
				t.Errorf("countersign has not got the pooler setting and the audit signing key: %v %v", cs.Env, cs.VolumeMounts)
			}
			// The socket volume: an emptyDir, mounted by the two sidecars only.
			secretVols := map[string]bool{}
			for _, v := range p.Spec.Volumes {
				if v.Name == SocketVolume && v.EmptyDir == nil {
					t.Errorf("socket volume is not an emptyDir")
				}
				if v.Secret != nil {
					secretVols[v.Name] = true
				}
			}
			for _, k := range cfg.RailKeys {
				if !slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == k.Secret }) {
					t.Errorf("rail key %s is not mounted", k.Account)
				}
			}
			every := append(append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...), ephemeral(p)...)
			for _, ct := range every {
				for _, m := range ct.VolumeMounts {
					if m.Name == SocketVolume && ct.Name != CountersignContainer && ct.Name != EnvoyContainer {
						t.Errorf("agent container %s mounts the socket volume", ct.Name)
					}
					if secretVols[m.Name] && ct.Name != CountersignContainer {
						t.Errorf("%s mounts secret volume %s: rail keys are Countersign's only", ct.Name, m.Name)
					}
				}
				for _, e := range ct.Env {
					if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && ct.Name != CountersignContainer {
						t.Errorf("%s reads Secret %s", ct.Name, e.ValueFrom.SecretKeyRef.Name)
					}
				}
				if ct.Name == CountersignContainer || ct.Name == EnvoyContainer || ct.Name == EgressContainer {
					continue
				}
				for _, b := range cfg.BaseURLs {
					if n := count(ct.Env, b.Name); n != 1 || env(ct.Env, b.Name) != b.Value {
						t.Errorf("agent container %s: %s is %q (%d times), want %q once", ct.Name, b.Name, env(ct.Env, b.Name), n, b.Value)
					}
				}
			}
			if p.Annotations[StatusKey] != StatusInjected || p.Annotations[VersionKey] != "test" {
				t.Errorf("status annotations: %v", p.Annotations)
			}
			if !slices.ContainsFunc(p.Spec.HostAliases, func(a corev1.HostAlias) bool {
				return a.IP == "127.0.0.1" && slices.Equal(a.Hostnames, []string{"razorpay.egress.local", "stripe.egress.local"})
			}) {
				t.Errorf("base URL hosts are not aliased to 127.0.0.1: %v", p.Spec.HostAliases)
			}
		})
	}
	// The script is the operator's: every pod, whatever it holds, gets the
	// same one.
	if egressCases < 2 || len(scripts) != 1 {
		t.Errorf("%d injected cases close egress, with %d different scripts: want at least 2, all with one script", egressCases, len(scripts))
	}
}

// checkEgressContainer checks the egress container of a pod injected
// with egress closed, and returns its script.
func checkEgressContainer(t *testing.T, p *corev1.Pod, cfg Config) string {
	t.Helper()
	e := p.Spec.InitContainers[0]
	if e.Name != EgressContainer {
		t.Fatalf("the first init container is %s, not %s", e.Name, EgressContainer)
	}
	// Plain: it runs to completion before the sidecars and the agent start.
	if e.RestartPolicy != nil || e.Image != cfg.Egress.Image || len(e.Env) > 0 || len(e.EnvFrom) > 0 || len(e.Ports) > 0 ||
		e.StartupProbe != nil || e.LivenessProbe != nil || e.ReadinessProbe != nil || e.Lifecycle != nil {
		t.Errorf("%s is not a plain init container of image %s alone: %+v", e.Name, cfg.Egress.Image, e)
	}
	// Its two emptyDirs only: iptables' lock, and an empty read-only
	// directory where a service account token would go.
	if !reflect.DeepEqual(e.VolumeMounts, []corev1.VolumeMount{{Name: XtablesVolume, MountPath: "/run"},
		{Name: NoTokenVolume, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}}) {
		t.Errorf("%s mounts more than its two emptyDirs: %v", e.Name, e.VolumeMounts)
	}
	for _, name := range []string{XtablesVolume, NoTokenVolume} {
		if !slices.ContainsFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == name && v.EmptyDir != nil }) {
			t.Errorf("volume %s is not an emptyDir", name)
		}
	}
	s := e.SecurityContext
	if s == nil || s.RunAsUser == nil || *s.RunAsUser != 0 || s.RunAsNonRoot == nil || *s.RunAsNonRoot ||
		s.ReadOnlyRootFilesystem == nil || !*s.ReadOnlyRootFilesystem || s.AllowPrivilegeEscalation == nil || *s.AllowPrivilegeEscalation ||
		s.Privileged == nil || *s.Privileged || s.Capabilities == nil ||
		!slices.Equal(s.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "NET_RAW"}) || !slices.Equal(s.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		s.SeccompProfile == nil || s.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: want root with NET_ADMIN and NET_RAW only, read-only, no escalation, RuntimeDefault: %+v", e.Name, s)
	}
	if len(e.Command) != 3 || e.Command[0] != "/bin/sh" || e.Command[1] != "-ec" || len(e.Args) > 0 {
		t.Fatalf("%s: command is not /bin/sh -ec SCRIPT: %q %q", e.Name, e.Command, e.Args)
	}
	script := e.Command[2]
	// The rules match the configured UID and no other.
	uids := regexp.MustCompile(`(?m)^uid=(.*)$`).FindAllStringSubmatch(script, -1)
	owners := regexp.MustCompile(`--uid-owner (\S+)`).FindAllStringSubmatch(script, -1)
	if len(uids) != 1 || uids[0][1] != fmt.Sprintf("'%d'", cfg.Egress.AgentUID) || len(owners) == 0 ||
		slices.ContainsFunc(owners, func(m []string) bool { return m[1] != `"$uid"` }) {
		t.Errorf("the rules do not match UID %d alone: uid= %q, --uid-owner %q", cfg.Egress.AgentUID, uids, owners)
	}
	// Each closed destination, in both families, and the chain made idempotent.
	for _, h := range cfg.Egress.Hosts {
		if !strings.Contains(script, "reject_host '"+h+".'\n") {
			t.Errorf("the script does not close host %s", h)
		}
	}
	for _, c := range cfg.Egress.CIDRs {
		if !strings.Contains(script, " '"+c+"'\n") {
			t.Errorf("the script does not close %s", c)
		}
	}
	for _, want := range []string{"chain iptables\n", "  chain ip6tables\n", "-N " + egressChain + " 2>/dev/null || $1 -F " + egressChain,
		"-C OUTPUT -m owner", "-j REJECT --reject-with tcp-reset", "-o lo -j RETURN"} {
		if !strings.Contains(script, want) {
			t.Errorf("the script lacks %q", want)
		}
	}
	return script
}

// checkCapabilities: only the egress container, and only when egress is
// closed, has NET_ADMIN or NET_RAW; with egress closed every agent
// container runs as the agent's UID and cannot escalate.
func checkCapabilities(t *testing.T, p *corev1.Pod, cfg Config) {
	t.Helper()
	every := append(append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...), ephemeral(p)...)
	for i, ct := range every {
		egress := cfg.Egress.Enabled && i == 0 && ct.Name == EgressContainer
		if s := ct.SecurityContext; !egress && s != nil && s.Capabilities != nil &&
			slices.ContainsFunc(s.Capabilities.Add, func(c corev1.Capability) bool {
				n := strings.TrimPrefix(string(c), "CAP_")
				return n == "NET_ADMIN" || n == "NET_RAW" || n == "ALL"
			}) {
			t.Errorf("%s adds %v: only the egress container may have NET_ADMIN or NET_RAW", ct.Name, s.Capabilities.Add)
		}
		if !cfg.Egress.Enabled || ours(ct.Name) {
			continue
		}
		s := ct.SecurityContext
		var user *int64
		if p.Spec.SecurityContext != nil {
			user = p.Spec.SecurityContext.RunAsUser
		}
		if s != nil && s.RunAsUser != nil {
			user = s.RunAsUser
		}
		if user == nil || *user != cfg.Egress.AgentUID || s == nil || s.AllowPrivilegeEscalation == nil || *s.AllowPrivilegeEscalation {
			t.Errorf("agent container %s: want UID %d without escalation: %+v", ct.Name, cfg.Egress.AgentUID, s)
		}
	}
}

// TestSecondPassChangesNothing: the pod the API server stored, reviewed
// again (reinvocation), is admitted as it is.
func TestSecondPassChangesNothing(t *testing.T) {
	for name, c := range injectedCases(t) {
		t.Run(name, func(t *testing.T) {
			req := *c.req
			req.Object.Raw = c.raw
			resp := Mutate(&req, c.patched, configOf(name), scopeOf(name))
			if !resp.Allowed || len(resp.Patch) != 0 {
				t.Fatalf("second pass: allowed=%v patch=%s result=%+v", resp.Allowed, resp.Patch, resp.Result)
			}
		})
	}
}

// TestGuardedRefusesBrokenPods breaks a guarded pod one way at a time:
// Guarded (Mutate's self-check, and the check of a pod that arrives marked
// injected) must catch each.
func TestGuardedRefusesBrokenPods(t *testing.T) {
	base := injectedCases(t)["ns-merge-existing"].patched
	if err := Guarded(base, testConfig()); err != nil {
		t.Fatalf("the injected pod is not guarded: %v", err)
	}
	breaks := map[string]func(p *corev1.Pod){
		"sidecar not native": func(p *corev1.Pod) { p.Spec.InitContainers[0].RestartPolicy = nil },
		"envoy before countersign": func(p *corev1.Pod) {
			p.Spec.InitContainers[0], p.Spec.InitContainers[1] = p.Spec.InitContainers[1], p.Spec.InitContainers[0]
		},
		"other countersign image": func(p *corev1.Pod) { p.Spec.InitContainers[0].Image = "registry.example/evil:1" },
		"envoy may escalate":      func(p *corev1.Pod) { p.Spec.InitContainers[1].SecurityContext.AllowPrivilegeEscalation = ptr(true) },
		"envoy gets the pod's token": func(p *corev1.Pod) {
			// What the ServiceAccount plugin does when nothing is at its path.
			vm := p.Spec.InitContainers[1].VolumeMounts
			p.Spec.InitContainers[1].VolumeMounts = slices.DeleteFunc(vm, func(m corev1.VolumeMount) bool { return m.Name == NoTokenVolume })
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "kube-api-access-x", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}})
			p.Spec.InitContainers[1].VolumeMounts = append(p.Spec.InitContainers[1].VolumeMounts, corev1.VolumeMount{Name: "kube-api-access-x", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true})
		},
		"countersign gets the pod's token": func(p *corev1.Pod) {
			vm := p.Spec.InitContainers[0].VolumeMounts
			p.Spec.InitContainers[0].VolumeMounts = slices.DeleteFunc(vm, func(m corev1.VolumeMount) bool { return m.Name == NoTokenVolume })
		},
		"envoy mounts a rail key": func(p *corev1.Pod) {
			p.Spec.InitContainers[1].VolumeMounts = append(p.Spec.InitContainers[1].VolumeMounts, corev1.VolumeMount{Name: railKeyVolume + "0", MountPath: "/k"})
		},
		"agent mounts the sockets": func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: SocketVolume, MountPath: "/s"})
		},
		"agent mounts a rail key": func(p *corev1.Pod) {
			p.Spec.Containers[1].VolumeMounts = append(p.Spec.Containers[1].VolumeMounts, corev1.VolumeMount{Name: railKeyVolume + "1", MountPath: "/k"})
		},
		"socket volume on the host": func(p *corev1.Pod) {
			i := slices.IndexFunc(p.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == SocketVolume })
			p.Spec.Volumes[i].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp"}}
		},
		"agent init lacks a base URL": func(p *corev1.Pod) { p.Spec.InitContainers[2].Env = nil },
		"base URL repeated": func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: "STRIPE_API_BASE", Value: "https://api.stripe.com"})
		},
		"share process namespace": func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = ptr(true) },
		"no host alias":           func(p *corev1.Pod) { p.Spec.HostAliases = p.Spec.HostAliases[:1] },
	}
	// What a pod that arrives marked injected could rewire (found by an
	// attacker's-eye review: Guarded checked a few fields of the sidecars
	// and none of the whole-pod refusals of injection).
	maps.Copy(breaks, forgedSidecars())
	for name, brk := range breaks {
		t.Run(name, func(t *testing.T) {
			p := base.DeepCopy()
			brk(p)
			if err := Guarded(p, testConfig()); err == nil {
				t.Fatal("Guarded accepted it")
			}
		})
	}
}

func names(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func envNames(es []corev1.EnvVar) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Name)
	}
	return out
}

func env(es []corev1.EnvVar, name string) string {
	for _, e := range es {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func count(es []corev1.EnvVar, name string) int {
	n := 0
	for _, e := range es {
		if e.Name == name {
			n++
		}
	}
	return n
}

func ephemeral(p *corev1.Pod) []corev1.Container {
	var out []corev1.Container
	for _, e := range p.Spec.EphemeralContainers {
		out = append(out, corev1.Container{Name: e.Name, VolumeMounts: e.VolumeMounts, Env: e.Env, SecurityContext: e.SecurityContext})
	}
	return out
}
