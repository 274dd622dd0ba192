package inject

import (
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestEgressConfigRefusals: each bad egress setting is refused with a
// message naming it.
func TestEgressConfigRefusals(t *testing.T) {
	cases := []struct {
		name string
		edit func(e *EgressConfig)
		want string
	}{
		{"settings without close-egress", func(e *EgressConfig) { e.Enabled = false }, "take effect only with close-egress"},
		{"no image", func(e *EgressConfig) { e.Image = "" }, "egress-image is required"},
		{"image latest", func(e *EgressConfig) { e.Image = "registry.example/iptables:latest" }, "egress-image must be pinned"},
		{"untagged image", func(e *EgressConfig) { e.Image = "iptables" }, "egress-image must be pinned"},
		{"no UID", func(e *EgressConfig) { e.AgentUID = 0 }, "egress-agent-uid must be the agent's UID"},
		{"negative UID", func(e *EgressConfig) { e.AgentUID = -5 }, "egress-agent-uid must be the agent's UID"},
		{"UID out of range", func(e *EgressConfig) { e.AgentUID = 1 << 31 }, "egress-agent-uid must be the agent's UID"},
		{"Countersign's UID", func(e *EgressConfig) { e.AgentUID = countersignUID }, "is the injected countersign's UID"},
		{"Envoy's UID", func(e *EgressConfig) { e.AgentUID = envoyUID }, "is the injected Envoy's UID"},
		{"nothing to close", func(e *EgressConfig) { e.Hosts, e.CIDRs = nil, nil }, "at least one egress-close-host or egress-close-cidr"},
		{"host twice", func(e *EgressConfig) { e.Hosts = []string{"api.stripe.com", "api.stripe.com"} }, `egress-close-host "api.stripe.com" is given twice`},
		{"host is an address", func(e *EgressConfig) { e.Hosts = []string{"198.51.100.7"} }, "is an address: give it as egress-close-cidr"},
		{"host upper case", func(e *EgressConfig) { e.Hosts = []string{"API.stripe.com"} }, "is not a lowercase DNS name"},
		{"host with a final dot", func(e *EgressConfig) { e.Hosts = []string{"api.stripe.com."} }, "is not a lowercase DNS name"},
		{"host of one label", func(e *EgressConfig) { e.Hosts = []string{"localhost"} }, "is not a lowercase DNS name"},
		{"host with shell", func(e *EgressConfig) { e.Hosts = []string{"a.b;reboot"} }, "is not a lowercase DNS name"},
		{"host with a long label", func(e *EgressConfig) { e.Hosts = []string{strings.Repeat("a", 64) + ".example"} }, "is not a lowercase DNS name"},
		{"host is a base URL host", func(e *EgressConfig) { e.Hosts = []string{"stripe.egress.local"} }, "is a base URL host"},
		{"not a CIDR", func(e *EgressConfig) { e.CIDRs = []string{"203.0.113.0"} }, "is not a CIDR"},
		{"CIDR with shell", func(e *EgressConfig) { e.CIDRs = []string{"203.0.113.0/24'"} }, "is not a CIDR"},
		{"CIDR with host bits", func(e *EgressConfig) { e.CIDRs = []string{"203.0.113.7/24"} }, "did you mean 203.0.113.0/24?"},
		{"CIDR twice", func(e *EgressConfig) { e.CIDRs = []string{"2001:db8::/32", "2001:DB8::/32"} }, "is given twice"},
		{"CIDR mapped", func(e *EgressConfig) { e.CIDRs = []string{"::ffff:203.0.113.0/120"} }, "IPv4-mapped"},
		{"CIDR loopback", func(e *EgressConfig) { e.CIDRs = []string{"127.0.0.0/8"} }, "is loopback"},
		{"CIDR loopback host", func(e *EgressConfig) { e.CIDRs = []string{"127.0.0.1/32"} }, "is loopback"},
		{"CIDR IPv6 loopback", func(e *EgressConfig) { e.CIDRs = []string{"::1/128"} }, "is loopback"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := egressTestConfig()
			tc.edit(&cfg.Egress)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to say %q", err, tc.want)
			}
		})
	}
	// What is allowed: everything but loopback, however wide.
	cfg := egressTestConfig()
	cfg.Egress.CIDRs = []string{"0.0.0.0/0", "::/0", "128.0.0.0/1"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

// hardenedAgentPod is an agent pod that closed egress admits: UID 1000,
// non-root, no escalation.
func hardenedAgentPod() *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: "agent-", Namespace: "agents"},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr(int64(1000)), RunAsNonRoot: ptr(true)},
			InitContainers: []corev1.Container{{Name: "setup", Image: "registry.example/setup:1.0",
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false)}}},
			Containers: []corev1.Container{{Name: "agent", Image: "registry.example/agent:1.0",
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false)}}},
		},
	}
}

