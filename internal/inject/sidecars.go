package inject

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// injected is what Mutate adds to a pod.
type injected struct {
	// egress is the init container that closes direct egress, or nil.
	egress             *corev1.Container
	countersign, envoy corev1.Container
	volumes            []corev1.Volume
	env                []corev1.EnvVar
	hosts              []string
}

func build(cfg Config) injected {
	always := corev1.ContainerRestartPolicyAlways
	memory := corev1.StorageMediumMemory
	socketMount := corev1.VolumeMount{Name: SocketVolume, MountPath: SocketDir}
	// Nothing where a service account token would go: the ServiceAccount
	// admission plugin, which runs again after this patch, mounts the pod's
	// token into every container with nothing at that path, and neither
	// sidecar calls the Kubernetes API (nor should it hold the agent's
	// token).
	noToken := corev1.VolumeMount{Name: NoTokenVolume, MountPath: serviceAccountDir, ReadOnly: true}

	var keyMounts []corev1.VolumeMount
	var keyVols []corev1.Volume
	for i, k := range cfg.RailKeys {
		name := railKeyVolume + strconv.Itoa(i)
		keyMounts = append(keyMounts, corev1.VolumeMount{Name: name, MountPath: RailKeyDir + "/" + k.Account, ReadOnly: true})
		// 0444: the Secret is mounted into countersign alone, so its mount
		// namespace is the boundary; a group mode would need a pod-wide
		// fsGroup, which would change the agent's own volumes too.
		keyVols = append(keyVols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: k.Secret, Items: []corev1.KeyToPath{{Key: k.Key, Path: "key"}}, DefaultMode: ptr(int32(0o444)),
		}}})
	}

	cs := corev1.Container{
		Name:            CountersignContainer,
		Image:           cfg.CountersignImage,
		ImagePullPolicy: cfg.PullPolicy,
		Args:            []string{"serve"},
		Env: []corev1.EnvVar{
			{Name: "COUNTERSIGN_DATABASE_URL", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: cfg.DatabaseSecret}, Key: cfg.DatabaseKey}}},
			{Name: "COUNTERSIGN_RAILS_FILE", Value: RailsDir + "/" + cfg.RailsConfigKey},
			// ext_authz and ext_proc (an ALLOW carries the rail key) and the
			// countersign.v1 API: sockets on the volume only the sidecars mount.
			{Name: "COUNTERSIGN_ENVOY_ADDR", Value: "unix:" + EnvoySocket},
			{Name: "COUNTERSIGN_GRPC_ADDR", Value: "unix:" + APISocket},
			{Name: "COUNTERSIGN_HTTP_ADDR", Value: ":" + strconv.Itoa(cfg.HTTPPort)},
			// This serve runs in the agent's pod, whose loopback and
			// /etc/hosts the agent shares, and whose pod spec writes the
			// pod's own host name into that file (spec.hostname, which
			// StatefulSets set, or the pod's name): it refuses to start
			// unless the ledger is reached with sslmode=verify-full on no
			// loopback host, and every rail URL is https. Guarded compares
			// this container with the one built here, so the pod cannot
			// drop it.
			{Name: InAgentPodEnv, Value: "true"},
		},
		Ports: []corev1.ContainerPort{{Name: httpPortName, ContainerPort: int32(cfg.HTTPPort), Protocol: corev1.ProtocolTCP}},
		// A native sidecar's startup probe holds back the containers after
		// it: Envoy and the agent start once the ledger answers and its
		// schema is current. Both probes run in this container and ask over
		// the API socket (ProbeCommands), not over the HTTP port.
		StartupProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: startupProbeCommand()}},
			PeriodSeconds: 1, TimeoutSeconds: 2, FailureThreshold: 300,
		},
		LivenessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: livenessProbeCommand()}},
			PeriodSeconds: 10, TimeoutSeconds: 2, FailureThreshold: 3,
		},
		RestartPolicy: &always,
		VolumeMounts: append(append([]corev1.VolumeMount{socketMount,
			{Name: RailsVolume, MountPath: RailsDir, ReadOnly: true}}, keyMounts...),
			corev1.VolumeMount{Name: TmpVolume, MountPath: "/tmp"}, noToken),
		SecurityContext: hardened(countersignUID, countersignUID),
		Resources:       resources("50m", "64Mi", "256Mi"),
	}
	envoy := corev1.Container{
		Name:            EnvoyContainer,
		Image:           cfg.EnvoyImage,
		ImagePullPolicy: cfg.PullPolicy,
		// The binary itself: no entrypoint script that would switch users.
		Command:         []string{"/usr/local/bin/envoy"},
		Args:            []string{"-c", EnvoyConfigDir + "/" + cfg.EnvoyConfigKey, "--disable-hot-restart"},
		RestartPolicy:   &always,
		VolumeMounts:    []corev1.VolumeMount{socketMount, {Name: EnvoyConfigVolume, MountPath: EnvoyConfigDir, ReadOnly: true}, noToken},
		SecurityContext: hardened(envoyUID, countersignUID),
		Resources:       resources("50m", "64Mi", "512Mi"),
	}
	vols := []corev1.Volume{
		{Name: SocketVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: memory, SizeLimit: ptr(resource.MustParse("1Mi"))}}},
		{Name: RailsVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: cfg.RailsConfigMap},
			Items:                []corev1.KeyToPath{{Key: cfg.RailsConfigKey, Path: cfg.RailsConfigKey}}}}},
		{Name: EnvoyConfigVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: cfg.EnvoyConfigMap},
			Items:                []corev1.KeyToPath{{Key: cfg.EnvoyConfigKey, Path: cfg.EnvoyConfigKey}}}}},
	}
	if cfg.DBPooler == "pgbouncer" {
		cs.Env = append(cs.Env, corev1.EnvVar{Name: "COUNTERSIGN_DB_POOLER", Value: cfg.DBPooler})
	}
	if cfg.AuditKeySecret != "" {
		// The audit log's signing key, like the rail keys: countersign's alone.
		cs.Env = append(cs.Env, corev1.EnvVar{Name: "COUNTERSIGN_AUDIT_SIGNING_KEY", Value: AuditKeyDir + "/key"})
		cs.VolumeMounts = append(cs.VolumeMounts, corev1.VolumeMount{Name: AuditKeyVolume, MountPath: AuditKeyDir, ReadOnly: true})
		keyVols = append(keyVols, corev1.Volume{Name: AuditKeyVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: cfg.AuditKeySecret, Items: []corev1.KeyToPath{{Key: cfg.AuditKeyKey, Path: "key"}}, DefaultMode: ptr(int32(0o444)),
		}}})
	}
	vols = append(vols, keyVols...)
	vols = append(vols, corev1.Volume{Name: TmpVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr(resource.MustParse("16Mi"))}}},
		corev1.Volume{Name: NoTokenVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			Medium: corev1.StorageMediumMemory, SizeLimit: ptr(resource.MustParse("1Mi"))}}})
	var egress *corev1.Container
	if cfg.Egress.Enabled {
		egress = ptr(egressContainer(cfg))
		vols = append(vols, egressVolumes()...)
	}

	env := make([]corev1.EnvVar, 0, len(cfg.BaseURLs))
	for _, e := range cfg.BaseURLs {
		env = append(env, corev1.EnvVar{Name: e.Name, Value: e.Value})
	}
	return injected{egress: egress, countersign: cs, envoy: envoy, volumes: vols, env: env, hosts: aliasHosts(cfg)}
}

