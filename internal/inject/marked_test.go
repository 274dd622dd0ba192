package inject

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// container is the index of the container named name in cs (-1 if none).
func container(cs []corev1.Container, name string) int {
	return slices.IndexFunc(cs, func(c corev1.Container) bool { return c.Name == name })
}

// setEnv sets (or adds) a variable of the init container named name.
func setEnv(p *corev1.Pod, name string, e corev1.EnvVar) {
	c := &p.Spec.InitContainers[container(p.Spec.InitContainers, name)]
	if i := slices.IndexFunc(c.Env, func(x corev1.EnvVar) bool { return x.Name == e.Name }); i >= 0 {
		c.Env[i] = e
		return
	}
	c.Env = append(c.Env, e)
}

func setConfigMap(p *corev1.Pod, volume, configMap string) {
	for i := range p.Spec.Volumes {
		if p.Spec.Volumes[i].Name == volume {
			p.Spec.Volumes[i].ConfigMap.Name = configMap
		}
	}
}

// forgedSidecars are the ways a pod that arrives marked injected (or an
// update) could rewire an injected pod around the guard, each of which
// Guarded must refuse: the sidecars, their volumes, and what the whole-pod
// checks of injection refuse.
func forgedSidecars() map[string]func(p *corev1.Pod) {
	return map[string]func(p *corev1.Pod){
		"countersign serves ext_authz on TCP with the unsafe override (an ALLOW carries the rail key)": func(p *corev1.Pod) {
			setEnv(p, CountersignContainer, corev1.EnvVar{Name: "COUNTERSIGN_ENVOY_ADDR", Value: "0.0.0.0:9911"})
			setEnv(p, CountersignContainer, corev1.EnvVar{Name: "COUNTERSIGN_UNSAFE_ENVOY_TCP_EXPOSES_RAIL_KEYS", Value: "true"})
		},
		"countersign's ledger URL is the pod's": func(p *corev1.Pod) {
			setEnv(p, CountersignContainer, corev1.EnvVar{Name: "COUNTERSIGN_DATABASE_URL", Value: "postgres://evil@10.0.0.66:5432/ledger"})
		},
		"countersign runs a command of the pod's": func(p *corev1.Pod) {
			p.Spec.InitContainers[container(p.Spec.InitContainers, CountersignContainer)].Command = []string{"/bin/sh", "-c", "cat /var/run/secrets/countersign/rails/*/key"}
		},
		"envoy runs an inline bootstrap of the pod's": func(p *corev1.Pod) {
			p.Spec.InitContainers[container(p.Spec.InitContainers, EnvoyContainer)].Args = []string{"--config-yaml", "{static_resources: {}}"}
		},
		"the rails ConfigMap is another": func(p *corev1.Pod) { setConfigMap(p, RailsVolume, "attacker-rails") },
		"the Envoy bootstrap ConfigMap is another": func(p *corev1.Pod) {
			setConfigMap(p, EnvoyConfigVolume, "attacker-envoy")
		},
		"a rail key volume holds another Secret": func(p *corev1.Pod) {
			for i := range p.Spec.Volumes {
				if p.Spec.Volumes[i].Name == railKeyVolume+"0" {
					p.Spec.Volumes[i].Secret.SecretName = "attacker-key"
				}
			}
		},
		"countersign's socket is on a volume the agent mounts": func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
			cs := &p.Spec.InitContainers[container(p.Spec.InitContainers, CountersignContainer)]
			for j := range cs.VolumeMounts {
				if cs.VolumeMounts[j].Name == SocketVolume {
					cs.VolumeMounts[j].Name = "shared"
				}
			}
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "shared", MountPath: SocketDir})
		},
		"a second volume named like the sockets'": func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: SocketVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		},
		"a hostAliases entry steers the ledger's and the rail's hosts": func(p *corev1.Pod) {
			p.Spec.HostAliases = append(p.Spec.HostAliases, corev1.HostAlias{IP: "10.0.0.66", Hostnames: []string{"pgbouncer.countersign.svc.cluster.local", "api.stripe.com"}})
		},
		"the pod picks its own name server": func(p *corev1.Pod) {
			p.Spec.DNSPolicy = corev1.DNSNone
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"10.0.0.66"}}
		},
		"the agent may run as root": func(p *corev1.Pod) {
			p.Spec.SecurityContext.RunAsNonRoot = nil
			for i := range p.Spec.Containers {
				if sc := p.Spec.Containers[i].SecurityContext; sc != nil {
					sc.RunAsNonRoot = nil
				}
			}
		},
		"the agent may escalate": func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil },
		"the agent adds SYS_TIME": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"SYS_TIME"}}
		},
		"the agent claims Envoy's port": func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{ContainerPort: EnvoyPort})
		},
		// Found by a review: the kubelet writes "<pod IP> <host name>" into
		// the pod's /etc/hosts, so a hostnameOverride of the ledger's name
		// sends countersign to the agent's own address.
		"countersign no longer refuses what the agent can steer (in-agent-pod off)": func(p *corev1.Pod) {
			setEnv(p, CountersignContainer, corev1.EnvVar{Name: InAgentPodEnv, Value: "false"})
		},
		"countersign without the in-agent-pod setting": func(p *corev1.Pod) {
			c := &p.Spec.InitContainers[container(p.Spec.InitContainers, CountersignContainer)]
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == InAgentPodEnv })
		},
		"the pod's hostnameOverride is the ledger's name": func(p *corev1.Pod) {
			p.Spec.HostnameOverride = ptr("pgbouncer.countersign.svc.cluster.local")
		},
		"the pod's host name is its FQDN": func(p *corev1.Pod) {
			p.Spec.Hostname, p.Spec.Subdomain, p.Spec.SetHostnameAsFQDN = "agent-0", "agents", ptr(true)
		},
		// Found by a review: the agent, which shares the pod's network,
		// held every connection of the HTTP listener, so HTTP probes timed
		// out and the kubelet restarted Countersign in a loop.
		"countersign's liveness probe is back on the HTTP port": func(p *corev1.Pod) {
			c := &p.Spec.InitContainers[container(p.Spec.InitContainers, CountersignContainer)]
			c.LivenessProbe.ProbeHandler = corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString(httpPortName)}}
		},
		"countersign's startup probe asks the HTTP port": func(p *corev1.Pod) {
			c := &p.Spec.InitContainers[container(p.Spec.InitContainers, CountersignContainer)]
			c.StartupProbe.ProbeHandler = corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString(httpPortName)}}
		},
		"countersign's startup probe runs another command": func(p *corev1.Pod) {
			c := &p.Spec.InitContainers[container(p.Spec.InitContainers, CountersignContainer)]
			c.StartupProbe.Exec.Command = []string{"/bin/true"}
		},
		"countersign's startup probe only asks whether it lives": func(p *corev1.Pod) {
			c := &p.Spec.InitContainers[container(p.Spec.InitContainers, CountersignContainer)]
			c.StartupProbe.Exec.Command = []string{"/proc/1/exe", "probe"}
		},
		"countersign's liveness probe asks another server": func(p *corev1.Pod) {
			c := &p.Spec.InitContainers[container(p.Spec.InitContainers, CountersignContainer)]
			c.LivenessProbe.Exec.Command = append(c.LivenessProbe.Exec.Command, "--server", "127.0.0.1:9191")
		},
		// Found by a review: init containers start in order, so one of the
		// pod's ahead of a sidecar runs first and can bind the sidecar's
		// ports (:15080, the owner console; 127.0.0.1:15001) undeclared;
		// the sidecar crash-loops and a port-forward reaches the agent.
		"a native sidecar of the pod's starts before countersign": func(p *corev1.Pod) {
			insertAgentInit(p, container(p.Spec.InitContainers, CountersignContainer), true)
		},
		"an init container of the pod's runs before countersign": func(p *corev1.Pod) {
			insertAgentInit(p, container(p.Spec.InitContainers, CountersignContainer), false)
		},
		"a native sidecar of the pod's starts before envoy": func(p *corev1.Pod) {
			insertAgentInit(p, container(p.Spec.InitContainers, EnvoyContainer), true)
		},
		"a native sidecar of the pod's starts first of all": func(p *corev1.Pod) { insertAgentInit(p, 0, true) },
		"an init container of the pod's runs first of all":  func(p *corev1.Pod) { insertAgentInit(p, 0, false) },
		"another volume holds the ledger URL's Secret": func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "db", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "countersign-database"}}})
		},
	}
}