// mutatePod runs Mutate on pod as a namespace-scoped CREATE.
func mutatePod(t *testing.T, pod *corev1.Pod, cfg Config) *admissionv1.AdmissionResponse {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	req := &admissionv1.AdmissionRequest{UID: "egress", Namespace: pod.Namespace, Operation: admissionv1.Create,
		Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Object: runtime.RawExtension{Raw: raw}}
	return Mutate(req, pod, cfg, ScopeNamespace)
}

// TestEgressPodRefusals: with egress closed for UID 1000, every way an
// agent container could run as, or become, another UID, or send what the
// rules do not see, refuses the pod; and a pod that can do none of it is
// injected.
func TestEgressPodRefusals(t *testing.T) {
	if resp := mutatePod(t, hardenedAgentPod(), egressTestConfig()); !resp.Allowed || len(resp.Patch) == 0 {
		t.Fatalf("the hardened pod is not injected: %+v", resp.Result)
	}
	sc := func(p *corev1.Pod) *corev1.SecurityContext { return p.Spec.Containers[0].SecurityContext }
	initSC := func(p *corev1.Pod) *corev1.SecurityContext { return p.Spec.InitContainers[0].SecurityContext }
	cases := []struct {
		name string
		edit func(p *corev1.Pod)
		want string
	}{
		{"no runAsUser anywhere", func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsUser = nil }, "spec.containers[0] (agent) sets no runAsUser, nor does the pod"},
		{"no pod security context", func(p *corev1.Pod) { p.Spec.SecurityContext = nil }, "spec.initContainers[0] (setup) sets no runAsUser"},
		{"pod runs as another UID", func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsUser = ptr(int64(1001)) }, "spec.containers[0] (agent) runs as UID 1001"},
		{"container runs as another UID", func(p *corev1.Pod) { sc(p).RunAsUser = ptr(int64(2000)) }, "spec.containers[0] (agent) runs as UID 2000"},
		{"container runs as Envoy", func(p *corev1.Pod) { sc(p).RunAsUser = ptr(int64(envoyUID)) }, "runs as UID 101"},
		{"init container runs as root", func(p *corev1.Pod) { initSC(p).RunAsUser = ptr(int64(0)) }, "spec.initContainers[0] (setup) runs as UID 0"},
		{"runAsNonRoot unset", func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsNonRoot = nil }, "neither it nor the pod sets runAsNonRoot: true"},
		{"runAsNonRoot false on a container", func(p *corev1.Pod) { sc(p).RunAsNonRoot = ptr(false) }, "(agent): neither it nor the pod sets runAsNonRoot"},
		{"escalation unset", func(p *corev1.Pod) { sc(p).AllowPrivilegeEscalation = nil }, "(agent) does not set allowPrivilegeEscalation: false"},
		{"no container security context", func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext = nil }, "(agent) does not set allowPrivilegeEscalation: false"},
		{"init escalation true", func(p *corev1.Pod) { initSC(p).AllowPrivilegeEscalation = ptr(true) }, "(setup) does not set allowPrivilegeEscalation: false"},
		{"adds NET_RAW", func(p *corev1.Pod) { sc(p).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"NET_RAW"}} }, "adds capability NET_RAW"},
		{"adds SETUID", func(p *corev1.Pod) { sc(p).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"SETUID"}} }, "adds capability SETUID"},
		{"adds cap_setgid", func(p *corev1.Pod) {
			initSC(p).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"cap_setgid"}}
		}, "adds capability cap_setgid"},
		{"adds NET_ADMIN", func(p *corev1.Pod) { sc(p).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}} }, "adds capability NET_ADMIN"},
		{"adds ALL", func(p *corev1.Pod) { sc(p).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"ALL"}} }, "adds capability ALL"},
		{"ephemeral container as root", func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", Image: "registry.example/debug:1", SecurityContext: &corev1.SecurityContext{RunAsUser: ptr(int64(0)), AllowPrivilegeEscalation: ptr(false)}}}}
		}, "spec.ephemeralContainers[0] (debug) runs as UID 0"},
		{"windows", func(p *corev1.Pod) { p.Spec.OS = &corev1.PodOS{Name: corev1.Windows} }, "spec.os.name is windows"},
		{"closed host aliased", func(p *corev1.Pod) {
			p.Spec.HostAliases = []corev1.HostAlias{{IP: "10.9.9.9", Hostnames: []string{"API.Razorpay.com."}}}
		}, "spec.hostAliases[0] maps API.Razorpay.com., a closed rail host"},
		{"own name servers", func(p *corev1.Pod) { p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"198.51.100.53"}} }, "spec.dnsConfig.nameservers is set"},
		{"dnsPolicy None", func(p *corev1.Pod) {
			p.Spec.DNSPolicy = corev1.DNSNone
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Searches: []string{"example"}}
		}, "spec.dnsPolicy is None"},
		{"resolver option no-aaaa", func(p *corev1.Pod) {
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr("1")}, {Name: "no-aaaa"}}}
		}, `spec.dnsConfig.options has "no-aaaa"`},
		{"a container named like the egress container", func(p *corev1.Pod) { p.Spec.InitContainers[0].Name = EgressContainer }, `is named "countersign-egress"`},
		{"a volume named like the lock volume", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: XtablesVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}, `is named "countersign-xtables-lock"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := hardenedAgentPod()
			tc.edit(pod)
			resp := mutatePod(t, pod, egressTestConfig())
			if resp.Allowed || resp.Result == nil || resp.Result.Code != 403 || !strings.Contains(resp.Result.Message, tc.want) {
				t.Fatalf("want a refusal saying %q, got allowed=%v %+v", tc.want, resp.Allowed, resp.Result)
			}
		})
	}
	// Without closed egress, none of the UID rules applies, but an agent
	// may still not run as root (TestEveryModeRefusesWhatSteersTheSidecars).
	pod := hardenedAgentPod()
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr(true)}
	if resp := mutatePod(t, pod, testConfig()); !resp.Allowed || len(resp.Patch) == 0 {
		t.Fatalf("without closed egress a pod of the image's (non-root) user is refused: %+v", resp.Result)
	}
}

// TestEveryModeRefusesWhatSteersTheSidecars: the injected Envoy and
// Countersign look up their upstreams and the ledger through the pod's
// /etc/hosts and resolver, so with or without closed egress a pod may not
// choose them (a hostAliases entry but a base URL host on 127.0.0.1, its
// own name servers or search domains, a resolver option that changes an
// answer), and no agent container may run as root, which could rewrite
// the pod's /etc/hosts at run time.
func TestEveryModeRefusesWhatSteersTheSidecars(t *testing.T) {
	nonRoot := func() *corev1.Pod {
		p := hardenedAgentPod()
		p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr(true)}
		return p
	}
	cidrs := egressTestConfig()
	cidrs.Egress.Hosts = nil
	for _, mode := range []struct {
		name string
		cfg  Config
		base func() *corev1.Pod
	}{{"open egress", testConfig(), nonRoot}, {"egress closed by CIDR", cidrs, hardenedAgentPod}, {"egress closed by host", egressTestConfig(), hardenedAgentPod}} {
		name, cfg, base := mode.name, mode.cfg, mode.base
		if resp := mutatePod(t, base(), cfg); !resp.Allowed {
			t.Fatalf("%s: the pod is refused: %+v", name, resp.Result)
		}
		cases := []struct {
			name string
			edit func(p *corev1.Pod)
			want string
		}{
			{"an upstream aliased", func(p *corev1.Pod) {
				p.Spec.HostAliases = []corev1.HostAlias{{IP: "127.0.0.2", Hostnames: []string{"stripe-mcp.tools.svc.cluster.local"}}}
			}, "spec.hostAliases[0] maps stripe-mcp.tools.svc.cluster.local to 127.0.0.2: the injected sidecars resolve"},
			{"the ledger aliased to loopback", func(p *corev1.Pod) {
				p.Spec.HostAliases = []corev1.HostAlias{{IP: "127.0.0.1", Hostnames: []string{"ledger.db.svc"}}}
			}, "spec.hostAliases[0] maps ledger.db.svc to 127.0.0.1"},
			{"own name servers", func(p *corev1.Pod) { p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"198.51.100.53"}} }, "spec.dnsConfig.nameservers is set"},
			{"own search domains", func(p *corev1.Pod) { p.Spec.DNSConfig = &corev1.PodDNSConfig{Searches: []string{"attacker.example"}} }, "spec.dnsConfig.searches is set"},
			{"dnsPolicy None", func(p *corev1.Pod) { p.Spec.DNSPolicy = corev1.DNSNone }, "spec.dnsPolicy is None"},
			{"resolver option rotate", func(p *corev1.Pod) {
				p.Spec.DNSConfig = &corev1.PodDNSConfig{Options: []corev1.PodDNSConfigOption{{Name: "rotate"}}}
			}, `spec.dnsConfig.options has "rotate"`},
			{"root agent", func(p *corev1.Pod) {
				p.Spec.SecurityContext.RunAsNonRoot = nil
				p.Spec.Containers[0].SecurityContext.RunAsNonRoot = nil
			}, "(agent): neither it nor the pod sets runAsNonRoot: true; as root it could rewrite the pod's /etc/hosts"},
			{"root init container", func(p *corev1.Pod) { p.Spec.InitContainers[0].SecurityContext.RunAsNonRoot = ptr(false) }, "(setup): neither it nor the pod sets runAsNonRoot"},
			// The kubelet maps the pod's host name to the pod's own address
			// in /etc/hosts (found by a review).
			{"hostnameOverride of the ledger's name", func(p *corev1.Pod) { p.Spec.HostnameOverride = ptr("pgbouncer.countersign.svc.cluster.local") },
				`spec.hostnameOverride is "pgbouncer.countersign.svc.cluster.local": the kubelet maps that name to the pod's own address in its /etc/hosts`},
			{"host name as FQDN", func(p *corev1.Pod) {
				p.Spec.Hostname, p.Spec.Subdomain, p.Spec.SetHostnameAsFQDN = "agent-0", "agents", ptr(true)
			}, "spec.setHostnameAsFQDN is true: the pod's kernel host name would be its FQDN"},
		}
		// A StatefulSet's pod names itself (spec.hostname and subdomain):
		// allowed, as countersign reaches the ledger with verify-full.
		sts := base()
		sts.Spec.Hostname, sts.Spec.Subdomain, sts.Spec.SetHostnameAsFQDN = "agent-0", "agents", ptr(false)
		if resp := mutatePod(t, sts, cfg); !resp.Allowed {
			t.Errorf("%s: a pod with spec.hostname and subdomain is refused: %+v", name, resp.Result)
		}
		for _, tc := range cases {
			pod := base()
			tc.edit(pod)
			resp := mutatePod(t, pod, cfg)
			if resp.Allowed || resp.Result == nil || resp.Result.Code != 403 || !strings.Contains(resp.Result.Message, tc.want) {
				t.Errorf("%s, %s: want a refusal saying %q, got allowed=%v %+v", name, tc.name, tc.want, resp.Allowed, resp.Result)
			}
		}
	}
}

