package inject

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
)

// Capabilities an agent container may not add when egress is closed, on
// top of forbiddenCaps (which already has NET_ADMIN and ALL): with them a
// process could leave the agent's UID (SETUID, SETGID) or send packets
// that netfilter never sees (NET_RAW: packet sockets).
var egressForbiddenCaps = []string{"NET_RAW", "SETUID", "SETGID"}

// Resolver options a pod may set while host names are closed: none of
// them changes which addresses a fully qualified name resolves to.
var harmlessDNSOptions = []string{"ndots", "timeout", "attempts", "edns0", "single-request", "single-request-reopen", "use-vc", "trust-ad"}

// egressRefusals are the reasons the egress rules would not hold for pod:
// they match the agent's UID, so every agent container (init and
// ephemeral ones too) must run as exactly that UID, non-root, unable to
// gain privileges or the capabilities that leave it; and the closed host
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
	// runAsNonRoot is required with or without closed egress (preflight).
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		out = append(out, fmt.Sprintf("%s does not set allowPrivilegeEscalation: false: a setuid program could leave UID %d, for which egress is closed", at, uid))
	}
	if sc.Capabilities != nil {
		for _, cp := range sc.Capabilities.Add {
			if slices.Contains(egressForbiddenCaps, strings.TrimPrefix(strings.ToUpper(string(cp)), "CAP_")) {
				out = append(out, fmt.Sprintf("%s adds capability %s: with it the agent could get around the egress rules for UID %d", at, cp, uid))
			}
		}
	}
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

// asBuilt compares a stored container with the one built, once the API
// server's defaults for fields the injector leaves unset are taken out.
// Resources are not compared: a LimitRange's defaults may be filled in
// when the in-tree admission plugins run again after the patch, and they
// open no way around the rules.
func asBuilt(got, want corev1.Container) bool {
	got.Resources = want.Resources
	if want.TerminationMessagePath == "" && got.TerminationMessagePath == corev1.TerminationMessagePathDefault {
		got.TerminationMessagePath = ""
	}
	if want.TerminationMessagePolicy == "" && got.TerminationMessagePolicy == corev1.TerminationMessageReadFile {
		got.TerminationMessagePolicy = ""
	}
	if want.ImagePullPolicy == "" {
		got.ImagePullPolicy = "" // defaulted from the image's tag
	}
	return apiequality.Semantic.DeepEqual(got, want)
}