// insertAgentInit puts a container of the agent's, otherwise admissible
// (the agent container's security context and base URLs, no declared
// port), among p's init containers at i: a native sidecar or a plain one.
func insertAgentInit(p *corev1.Pod, i int, native bool) {
	c := *p.Spec.Containers[0].DeepCopy()
	c.Name, c.Ports, c.RestartPolicy = "agent-early", nil, nil
	if native {
		c.RestartPolicy = ptr(corev1.ContainerRestartPolicyAlways)
	}
	p.Spec.InitContainers = slices.Insert(p.Spec.InitContainers, i, c)
}

// TestMarkedPodWithAContainerAheadOfTheSidecars: a pod that arrives marked
// (or is updated) with a container of its own ahead of the injector's is
// refused, saying how its init containers begin and how they must; the
// same pod with that container after the sidecars, where injection puts
// the pod's own, is admitted (so the refusal is the order, nothing else).
func TestMarkedPodWithAContainerAheadOfTheSidecars(t *testing.T) {
	for _, base := range guardedBases() {
		t.Run(base.name, func(t *testing.T) {
			injected := storedPod(t, base.name, base.cfg)
			want := "countersign, countersign-envoy]"
			if base.cfg.Egress.Enabled {
				want = "[countersign-egress, " + want
			} else {
				want = "[" + want
			}
			for _, native := range []bool{true, false} {
				lead := container(injected.Spec.InitContainers, EnvoyContainer) + 1
				for at := range lead + 1 {
					p := withAPIServerDefaults(injected)
					insertAgentInit(p, at, native)
					resp := mutatePod(t, p, base.cfg)
					order := names(p.Spec.InitContainers)
					if at == lead {
						if !resp.Allowed {
							t.Errorf("native=%v, init order %v: the pod's container after the sidecars is refused: %+v", native, order, resp.Result)
						}
						continue
					}
					if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, "the init containers begin [") ||
						!strings.Contains(resp.Result.Message, ", not "+want+": the injector's containers start first") {
						t.Errorf("native=%v, init order %v: want a refusal naming the order %s, got allowed=%v %+v", native, order, want, resp.Allowed, resp.Result)
					}
				}
			}
		})
	}
}