// TestGuardedRefusesBrokenEgress breaks a pod injected with egress closed
// one way at a time; Guarded must catch each, and a pod injected without
// it must not pass for one injected with it (or the reverse).
func TestGuardedRefusesBrokenEgress(t *testing.T) {
	cfg := egressTestConfig()
	base := injectedCases(t)["egress-merge-existing"].patched
	if err := Guarded(base, cfg); err != nil {
		t.Fatalf("the injected pod is not guarded: %v", err)
	}
	if err := Guarded(base, testConfig()); err == nil {
		t.Fatal("a pod with the egress container passes for one injected without it")
	}
	if err := Guarded(injectedCases(t)["ns-merge-existing"].patched, cfg); err == nil {
		t.Fatal("a pod injected without the egress container passes for one with it")
	}
	egress := func(p *corev1.Pod) *corev1.Container { return &p.Spec.InitContainers[0] }
	breaks := map[string]func(p *corev1.Pod){
		"egress container removed": func(p *corev1.Pod) { p.Spec.InitContainers = p.Spec.InitContainers[1:] },
		"egress container after countersign": func(p *corev1.Pod) {
			p.Spec.InitContainers[0], p.Spec.InitContainers[1] = p.Spec.InitContainers[1], p.Spec.InitContainers[0]
		},
		"egress container last": func(p *corev1.Pod) {
			p.Spec.InitContainers = append(p.Spec.InitContainers[1:], p.Spec.InitContainers[0])
		},
		"egress container twice": func(p *corev1.Pod) {
			p.Spec.InitContainers = append(p.Spec.InitContainers, p.Spec.InitContainers[0])
		},
		"another image":  func(p *corev1.Pod) { egress(p).Image = "registry.example/evil:1" },
		"another script": func(p *corev1.Pod) { egress(p).Command[2] = "true" },
		"script in args": func(p *corev1.Pod) { egress(p).Args = []string{"x"} },
		"another UID in it": func(p *corev1.Pod) {
			egress(p).Command[2] = strings.Replace(egress(p).Command[2], "uid='1000'", "uid='1001'", 1)
		},
		"a host left open": func(p *corev1.Pod) {
			egress(p).Command[2] = strings.Replace(egress(p).Command[2], "reject_host 'api.stripe.com.'\n", "", 1)
		},
		"restartable": func(p *corev1.Pod) { egress(p).RestartPolicy = ptr(corev1.ContainerRestartPolicyAlways) },
		"more capabilities": func(p *corev1.Pod) {
			egress(p).SecurityContext.Capabilities.Add = append(egress(p).SecurityContext.Capabilities.Add, "SYS_ADMIN")
		},
		"privileged":    func(p *corev1.Pod) { egress(p).SecurityContext.Privileged = ptr(true) },
		"writable root": func(p *corev1.Pod) { egress(p).SecurityContext.ReadOnlyRootFilesystem = ptr(false) },
		"mounts the sockets": func(p *corev1.Pod) {
			egress(p).VolumeMounts = append(egress(p).VolumeMounts, corev1.VolumeMount{Name: SocketVolume, MountPath: "/s"})
		},
		"reads an env secret": func(p *corev1.Pod) {
			egress(p).EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{}}}
		},
		"a token where none should be": func(p *corev1.Pod) {
			egress(p).VolumeMounts[1] = corev1.VolumeMount{Name: "kube-api-access-x", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}
		},
		"lock volume on the host": func(p *corev1.Pod) {
			for i, v := range p.Spec.Volumes {
				if v.Name == XtablesVolume {
					p.Spec.Volumes[i].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/run"}}
				}
			}
		},
		"agent runs as another UID": func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.RunAsUser = ptr(int64(0)) },
		"agent init may escalate":   func(p *corev1.Pod) { p.Spec.InitContainers[3].SecurityContext.AllowPrivilegeEscalation = nil },
		"agent adds NET_RAW": func(p *corev1.Pod) {
			p.Spec.Containers[1].SecurityContext.Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"NET_RAW"}}
		},
		"pod drops its runAsUser": func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsUser = nil },
		"closed host aliased elsewhere": func(p *corev1.Pod) {
			p.Spec.HostAliases[0].Hostnames = append(p.Spec.HostAliases[0].Hostnames, "api.stripe.com")
		},
	}
	for name, brk := range breaks {
		t.Run(name, func(t *testing.T) {
			p := base.DeepCopy()
			brk(p)
			if err := Guarded(p, cfg); err == nil {
				t.Fatal("Guarded accepted it")
			}
		})
	}
	// What the API server adds to a container it stores (its defaults, and
	// a LimitRange's) is not a break.
	p := base.DeepCopy()
	egress(p).TerminationMessagePath = corev1.TerminationMessagePathDefault
	egress(p).TerminationMessagePolicy = corev1.TerminationMessageReadFile
	egress(p).Resources.Limits[corev1.ResourceCPU] = resource.MustParse("100m") // a LimitRange's default
	if err := Guarded(p, cfg); err != nil {
		t.Fatalf("the API server's defaults break Guarded: %v", err)
	}
}

