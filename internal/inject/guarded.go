package inject

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
)

// Guarded says whether pod is a guarded agent pod under cfg: the pod that
// injecting it would make, checked on the pod the API server would store.
// Mutate checks every patched pod with it before answering, so a bug in
// the patch refuses a pod instead of admitting it unguarded; and it is all
// that admits a pod arriving already marked injected (the second pass of a
// reinvocation, which is a CREATE too) and an UPDATE of a guarded pod, so
// it holds such a pod to everything injection would:
//
//   - the init containers begin with the injector's, in the order patch
//     puts them, and nothing of the pod's own before them (leadRefusal);
//   - Countersign and Envoy are native sidecars (init containers with
//     restartPolicy Always, Countersign first), each once and exactly as
//     build(cfg) makes it (its image, command, arguments, environment,
//     mounts, ports, probes and security context; resources and the API
//     server's defaults aside): a sidecar of the pod's own choosing would
//     hold the rail keys, or decide from a ledger of the pod's choosing;
//   - every volume named like the injector's is one build(cfg) makes, with
//     its source (the socket volume an emptyDir, the ConfigMaps and Secrets
//     the configured ones), and each is there once;
//   - the rest of the pod passes every whole-pod check of injection
//     (agentPodRefusals): no agent container privileged, escalating,
//     adding a capability beyond the allowlist, running as root, mounting
//     a hostPath or anything of ours, claiming a sidecar's port or reading
//     a Secret only Countersign may read; no other volume holding one; no
//     host namespace, no shared process namespace, no hostAliases entry or
//     resolver of the pod's choosing;
//   - every agent container (init and regular) has the base URLs, and
//     their hosts are aliased to 127.0.0.1;
//   - with egress closed, the first init container is the egress
//     container as built, and every agent container runs as the agent's
//     UID with no way to leave it (egressRefusals).
func Guarded(pod *corev1.Pod, cfg Config) error {
	in := build(cfg)
	bad := agentPodRefusals(pod, cfg, true)
	bad = append(bad, egressGuarded(pod, cfg)...)
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }

	cs := slices.IndexFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == CountersignContainer })
	ev := slices.IndexFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == EnvoyContainer })
	if cs < 0 || ev < 0 {
		fail("the %s and %s sidecars are not both init containers", CountersignContainer, EnvoyContainer)
		return refusal(bad)
	}
	if why := leadRefusal(pod.Spec.InitContainers, cfg); why != "" {
		fail("%s", why)
	}
	for _, name := range []string{CountersignContainer, EnvoyContainer} {
		if n := len(slices.DeleteFunc(containers(pod), func(c view) bool { return c.name != name })); n > 1 {
			fail("%d containers are named %s", n, name)
		}
	}
	for _, i := range []int{cs, ev} {
		c := pod.Spec.InitContainers[i]
		want := map[int]corev1.Container{cs: in.countersign, ev: in.envoy}[i]
		if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			fail("%s is not a native sidecar (restartPolicy: Always)", c.Name)
		}
		if c.Image != want.Image {
			fail("%s runs image %q, not %q", c.Name, c.Image, want.Image)
		}
		if err := isHardened(c.SecurityContext); err != nil {
			fail("%s: %v", c.Name, err)
		}
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == NoTokenVolume && m.MountPath == serviceAccountDir && m.ReadOnly
		}) {
			fail("%s has no empty directory at %s: the pod's service account token would be mounted there", c.Name, serviceAccountDir)
		}
		// The image and restart policy are reported above.
		c.Image, c.RestartPolicy = want.Image, want.RestartPolicy
		if diff := builtDiff(c, want); len(diff) > 0 {
			fail("%s is not the container the injector builds: its %s differ", c.Name, strings.Join(diff, ", "))
		}
	}

	// The injector's volumes: each once, with the source it builds.
	built := map[string]corev1.Volume{}
	for _, v := range in.volumes {
		built[v.Name] = v
	}
	seen := map[string]int{}
	for i, v := range pod.Spec.Volumes {
		if !ourVolume(v.Name) {
			continue
		}
		seen[v.Name]++
		want, ok := built[v.Name]
		switch {
		case !ok:
			fail("spec.volumes[%d] is named %q, the name of an injected volume, but the injector builds none of that name", i, v.Name)
		case !apiequality.Semantic.DeepEqual(volumeDefaults(v.VolumeSource), volumeDefaults(want.VolumeSource)):
			fail("volume %s does not have the source the injector builds (%s)", v.Name, volumeSourceName(want.VolumeSource))
		}
	}
	for _, v := range in.volumes {
		if seen[v.Name] != 1 {
			fail("volume %s is there %d times, not once", v.Name, seen[v.Name])
		}
	}

	for _, c := range containers(pod) {
		if (ours(c.name) && c.init) || strings.HasPrefix(c.field, "spec.ephemeralContainers") {
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

// leadRefusal says why inits do not begin exactly as patch makes them
// begin ([egress,] countersign, envoy), "" if they do. Init containers
// start in order, and the kubelet starts the next only once a native
// sidecar has started: a container of the pod's placed ahead of
// Countersign (found by an attacker's-eye review) would run first and
// could bind the sidecars' ports, which it need not declare (:15080, the
// owner console and REST API; Envoy's 127.0.0.1:15001), so the real
// sidecars would fail to bind and whoever port-forwards to the pod would
// talk to the agent; ahead of the egress container it would run before
// egress is closed.
func leadRefusal(inits []corev1.Container, cfg Config) string {
	want := []string{CountersignContainer, EnvoyContainer}
	if cfg.Egress.Enabled {
		want = append([]string{EgressContainer}, want...)
	}
	var got []string
	for _, c := range inits[:min(len(want), len(inits))] {
		got = append(got, c.Name)
	}
	if slices.Equal(got, want) {
		return ""
	}
	return fmt.Sprintf("the init containers begin [%s], not [%s]: the injector's containers start first, in that order, "+
		"so that no container of the pod's own runs before them (one could bind the sidecars' ports, or run before egress is closed)",
		strings.Join(got, ", "), strings.Join(want, ", "))
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