// withAPIServerDefaults is p as the API server stores it: the defaults it
// fills in on every container and volume, and resources a LimitRange
// gives the containers that set none.
func withAPIServerDefaults(p *corev1.Pod) *corev1.Pod {
	p = p.DeepCopy()
	all := []*corev1.Container{}
	for i := range p.Spec.InitContainers {
		all = append(all, &p.Spec.InitContainers[i])
	}
	for i := range p.Spec.Containers {
		all = append(all, &p.Spec.Containers[i])
	}
	for _, c := range all {
		containerDefaults(c)
		if c.ImagePullPolicy == "" {
			c.ImagePullPolicy = corev1.PullIfNotPresent
		}
		if c.Resources.Limits == nil {
			c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
		}
	}
	for i := range p.Spec.Volumes {
		p.Spec.Volumes[i].VolumeSource = volumeDefaults(p.Spec.Volumes[i].VolumeSource)
	}
	if p.Spec.DNSPolicy == "" {
		p.Spec.DNSPolicy = corev1.DNSClusterFirst
	}
	return p
}

// TestCreateOfAMarkedPod: a CREATE that arrives marked injected is the
// second pass of a reinvocation (still a CREATE: the API server calls the
// injector again once an in-tree plugin or another webhook changed the
// pod it patched) or a pod made to look injected. It is admitted
// unchanged only if it is exactly the pod injection makes, after the API
// server's defaults; every rewiring of it is refused with the reason
// (found by an attacker's-eye review: a forged pod with its own sidecars
// was admitted as it came).
func TestCreateOfAMarkedPod(t *testing.T) {
	for _, base := range guardedBases() {
		t.Run(base.name, func(t *testing.T) {
			injected := storedPod(t, base.name, base.cfg)
			for name, p := range map[string]*corev1.Pod{"as patched": injected, "after the API server's defaults": withAPIServerDefaults(injected)} {
				if resp := mutatePod(t, p, base.cfg); !resp.Allowed || len(resp.Patch) != 0 {
					t.Fatalf("%s: the second pass is not admitted unchanged: %+v", name, resp.Result)
				}
			}
			for name, edit := range forgedSidecars() {
				t.Run(name, func(t *testing.T) {
					p := withAPIServerDefaults(injected)
					edit(p)
					resp := mutatePod(t, p, base.cfg)
					const want = "it arrives marked countersign.io/status: injected, but it is not the pod the injector makes: "
					if resp.Allowed || resp.Result == nil || resp.Result.Code != 403 || !strings.Contains(resp.Result.Message, want) {
						t.Fatalf("want a refusal saying %q, got allowed=%v %+v", want, resp.Allowed, resp.Result)
					}
				})
			}
		})
	}
}