// TestEgressScriptQuotesAndFamilies: the script closes IPv4 CIDRs with
// iptables, IPv6 CIDRs with ip6tables only when the kernel has IPv6, host
// names in both families, and sets up only the families it needs.
func TestEgressScriptQuotesAndFamilies(t *testing.T) {
	v4 := egressScript(EgressConfig{Enabled: true, AgentUID: 1000, CIDRs: []string{"198.51.100.0/24"}})
	if !strings.Contains(v4, "chain iptables\nreject iptables '198.51.100.0/24'\n") || strings.Contains(v4, "chain ip6tables") {
		t.Errorf("IPv4 CIDRs alone:\n%s", v4)
	}
	v6 := egressScript(EgressConfig{Enabled: true, AgentUID: 1000, CIDRs: []string{"2001:DB8::/32"}})
	if !strings.Contains(v6, "if [ -n \"$v6\" ]; then\n  chain ip6tables\n  reject ip6tables '2001:db8::/32'\nfi\n") || strings.Contains(v6, "chain iptables\n") {
		t.Errorf("IPv6 CIDRs alone (canonical, behind the kernel check):\n%s", v6)
	}
	hosts := egressScript(EgressConfig{Enabled: true, AgentUID: 4242, Hosts: []string{"api.stripe.com"}})
	if !strings.Contains(hosts, "chain iptables\n") || !strings.Contains(hosts, "  chain ip6tables\n") ||
		!strings.Contains(hosts, "reject_host 'api.stripe.com.'\n") || !strings.Contains(hosts, "uid='4242'\n") {
		t.Errorf("host names:\n%s", hosts)
	}
	if got := shellQuote(`a'b`); got != `'a'\''b'` {
		t.Errorf("shellQuote: %s", got)
	}
}
