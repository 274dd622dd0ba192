package inject

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestEveryModeRefusesEscalationAndExtraCapabilities: with egress open or
// closed, an agent container (regular, init or ephemeral) that does not
// set allowPrivilegeEscalation: false is refused (unset is true: a setuid
// or file-capability program in its image would make it root again, past
// runAsNonRoot, and root could rewrite the pod's /etc/hosts), and so is
// one adding any capability but NET_BIND_SERVICE, each named (found by an
// attacker's-eye review: unset escalation was injected, and capabilities
// were a denylist that let SYS_TIME, SYS_RAWIO, NET_RAW and others pass).
func TestEveryModeRefusesEscalationAndExtraCapabilities(t *testing.T) {
	nonRoot := func() *corev1.Pod {
		p := hardenedAgentPod()
		p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr(true)}
		return p
	}
	// Each kind of agent container, as a function of the pod.
	kinds := []struct {
		name, field string
		sc          func(p *corev1.Pod) **corev1.SecurityContext
	}{
		{"regular", "spec.containers[0] (agent)", func(p *corev1.Pod) **corev1.SecurityContext { return &p.Spec.Containers[0].SecurityContext }},
		{"init", "spec.initContainers[0] (setup)", func(p *corev1.Pod) **corev1.SecurityContext { return &p.Spec.InitContainers[0].SecurityContext }},
		{"ephemeral", "spec.ephemeralContainers[0] (debug)", func(p *corev1.Pod) **corev1.SecurityContext {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", Image: "registry.example/debug:1", SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false)}}}}
			return &p.Spec.EphemeralContainers[0].SecurityContext
		}},
	}
	type edit struct {
		name string
		sc   func(sc **corev1.SecurityContext)
		want string // "" if admitted
	}
	edits := []edit{
		{"no security context", func(sc **corev1.SecurityContext) { *sc = nil }, "does not set allowPrivilegeEscalation: false (it is unset, which is true)"},
		{"escalation unset", func(sc **corev1.SecurityContext) { (*sc).AllowPrivilegeEscalation = nil }, "does not set allowPrivilegeEscalation: false (it is unset, which is true)"},
		{"escalation true", func(sc **corev1.SecurityContext) { (*sc).AllowPrivilegeEscalation = ptr(true) }, "does not set allowPrivilegeEscalation: false (it is true)"},
		{"adds NET_BIND_SERVICE", func(sc **corev1.SecurityContext) {
			(*sc).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}, Drop: []corev1.Capability{"ALL"}}
		}, ""},
		{"adds CAP_NET_BIND_SERVICE", func(sc **corev1.SecurityContext) {
			(*sc).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"CAP_NET_BIND_SERVICE"}}
		}, ""},
	}
	for _, cp := range []string{"SYS_TIME", "SYS_RAWIO", "SYS_BOOT", "MAC_ADMIN", "IPC_OWNER", "PERFMON", "SYSLOG", "NET_RAW",
		"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETPCAP", "SYS_PTRACE", "sys_time", "CAP_SYS_TIME", "ALL", "NOT_A_CAPABILITY"} {
		edits = append(edits, edit{"adds " + cp, func(sc **corev1.SecurityContext) {
			(*sc).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE", corev1.Capability(cp)}}
		}, fmt.Sprintf("adds capability %s: an agent container may add NET_BIND_SERVICE alone", cp)})
	}
	cidrs := egressTestConfig()
	cidrs.Egress.Hosts = nil
	for _, mode := range []struct {
		name string
		cfg  Config
		base func() *corev1.Pod
	}{{"open egress", testConfig(), nonRoot}, {"egress closed", cidrs, hardenedAgentPod}} {
		t.Run(mode.name, func(t *testing.T) {
			if resp := mutatePod(t, mode.base(), mode.cfg); !resp.Allowed || len(resp.Patch) == 0 {
				t.Fatalf("the pod is not injected: %+v", resp.Result)
			}
			for _, k := range kinds {
				for _, e := range edits {
					t.Run(k.name+"/"+e.name, func(t *testing.T) {
						p := mode.base()
						e.sc(k.sc(p))
						resp := mutatePod(t, p, mode.cfg)
						switch {
						case e.want == "" && k.name != "ephemeral" && (!resp.Allowed || len(resp.Patch) == 0):
							t.Fatalf("not injected: %+v", resp.Result)
						case e.want != "" && (resp.Allowed || resp.Result == nil || resp.Result.Code != 403 ||
							!strings.Contains(resp.Result.Message, k.field+" "+e.want)):
							t.Fatalf("want a refusal saying %q, got allowed=%v %+v", k.field+" "+e.want, resp.Allowed, resp.Result)
						}
					})
				}
			}
		})
	}
}