// TestCreateOfAMarkedPodWithH2CProbeDefaults: with the H2CContainerProbe
// gate on (Kubernetes 1.37), the API server stores httpGet.protocol: HTTP1
// on every probe and lifecycle hook that sets none (found by a review:
// every second pass of a reinvocation was refused while the countersign
// container's probes were httpGet). Its probes are exec now
// (TestInjectedProbesAreExecOverTheAPISocket), and a countersign container
// whose probes were put back on the HTTP port is refused even with the
// defaults the API server would store on them.
func TestCreateOfAMarkedPodWithH2CProbeDefaults(t *testing.T) {
	for _, base := range guardedBases() {
		t.Run(base.name, func(t *testing.T) {
			p := storedPod(t, base.name, base.cfg)
			if resp := mutatePod(t, p, base.cfg); !resp.Allowed || len(resp.Patch) != 0 {
				t.Fatalf("the second pass is not admitted unchanged: %+v", resp.Result)
			}
			c := &p.Spec.InitContainers[container(p.Spec.InitContainers, CountersignContainer)]
			for path, pr := range map[string]*corev1.Probe{"/readyz": c.StartupProbe, "/healthz": c.LivenessProbe} {
				pr.ProbeHandler = corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString(httpPortName),
					Scheme: corev1.URISchemeHTTP, Protocol: ptr(corev1.HTTPProtocolHTTP1)}}
			}
			if resp := mutatePod(t, p, base.cfg); resp.Allowed || !strings.Contains(resp.Result.Message, "livenessProbe, startupProbe differ") {
				t.Fatalf("probes over the HTTP port, which the agent can starve, are admitted: %+v", resp.Result)
			}
		})
	}
	// Lifecycle hooks get the same defaults (the injector builds none yet).
	want := build(testConfig()).countersign
	want.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/drain", Port: intstr.FromInt32(15080)}},
		PostStart: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(15080)}}}
	got := *want.DeepCopy()
	for _, h := range []*corev1.LifecycleHandler{got.Lifecycle.PreStop, got.Lifecycle.PostStart} {
		h.HTTPGet.Protocol, h.HTTPGet.Scheme = ptr(corev1.HTTPProtocolHTTP1), corev1.URISchemeHTTP
	}
	got.Lifecycle.PostStart.HTTPGet.Path = "/"
	if d := builtDiff(got, want); len(d) > 0 {
		t.Fatalf("the API server's lifecycle hook defaults differ: %v", d)
	}
	got.Lifecycle.PreStop.HTTPGet.Protocol = ptr(corev1.HTTPProtocolHTTP2)
	if d := builtDiff(got, want); !slices.Equal(d, []string{"lifecycle"}) {
		t.Fatalf("builtDiff = %v, want [lifecycle]", d)
	}
}

