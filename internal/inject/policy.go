package inject

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Scope is how the webhook entry that called the injector selected the pod.
type Scope int

const (
	// ScopeNamespace is an entry whose namespaceSelector matched a namespace
	// labelled InjectKey=enabled, so every pod there is opted in unless it
	// opts out.
	ScopeNamespace Scope = iota
	// ScopePod is an entry over any other namespace: only a pod that opts
	// in itself (label or annotation InjectKey "true") is injected.
	ScopePod
)

// optIn reads the pod's own InjectKey label and annotation. A value other
// than true/enabled or false/disabled, or a label and an annotation that
// disagree, is an error: a typo must neither guard nor unguard silently.
func optIn(pod *corev1.Pod, scope Scope) (bool, string, error) {
	var votes []bool
	for _, src := range []struct {
		what string
		m    map[string]string
	}{{"label", pod.Labels}, {"annotation", pod.Annotations}} {
		v, ok := src.m[InjectKey]
		if !ok {
			continue
		}
		switch strings.ToLower(v) {
		case "true", "enabled":
			votes = append(votes, true)
		case "false", "disabled":
			votes = append(votes, false)
		default:
			return false, "", fmt.Errorf("%s %s is %q: use \"true\" to opt this pod in or \"false\" to opt it out", src.what, InjectKey, v)
		}
	}
	switch {
	case len(votes) == 2 && votes[0] != votes[1]:
		return false, "", fmt.Errorf("label and annotation %s disagree", InjectKey)
	case len(votes) > 0 && votes[0]:
		return true, "pod opted in", nil
	case len(votes) > 0:
		return false, "pod opted out", nil
	case scope == ScopeNamespace:
		return true, "namespace opted in", nil
	}
	return false, "not opted in", nil
}

// view is one container of any of the three kinds, as the checks see it.
type view struct {
	field string // e.g. spec.initContainers[1]
	name  string
	init  bool // an init container (its env gets the base URLs too)
	sc    *corev1.SecurityContext
	mount []corev1.VolumeMount
	env   []corev1.EnvVar
	from  []corev1.EnvFromSource
}

func containers(pod *corev1.Pod) []view {
	var out []view
	for i, c := range pod.Spec.InitContainers {
		out = append(out, view{fmt.Sprintf("spec.initContainers[%d]", i), c.Name, true, c.SecurityContext, c.VolumeMounts, c.Env, c.EnvFrom})
	}
	for i, c := range pod.Spec.Containers {
		out = append(out, view{fmt.Sprintf("spec.containers[%d]", i), c.Name, false, c.SecurityContext, c.VolumeMounts, c.Env, c.EnvFrom})
	}
	for i, c := range pod.Spec.EphemeralContainers {
		out = append(out, view{fmt.Sprintf("spec.ephemeralContainers[%d]", i), c.Name, false, c.SecurityContext, c.VolumeMounts, c.Env, c.EnvFrom})
	}
	return out
}

func ours(name string) bool {
	return name == CountersignContainer || name == EnvoyContainer || name == EgressContainer
}

func ourVolume(name string) bool {
	return name == SocketVolume || name == RailsVolume || name == EnvoyConfigVolume || name == TmpVolume ||
		name == AuditKeyVolume || name == XtablesVolume || name == NoTokenVolume || strings.HasPrefix(name, railKeyVolume)
}

// allowedCaps are the only capabilities an agent container may add: an
// allowlist, as anything else (SYS_TIME sets the node's clock, SYS_PTRACE
// reaches into the sidecars, NET_ADMIN and NET_RAW rewrite or bypass the
// pod's filters, SETUID leaves the agent's UID, …) would let a process
// reach around the sidecars or the node. NET_BIND_SERVICE binds a port
// below 1024, which the sidecars neither use nor read.
var allowedCaps = []string{"NET_BIND_SERVICE"}

