package inject

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
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
		// schema is current.
		StartupProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString(httpPortName)}},
			PeriodSeconds: 1, TimeoutSeconds: 2, FailureThreshold: 300,
		},
		LivenessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString(httpPortName)}},
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

// httpPortName names Countersign's HTTP port for its probes.
const httpPortName = "cs-http"

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