// TestEveryModeRefusesAnUnconfinedAgent: a pod or agent container that
// takes itself out of the confinement every container has by default —
// seccomp or AppArmor Unconfined (field or annotation), an SELinux type,
// user or role of its own, a Windows HostProcess container, an unmasked
// /proc — is refused with egress open or closed, each named; the
// confinements a cluster offers (RuntimeDefault, Localhost, container_t)
// are injected (found by an attacker's-eye review: they were admitted).
func TestEveryModeRefusesAnUnconfinedAgent(t *testing.T) {
	unmasked, dflt := corev1.UnmaskedProcMount, corev1.DefaultProcMount
	local := "profiles/agent.json"
	type edit struct {
		name string
		pod  func(p *corev1.Pod)
		want string // "" if injected
	}
	agent := func(f func(sc *corev1.SecurityContext)) func(p *corev1.Pod) {
		return func(p *corev1.Pod) { f(p.Spec.Containers[0].SecurityContext) }
	}
	setup := func(f func(sc *corev1.SecurityContext)) func(p *corev1.Pod) {
		return func(p *corev1.Pod) { f(p.Spec.InitContainers[0].SecurityContext) }
	}
	pod := func(f func(sc *corev1.PodSecurityContext)) func(p *corev1.Pod) {
		return func(p *corev1.Pod) { f(p.Spec.SecurityContext) }
	}
	const c0, i0, ps = "spec.containers[0] (agent): securityContext.", "spec.initContainers[0] (setup): securityContext.", "spec.securityContext."
	edits := []edit{
		{"agent seccomp Unconfined", agent(func(sc *corev1.SecurityContext) {
			sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}), c0 + "seccompProfile is Unconfined"},
		{"init seccomp Unconfined", setup(func(sc *corev1.SecurityContext) {
			sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}), i0 + "seccompProfile is Unconfined"},
		{"pod seccomp Unconfined", pod(func(sc *corev1.PodSecurityContext) {
			sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}), ps + "seccompProfile is Unconfined"},
		{"agent AppArmor Unconfined", agent(func(sc *corev1.SecurityContext) {
			sc.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		}), c0 + "appArmorProfile is Unconfined"},
		{"pod AppArmor Unconfined", pod(func(sc *corev1.PodSecurityContext) {
			sc.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		}), ps + "appArmorProfile is Unconfined"},
		{"AppArmor annotation unconfined", func(p *corev1.Pod) {
			p.Annotations = map[string]string{appArmorAnnotation + "agent": "unconfined"}
		}, `annotation ` + appArmorAnnotation + `agent is "unconfined"`},
		{"agent SELinux spc_t", agent(func(sc *corev1.SecurityContext) {
			sc.SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"}
		}), c0 + `seLinuxOptions.type is "spc_t"`},
		{"pod SELinux unconfined_t", pod(func(sc *corev1.PodSecurityContext) {
			sc.SELinuxOptions = &corev1.SELinuxOptions{Type: "unconfined_t"}
		}), ps + `seLinuxOptions.type is "unconfined_t"`},
		{"agent SELinux user", agent(func(sc *corev1.SecurityContext) {
			sc.SELinuxOptions = &corev1.SELinuxOptions{User: "system_u"}
		}), c0 + "seLinuxOptions sets a user or role"},
		{"agent HostProcess", agent(func(sc *corev1.SecurityContext) {
			sc.WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: ptr(true)}
		}), c0 + "windowsOptions.hostProcess is true"},
		{"pod HostProcess", pod(func(sc *corev1.PodSecurityContext) {
			sc.WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: ptr(true)}
		}), ps + "windowsOptions.hostProcess is true"},
		{"agent procMount Unmasked", agent(func(sc *corev1.SecurityContext) { sc.ProcMount = &unmasked }), c0 + "procMount is Unmasked"},
		{"init procMount Unmasked", setup(func(sc *corev1.SecurityContext) { sc.ProcMount = &unmasked }), i0 + "procMount is Unmasked"},

		{"agent seccomp RuntimeDefault", agent(func(sc *corev1.SecurityContext) {
			sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
		}), ""},
		{"pod seccomp Localhost", pod(func(sc *corev1.PodSecurityContext) {
			sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &local}
		}), ""},
		{"agent AppArmor RuntimeDefault", agent(func(sc *corev1.SecurityContext) {
			sc.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}
		}), ""},
		{"AppArmor annotation runtime/default", func(p *corev1.Pod) {
			p.Annotations = map[string]string{appArmorAnnotation + "agent": "runtime/default"}
		}, ""},
		{"agent SELinux container_t with a level", agent(func(sc *corev1.SecurityContext) {
			sc.SELinuxOptions = &corev1.SELinuxOptions{Type: "container_t", Level: "s0:c123,c456"}
		}), ""},
		{"agent procMount Default", agent(func(sc *corev1.SecurityContext) { sc.ProcMount = &dflt }), ""},
	}
	cidrs := egressTestConfig()
	cidrs.Egress.Hosts = nil
	for _, mode := range []struct {
		name string
		cfg  Config
	}{{"open egress", testConfig()}, {"egress closed", cidrs}} {
		for _, e := range edits {
			t.Run(mode.name+"/"+e.name, func(t *testing.T) {
				p := hardenedAgentPod()
				e.pod(p)
				resp := mutatePod(t, p, mode.cfg)
				switch {
				case e.want == "" && (!resp.Allowed || len(resp.Patch) == 0):
					t.Fatalf("not injected: %+v", resp.Result)
				case e.want != "" && (resp.Allowed || resp.Result == nil || resp.Result.Code != 403 || !strings.Contains(resp.Result.Message, e.want)):
					t.Fatalf("want a refusal saying %q, got allowed=%v %+v", e.want, resp.Allowed, resp.Result)
				}
			})
		}
	}
}