// podRefusals are the pod-level settings that undo the isolation.
func podRefusals(pod *corev1.Pod) []string {
	var out []string
	s := pod.Spec
	if s.ShareProcessNamespace != nil && *s.ShareProcessNamespace {
		out = append(out, "spec.shareProcessNamespace is true: the agent could read the sidecars' memory and files through /proc")
	}
	if s.HostNetwork {
		out = append(out, "spec.hostNetwork is true: the agent would share the node's network, and Envoy's port with every pod on it")
	}
	if s.HostPID {
		out = append(out, "spec.hostPID is true: the agent could see every process on the node")
	}
	if s.HostIPC {
		out = append(out, "spec.hostIPC is true: the agent would share the node's IPC namespace")
	}
	if psc := s.SecurityContext; psc != nil {
		out = append(out, confinementRefusals("spec.securityContext", psc.SeccompProfile, psc.AppArmorProfile, psc.SELinuxOptions, psc.WindowsOptions, nil)...)
	}
	for k, v := range pod.Annotations {
		// The annotation form the kubelet still reads (before the field).
		if strings.HasPrefix(k, appArmorAnnotation) && !strings.HasPrefix(v, "runtime/default") && !strings.HasPrefix(v, "localhost/") {
			out = append(out, fmt.Sprintf("annotation %s is %q: %s", k, v, unconfinedWhy))
		}
	}
	return out
}

// appArmorAnnotation is the prefix of the per-container AppArmor
// annotation (container.apparmor.security.beta.kubernetes.io/<name>).
const appArmorAnnotation = "container.apparmor.security.beta.kubernetes.io/"

const unconfinedWhy = "an agent process without its confinement has the whole kernel surface to reach around the sidecars with (Pod Security Standards baseline refuses it too)"

// allowedSELinuxTypes are the SELinux types an agent may name (Pod
// Security Standards baseline's): container_t and its init and kvm
// variants. Another type (spc_t, unconfined_t) takes the process out of
// the container's confinement; a user or role changes who it is.
var allowedSELinuxTypes = []string{"", "container_t", "container_init_t", "container_kvm_t"}

// confinementRefusals are the settings of a pod's or a container's
// security context that take its processes out of the confinement every
// container has by default (Pod Security Standards baseline): seccomp or
// AppArmor Unconfined, an SELinux type, user or role of its own, a
// Windows HostProcess container (the node's own process), and, for a
// container, an unmasked /proc. Unset is left to the cluster's defaults.
func confinementRefusals(field string, seccomp *corev1.SeccompProfile, apparmor *corev1.AppArmorProfile, selinux *corev1.SELinuxOptions,
	windows *corev1.WindowsSecurityContextOptions, procMount *corev1.ProcMountType) []string {
	var out []string
	if seccomp != nil && seccomp.Type == corev1.SeccompProfileTypeUnconfined {
		out = append(out, fmt.Sprintf("%s.seccompProfile is Unconfined: %s", field, unconfinedWhy))
	}
	if apparmor != nil && apparmor.Type == corev1.AppArmorProfileTypeUnconfined {
		out = append(out, fmt.Sprintf("%s.appArmorProfile is Unconfined: %s", field, unconfinedWhy))
	}
	if selinux != nil {
		if !slices.Contains(allowedSELinuxTypes, selinux.Type) {
			out = append(out, fmt.Sprintf("%s.seLinuxOptions.type is %q: an agent may run as container_t, container_init_t or container_kvm_t alone", field, selinux.Type))
		}
		if selinux.User != "" || selinux.Role != "" {
			out = append(out, fmt.Sprintf("%s.seLinuxOptions sets a user or role: an agent runs as the container's own", field))
		}
	}
	if windows != nil && windows.HostProcess != nil && *windows.HostProcess {
		out = append(out, fmt.Sprintf("%s.windowsOptions.hostProcess is true: the agent would run as a process of the node itself", field))
	}
	if procMount != nil && *procMount != "" && *procMount != corev1.DefaultProcMount {
		out = append(out, fmt.Sprintf("%s.procMount is %s: the agent would see /proc unmasked (the kernel's and the node's files the runtime hides)", field, *procMount))
	}
	return out
}