// TestInjectedProbesAreExecOverTheAPISocket: no probe of the injected
// sidecars goes through the pod's network, which the agent shares: the
// countersign container's run `countersign probe` (its own binary, as PID
// 1 of the container sees it) against COUNTERSIGN_GRPC_ADDR, a Unix socket
// on the volume only the sidecars mount. The API server's probe defaults
// are no difference.
func TestInjectedProbesAreExecOverTheAPISocket(t *testing.T) {
	for _, base := range guardedBases() {
		t.Run(base.name, func(t *testing.T) {
			b := build(base.cfg)
			all := []corev1.Container{b.countersign, b.envoy}
			if b.egress != nil {
				all = append(all, *b.egress)
			}
			for _, c := range all {
				for _, pr := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
					if pr != nil && pr.Exec == nil {
						t.Errorf("%s: a probe that is not exec: %+v", c.Name, pr.ProbeHandler)
					}
				}
			}
			cs := b.countersign
			if cs.StartupProbe == nil || cs.LivenessProbe == nil {
				t.Fatal("countersign has no startup or no liveness probe")
			}
			if got := cs.StartupProbe.Exec.Command; !slices.Equal(got, []string{"/proc/1/exe", "probe", "--ready"}) {
				t.Errorf("startup probe = %q", got)
			}
			if got := cs.LivenessProbe.Exec.Command; !slices.Equal(got, []string{"/proc/1/exe", "probe"}) {
				t.Errorf("liveness probe = %q", got)
			}
			if cs.StartupProbe.TimeoutSeconds != 2 || cs.LivenessProbe.TimeoutSeconds != 2 {
				t.Errorf("probe timeouts %d, %d: want 2 (the probe's own default timeout is 1.5s)", cs.StartupProbe.TimeoutSeconds, cs.LivenessProbe.TimeoutSeconds)
			}
			i := slices.IndexFunc(cs.Env, func(e corev1.EnvVar) bool { return e.Name == "COUNTERSIGN_GRPC_ADDR" })
			if i < 0 || cs.Env[i].Value != "unix:"+APISocket || !strings.HasPrefix(APISocket, SocketDir+"/") {
				t.Errorf("the probes' COUNTERSIGN_GRPC_ADDR is not a socket in %s: %+v", SocketDir, cs.Env)
			}
			if sc := cs.SecurityContext; sc == nil || sc.RunAsUser == nil || sc.RunAsGroup == nil || *sc.RunAsUser != *sc.RunAsGroup {
				t.Errorf("the probe's process and PID 1 must have one UID and GID: %+v", sc)
			}
			got := *cs.DeepCopy()
			containerDefaults(&got)
			if got.StartupProbe.SuccessThreshold != 1 || got.LivenessProbe.SuccessThreshold != 1 {
				t.Fatalf("defaults not filled in: %+v", got.StartupProbe)
			}
			if d := builtDiff(got, cs); len(d) > 0 {
				t.Fatalf("the API server's probe defaults differ: %v", d)
			}
		})
	}
}

// TestBuiltDiffNamesTheFields: a sidecar that is not as built is refused
// naming what differs, and the API server's defaults are no difference.
func TestBuiltDiffNamesTheFields(t *testing.T) {
	want := build(testConfig()).countersign
	got := *want.DeepCopy()
	containerDefaults(&got)
	got.Resources = corev1.ResourceRequirements{}
	if d := builtDiff(got, want); len(d) > 0 {
		t.Fatalf("the defaults and resources differ: %v", d)
	}
	got.Command = []string{"/bin/sh"}
	got.Env = got.Env[1:]
	if d := builtDiff(got, want); !slices.Equal(d, []string{"command", "env"}) {
		t.Fatalf("builtDiff = %v, want [command env]", d)
	}
}