// InAgentPodEnv is `countersign serve --in-agent-pod` as an environment
// variable (internal/config's InAgentPodFlag).
const InAgentPodEnv = "COUNTERSIGN_IN_AGENT_POD"

// httpPortName names Countersign's HTTP port (metrics, REST, the console).
const httpPortName = "cs-http"

// ProbeCommands are the exec probes of the countersign container: the
// startup probe (`countersign probe --ready`: grpc.health.v1 SERVING) and
// the liveness probe (`countersign probe`: it answers), over the API
// socket of COUNTERSIGN_GRPC_ADDR.
//
// Not HTTP probes: the agent shares the pod's network, so it reaches the
// HTTP listener, and by holding every connection that listener serves it
// made the kubelet's /healthz and /readyz time out; Countersign was
// restarted in a loop, and while it restarted the agent could bind its
// port and pose as it (found by a review). The API socket is on a volume
// only the sidecars mount, and the probe process runs in this container.
//
// The binary is /proc/1/exe: the injector does not know where the image
// keeps it (the container runs the image's entrypoint with Args
// ["serve"]), and PID 1 of this container is `countersign serve` itself:
// the container has a PID namespace of its own, as the injector refuses
// shareProcessNamespace (and hostPID). The kubelet runs an exec probe as
// the container's process (runAsUser and runAsGroup countersignUID),
// and following /proc/1/exe needs PTRACE_MODE_READ_FSCREDS access to PID 1,
// which a process of the same UID and GID has without any capability
// (so with capabilities dropped, no privilege escalation and a read-only
// root filesystem alike) as long as PID 1 is dumpable: a Go binary is (it
// never calls prctl(PR_SET_DUMPABLE)), and with no_new_privs
// (allowPrivilegeEscalation false) no set-ID bit or file capability can
// have made the exec a secure one, which would have cleared it. Yama's
// ptrace_scope restricts attaching, not this read.
func ProbeCommands() (startup, liveness []string) {
	return startupProbeCommand(), livenessProbeCommand()
}

// selfExe is the countersign binary as PID 1 of its container sees it.
const selfExe = "/proc/1/exe"

func startupProbeCommand() []string  { return []string{selfExe, "probe", "--ready"} }
func livenessProbeCommand() []string { return []string{selfExe, "probe"} }

func hardened(uid, gid int64) *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsUser:                ptr(uid),
		RunAsGroup:               ptr(gid),
		RunAsNonRoot:             ptr(true),
		ReadOnlyRootFilesystem:   ptr(true),
		AllowPrivilegeEscalation: ptr(false),
		Privileged:               ptr(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func resources(cpu, mem, limit string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(limit)},
	}
}

func ptr[T any](v T) *T { return &v }