// agentRefusals are what an agent container may not do: be privileged,
// leave privilege escalation on (allowPrivilegeEscalation must be false),
// add a capability beyond allowedCaps, mount a hostPath or anything of
// ours, or read the Secrets only Countersign may read.
func agentRefusals(c view, vols map[string]corev1.Volume, protected map[string]bool) []string {
	var out []string
	if sc := c.sc; sc != nil {
		out = append(out, confinementRefusals(fmt.Sprintf("%s (%s): securityContext", c.field, c.name), sc.SeccompProfile, sc.AppArmorProfile, sc.SELinuxOptions, sc.WindowsOptions, sc.ProcMount)...)
		if sc.Privileged != nil && *sc.Privileged {
			out = append(out, c.field+" ("+c.name+") is privileged")
		}
		if sc.Capabilities != nil {
			for _, cp := range sc.Capabilities.Add {
				if name := strings.TrimPrefix(strings.ToUpper(string(cp)), "CAP_"); !slices.Contains(allowedCaps, name) {
					out = append(out, fmt.Sprintf("%s (%s) adds capability %s: an agent container may add %s alone", c.field, c.name, cp, strings.Join(allowedCaps, ", ")))
				}
			}
		}
	}
	// Unset is true: no_new_privs stays off, and a setuid-root or
	// file-capability program in the image gives the process back what
	// runAsNonRoot and the capability allowlist took away (root could
	// rewrite the pod's /etc/hosts, which the sidecars read).
	if sc := c.sc; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		is := "unset, which is true"
		if sc != nil && sc.AllowPrivilegeEscalation != nil {
			is = "true"
		}
		out = append(out, fmt.Sprintf("%s (%s) does not set allowPrivilegeEscalation: false (it is %s): a setuid or file-capability "+
			"program in its image would make it root again or give it capabilities", c.field, c.name, is))
	}
	for _, m := range c.mount {
		v, ok := vols[m.Name]
		switch {
		case m.Name == SocketVolume:
			out = append(out, fmt.Sprintf("%s (%s) mounts %s, the volume of Countersign's and Envoy's sockets", c.field, c.name, m.Name))
		case ourVolume(m.Name):
			out = append(out, fmt.Sprintf("%s (%s) mounts %s, a volume of the injected sidecars", c.field, c.name, m.Name))
		case ok && v.HostPath != nil:
			out = append(out, fmt.Sprintf("%s (%s) mounts hostPath volume %s", c.field, c.name, m.Name))
		case ok && len(volumeSecrets(v, protected)) > 0:
			out = append(out, fmt.Sprintf("%s (%s) mounts volume %s holding Secret %s, which only Countersign may read", c.field, c.name, m.Name, volumeSecrets(v, protected)[0]))
		}
	}
	return append(out, envSecretReads(c, protected)...)
}

// envSecretReads: c's env and envFrom that read a Secret only Countersign
// may read.
func envSecretReads(c view, protected map[string]bool) []string {
	var out []string
	for _, e := range c.env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && protected[e.ValueFrom.SecretKeyRef.Name] {
			out = append(out, fmt.Sprintf("%s (%s) env %s reads Secret %s, which only Countersign may read", c.field, c.name, e.Name, e.ValueFrom.SecretKeyRef.Name))
		}
	}
	for _, f := range c.from {
		if f.SecretRef != nil && protected[f.SecretRef.Name] {
			out = append(out, fmt.Sprintf("%s (%s) envFrom reads Secret %s, which only Countersign may read", c.field, c.name, f.SecretRef.Name))
		}
	}
	return out
}

// secretReads: c's mounts of a volume holding a Secret only Countersign may
// read, and its env and envFrom reading one.
func secretReads(c view, vols map[string]corev1.Volume, protected map[string]bool) []string {
	var out []string
	for _, m := range c.mount {
		if s := volumeSecrets(vols[m.Name], protected); len(s) > 0 {
			out = append(out, fmt.Sprintf("%s (%s) mounts volume %s holding Secret %s, which only Countersign may read", c.field, c.name, m.Name, s[0]))
		}
	}
	return append(out, envSecretReads(c, protected)...)
}

// secretRefusals are what no pod of an injected namespace may do, whether
// it is injected or opts out: hold or read the rail keys' or the ledger
// URL's Secret. Those Secrets live in that namespace for the sidecars, and
// a pod that opts out has no sidecars and so no reason to read them.
func secretRefusals(pod *corev1.Pod, cfg Config) []string {
	var out []string
	vols, protected := volumeMap(pod), protectedSecrets(cfg)
	for i, v := range pod.Spec.Volumes {
		if s := volumeSecrets(v, protected); len(s) > 0 {
			out = append(out, fmt.Sprintf("spec.volumes[%d] (%s) holds Secret %s, which only Countersign may read", i, v.Name, s[0]))
		}
	}
	for _, c := range containers(pod) {
		out = append(out, secretReads(c, vols, protected)...)
	}
	return out
}

