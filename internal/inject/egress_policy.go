package inject

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Resolver options a pod may set while host names are closed: none of
// them changes which addresses a fully qualified name resolves to.
var harmlessDNSOptions = []string{"ndots", "timeout", "attempts", "edns0", "single-request", "single-request-reopen", "use-vc", "trust-ad"}

// egressRefusals are the reasons the egress rules would not hold for pod:
// they match the agent's UID, so every agent container (init and
// ephemeral ones too) must run as exactly that UID (non-root, without
// privilege escalation and within the capability allowlist, as in every
// mode: agentPodRefusals); and the closed host
// names are resolved inside the pod, so the pod may not steer how.
func egressRefusals(pod *corev1.Pod, cfg Config) []string {
	e := cfg.Egress
	if !e.Enabled {
		return nil
	}
	var out []string
	if pod.Spec.OS != nil && pod.Spec.OS.Name != corev1.Linux {
		out = append(out, fmt.Sprintf("spec.os.name is %s: the egress rules are Linux iptables rules", pod.Spec.OS.Name))
	}
	psc := pod.Spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	for _, c := range containers(pod) {
		if ours(c.name) && c.init {
			continue // the injected containers: checked as built (Guarded)
		}
		out = append(out, uidRefusals(c, psc, e.AgentUID)...)
	}
	return append(out, resolverRefusals(pod, e)...)
}

// uidRefusals: c runs as uid, and nothing in it can become another UID.
func uidRefusals(c view, psc *corev1.PodSecurityContext, uid int64) []string {
	sc := c.sc
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	at := c.field + " (" + c.name + ")"
	var out []string
	switch user := first(sc.RunAsUser, psc.RunAsUser); {
	case user == nil:
		out = append(out, fmt.Sprintf("%s sets no runAsUser, nor does the pod: it would run as its image's user, and the egress rules match UID %d only", at, uid))
	case *user != uid:
		out = append(out, fmt.Sprintf("%s runs as UID %d: the egress rules match the agent's UID %d only", at, *user, uid))
	}
	// runAsNonRoot, allowPrivilegeEscalation: false and the capability
	// allowlist (no SETUID, SETGID or NET_RAW: leaving the UID, packet
	// sockets that netfilter never sees) hold in every mode
	// (agentPodRefusals).
	return out
}

// resolverRefusals: the init container resolves the closed host names
// with the pod's resolver, so a pod that picks its own name servers or
// resolver options would choose which addresses get closed. The names are
// looked up fully qualified (search domains and /etc/hosts do not apply),
// but a hostAliases entry for one is refused too: it says the pod expects
// the rail elsewhere.
func resolverRefusals(pod *corev1.Pod, e EgressConfig) []string {
	if len(e.Hosts) == 0 {
		return nil
	}
	var out []string
	for i, a := range pod.Spec.HostAliases {
		for _, h := range a.Hostnames {
			if slices.Contains(e.Hosts, strings.TrimSuffix(strings.ToLower(h), ".")) {
				out = append(out, fmt.Sprintf("spec.hostAliases[%d] maps %s, a closed rail host, to %s: the pod may not choose where a closed host resolves", i, h, a.IP))
			}
		}
	}
	// The resolver itself the pod may not choose in any mode (resolvesRefusals).
	return out
}

func first[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

// egressGuarded: with egress closed, the first init container is the
// egress container exactly as the injector builds it (and no other has
// its name); without, no container has it.
func egressGuarded(pod *corev1.Pod, cfg Config) []string {
	n := 0
	for _, c := range containers(pod) {
		if c.name == EgressContainer {
			n++
		}
	}
	if !cfg.Egress.Enabled {
		if n > 0 {
			return []string{fmt.Sprintf("a container is named %s, but egress is not closed", EgressContainer)}
		}
		return nil
	}
	inits := pod.Spec.InitContainers
	switch {
	case len(inits) == 0 || inits[0].Name != EgressContainer:
		return []string{fmt.Sprintf("the first init container is not %s, which closes the agent's egress", EgressContainer)}
	case n > 1:
		return []string{fmt.Sprintf("%d containers are named %s", n, EgressContainer)}
	case !asBuilt(inits[0], egressContainer(cfg)):
		return []string{fmt.Sprintf("%s is not the container the injector builds", EgressContainer)}
	}
	var out []string
	vols := volumeMap(pod)
	for _, name := range []string{XtablesVolume, NoTokenVolume} {
		if v, ok := vols[name]; !ok || v.EmptyDir == nil {
			out = append(out, fmt.Sprintf("volume %s is not an emptyDir", name))
		}
	}
	return out
}
