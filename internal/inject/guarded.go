package inject

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Guarded says whether pod is a guarded agent pod under cfg: the
// invariants the injection exists for, checked on the pod the API server
// would store. Mutate checks every patched pod with it before answering
// (and a pod that arrives already marked injected), so a bug in the patch
// refuses a pod instead of admitting it unguarded.
//
//   - Countersign and Envoy are native sidecars (init containers with
//     restartPolicy Always, Countersign first), with cfg's images, hardened;
//   - the socket volume is an emptyDir mounted by those two only;
//   - the rail keys and the ledger URL are readable by Countersign only;
//   - no agent container is privileged, escalates, adds a dangerous
//     capability or mounts a hostPath; the pod shares no host namespace
//     and not its process namespace;
//   - every agent container (init and regular) has the base URLs;
//   - with egress closed, the first init container is the egress
//     container as built, and every agent container runs as the agent's
//     UID with no way to leave it (egressRefusals).
func Guarded(pod *corev1.Pod, cfg Config) error {
	bad := append(podRefusals(pod), egressGuarded(pod, cfg)...)
	bad = append(bad, egressRefusals(pod, cfg)...)
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }

	cs := slices.IndexFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == CountersignContainer })
	ev := slices.IndexFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == EnvoyContainer })
	if cs < 0 || ev < 0 {
		fail("the %s and %s sidecars are not both init containers", CountersignContainer, EnvoyContainer)
		return refusal(bad)
	}
	if cs > ev {
		fail("%s starts after %s", CountersignContainer, EnvoyContainer)
	}
	for _, i := range []int{cs, ev} {
		c := pod.Spec.InitContainers[i]
		if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			fail("%s is not a native sidecar (restartPolicy: Always)", c.Name)
		}
		if want := map[int]string{cs: cfg.CountersignImage, ev: cfg.EnvoyImage}[i]; c.Image != want {
			fail("%s runs image %q, not %q", c.Name, c.Image, want)
		}
		if err := isHardened(c.SecurityContext); err != nil {
			fail("%s: %v", c.Name, err)
		}
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == NoTokenVolume && m.MountPath == serviceAccountDir && m.ReadOnly
		}) {
			fail("%s has no empty directory at %s: the pod's service account token would be mounted there", c.Name, serviceAccountDir)
		}
	}
	if slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool { return ours(c.Name) }) {
		fail("a regular container has a sidecar's name")
	}

	vols, protected := volumeMap(pod), protectedSecrets(cfg)
	for _, name := range []string{SocketVolume, NoTokenVolume} {
		if v, ok := vols[name]; !ok || v.EmptyDir == nil {
			fail("volume %s is not an emptyDir", name)
		}
	}
	for _, c := range containers(pod) {
		if ours(c.name) && c.init {
			if c.name == CountersignContainer || c.name == EgressContainer {
				continue // checked above, and by egressGuarded
			}
			// Envoy holds no secret: only the socket, its bootstrap, and
			// the empty directory where a token would go.
			for _, m := range c.mount {
				if m.Name != SocketVolume && m.Name != EnvoyConfigVolume && m.Name != NoTokenVolume {
					fail("%s mounts %s", c.name, m.Name)
				}
			}

			if len(c.env) > 0 || len(c.from) > 0 {
				fail("%s has environment variables", c.name)
			}
			continue
		}
		bad = append(bad, agentRefusals(c, vols, protected)...)
		if strings.HasPrefix(c.field, "spec.ephemeralContainers") {
			continue
		}
		for _, want := range cfg.BaseURLs {
			i := slices.IndexFunc(c.env, func(e corev1.EnvVar) bool { return e.Name == want.Name })
			if i < 0 || c.env[i].Value != want.Value || c.env[i].ValueFrom != nil ||
				slices.ContainsFunc(c.env[i+1:], func(e corev1.EnvVar) bool { return e.Name == want.Name }) {
				fail("%s (%s) does not have %s=%s", c.field, c.name, want.Name, want.Value)
			}
		}
	}
	for _, h := range aliasHosts(cfg) {
		if !slices.ContainsFunc(pod.Spec.HostAliases, func(a corev1.HostAlias) bool { return a.IP == "127.0.0.1" && slices.Contains(a.Hostnames, h) }) {
			fail("host %s is not aliased to 127.0.0.1", h)
		}
	}
	return refusal(bad)
}

func isHardened(sc *corev1.SecurityContext) error {
	switch {
	case sc == nil:
		return errors.New("no security context")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0:
		return errors.New("may run as root")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		return errors.New("root filesystem is writable")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || (sc.Privileged != nil && *sc.Privileged):
		return errors.New("may gain privileges")
	case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0:
		return errors.New("does not drop every capability")
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		return errors.New("seccomp profile is not RuntimeDefault")
	}
	return nil
}

func refusal(reasons []string) error {
	if len(reasons) == 0 {
		return nil
	}
	return errors.New(strings.Join(reasons, "; "))
}