// protectedSecrets are the rail keys, the ledger URL and the audit log's
// signing key: what the injector mounts into the countersign container
// alone.
func protectedSecrets(cfg Config) map[string]bool {
	p := map[string]bool{cfg.DatabaseSecret: true}
	if cfg.AuditKeySecret != "" {
		p[cfg.AuditKeySecret] = true
	}
	for _, k := range cfg.RailKeys {
		p[k.Secret] = true
	}
	return p
}

// volumeSecrets lists the protected Secrets a volume projects.
func volumeSecrets(v corev1.Volume, protected map[string]bool) []string {
	var out []string
	if v.Secret != nil && protected[v.Secret.SecretName] {
		out = append(out, v.Secret.SecretName)
	}
	if v.Projected != nil {
		for _, s := range v.Projected.Sources {
			if s.Secret != nil && protected[s.Secret.Name] {
				out = append(out, s.Secret.Name)
			}
		}
	}
	return out
}

func volumeMap(pod *corev1.Pod) map[string]corev1.Volume {
	m := make(map[string]corev1.Volume, len(pod.Spec.Volumes))
	for _, v := range pod.Spec.Volumes {
		m[v.Name] = v
	}
	return m
}

// preflight is every reason not to inject pod: what undoes the isolation
// (closed egress included), and names that collide with what would be
// injected.
func preflight(pod *corev1.Pod, cfg Config) []string {
	return agentPodRefusals(pod, cfg, false)
}

// agentPodRefusals are the refusals of a whole agent pod: the pod-level
// settings, every agent container (agentRefusals, runAsNonRoot, the
// sidecars' ports), its volumes (none named like ours, none holding a
// Secret only Countersign may read), its resolver and, with egress closed,
// the UID rules. Of a pod before injection (injected false) a container or
// volume named like the injector's is refused; of an injected pod
// (Guarded) the injector's own init containers and volumes are left out
// here, and compared with build(cfg) instead.
func agentPodRefusals(pod *corev1.Pod, cfg Config, injected bool) []string {
	out := podRefusals(pod)
	vols, protected := volumeMap(pod), protectedSecrets(cfg)
	sidecar := func(c view) bool { return injected && c.init && ours(c.name) }
	for _, c := range containers(pod) {
		if sidecar(c) {
			continue
		}
		if ours(c.name) {
			out = append(out, fmt.Sprintf("%s is named %q, the name of an injected sidecar", c.field, c.name))
		}
		out = append(out, agentRefusals(c, vols, protected)...)
	}
	for i, v := range pod.Spec.Volumes {
		if injected && ourVolume(v.Name) {
			continue // Guarded compares it with build(cfg)
		}
		if ourVolume(v.Name) {
			out = append(out, fmt.Sprintf("spec.volumes[%d] is named %q, the name of an injected volume", i, v.Name))
		}
		if s := volumeSecrets(v, protected); len(s) > 0 {
			out = append(out, fmt.Sprintf("spec.volumes[%d] (%s) holds Secret %s, which only Countersign may read", i, v.Name, s[0]))
		}
	}
	// The sidecars share the pod's ports: a container that claims theirs
	// would keep them from starting.
	for _, c := range pod.Spec.InitContainers {
		if !injected || !ours(c.Name) {
			out = append(out, portRefusals(c, cfg)...)
		}
	}
	for _, c := range pod.Spec.Containers {
		out = append(out, portRefusals(c, cfg)...)
	}
	psc := pod.Spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	for _, c := range containers(pod) {
		if sidecar(c) {
			continue // the egress container runs as root by design, checked as built
		}
		sc := c.sc
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		if nonRoot := first(sc.RunAsNonRoot, psc.RunAsNonRoot); nonRoot == nil || !*nonRoot {
			out = append(out, fmt.Sprintf("%s (%s): neither it nor the pod sets runAsNonRoot: true; as root it could rewrite the pod's /etc/hosts, "+
				"which the injected sidecars read, and steer where Envoy and Countersign connect", c.field, c.name))
		}
	}
	out = append(out, resolvesRefusals(pod, cfg)...)
	return append(out, egressRefusals(pod, cfg)...)
}

// resolvesRefusals: the injected sidecars look up the names they connect
// to (Envoy its upstreams, Countersign its ledger) through the pod's
// /etc/hosts and resolver, so the pod spec may not choose either: no
// hostAliases entry but the base URL hosts on 127.0.0.1 (the one the
// injector adds itself), no hostnameOverride, no setHostnameAsFQDN, no
// resolver of its own, no search domains, and no resolver option beyond
// those that change no answer. A plain-HTTP
// upstream steered to the agent would receive the rail key; a ledger
// steered to it would decide.
func resolvesRefusals(pod *corev1.Pod, cfg Config) []string {
	var out []string
	hosts := aliasHosts(cfg)
	for i, a := range pod.Spec.HostAliases {
		for _, h := range a.Hostnames {
			switch {
			case !slices.Contains(hosts, h):
				out = append(out, fmt.Sprintf("spec.hostAliases[%d] maps %s to %s: the injected sidecars resolve their upstreams and the ledger through the pod's /etc/hosts, "+
					"so the pod may add no name to it but a base URL host on 127.0.0.1", i, h, a.IP))
			case a.IP != "127.0.0.1":
				out = append(out, fmt.Sprintf("spec.hostAliases[%d] maps %s, a base URL host, to %s instead of Envoy's 127.0.0.1", i, h, a.IP))
			}
		}
	}
	// The kubelet writes "<pod IP> <host name>" into /etc/hosts, the host
	// name being spec.hostnameOverride, else spec.hostname (and
	// subdomain), else the pod's name. hostnameOverride takes any DNS
	// subdomain, the ledger's or an upstream's FQDN included. spec.hostname
	// and the pod's name are a single label (with subdomain, a name under
	// <subdomain>.<namespace>.svc): StatefulSets set them, so they stay
	// allowed, and the countersign sidecar runs with in-agent-pod, which
	// refuses a ledger not reached with sslmode=verify-full (a name steered
	// to the pod reaches no server with the ledger's certificate), as the
	// rails' Envoy clusters verify TLS.
	if o := pod.Spec.HostnameOverride; o != nil {
		out = append(out, fmt.Sprintf("spec.hostnameOverride is %q: the kubelet maps that name to the pod's own address in its /etc/hosts, "+
			"through which the injected sidecars resolve their upstreams and the ledger, so the pod would choose where a name of theirs leads "+
			"(spec.hostname, and subdomain, name the pod instead)", *o))
	}
	if f := pod.Spec.SetHostnameAsFQDN; f != nil && *f {
		out = append(out, "spec.setHostnameAsFQDN is true: the pod's kernel host name would be its FQDN, from which a resolver without "+
			"a search line (Go's, Envoy's) takes a search domain of the pod's choosing for the sidecars' names; few programs need it "+
			"(those that read their FQDN from the host name)")
	}
	const why = "the injected sidecars resolve their upstreams and the ledger with the pod's resolver, which the pod may then not choose"
	if pod.Spec.DNSPolicy == corev1.DNSNone {
		out = append(out, "spec.dnsPolicy is None: "+why)
	}
	if d := pod.Spec.DNSConfig; d != nil {
		if len(d.Nameservers) > 0 {
			out = append(out, "spec.dnsConfig.nameservers is set: "+why)
		}
		if len(d.Searches) > 0 {
			out = append(out, "spec.dnsConfig.searches is set: "+why+" (a search domain is tried before a name with fewer dots than ndots)")
		}
		for _, o := range d.Options {
			if !slices.Contains(harmlessDNSOptions, o.Name) {
				out = append(out, fmt.Sprintf("spec.dnsConfig.options has %q: %s", o.Name, why))
			}
		}
	}
	return out
}

// aliasHosts are the base URLs' host names, sorted, each once.
func aliasHosts(cfg Config) []string {
	var hosts []string
	for _, e := range cfg.BaseURLs {
		if h, err := baseURLHost(e.Value); err == nil && h != "" && !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	slices.Sort(hosts)
	return hosts
}

func portRefusals(c corev1.Container, cfg Config) []string {
	var out []string
	for _, p := range c.Ports {
		if p.ContainerPort == EnvoyPort || int(p.ContainerPort) == cfg.HTTPPort || p.Name == httpPortName {
			out = append(out, fmt.Sprintf("container %s declares port %d (%s), which an injected sidecar uses", c.Name, p.ContainerPort, p.Name))
		}
	}
	return out
}
