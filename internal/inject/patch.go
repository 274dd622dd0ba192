package inject

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
)

// Op is one RFC 6902 operation. The injector only adds and replaces.
type Op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// pointer escapes a JSON Pointer token (RFC 6901).
func pointer(token string) string {
	return strings.ReplaceAll(strings.ReplaceAll(token, "~", "~0"), "/", "~1")
}

// patch writes the operations that turn pod into a guarded pod, in order:
// each path is valid against the pod as the earlier operations left it.
func patch(pod *corev1.Pod, in injected, version string) []Op {
	var ops []Op
	status := map[string]string{StatusKey: StatusInjected, VersionKey: version}
	if pod.Annotations == nil {
		ops = append(ops, Op{"add", "/metadata/annotations", status})
	} else {
		for _, k := range []string{StatusKey, VersionKey} {
			ops = append(ops, Op{"add", "/metadata/annotations/" + pointer(k), status[k]})
		}
	}
	// The base URLs, on every agent container, init containers included,
	// before the sidecars are inserted ahead of them and shift their indices.
	for i, c := range pod.Spec.InitContainers {
		ops = append(ops, envOps("/spec/initContainers/"+strconv.Itoa(i)+"/env", c.Env, in.env)...)
	}
	for i, c := range pod.Spec.Containers {
		ops = append(ops, envOps("/spec/containers/"+strconv.Itoa(i)+"/env", c.Env, in.env)...)
	}
	// Countersign first, then Envoy, ahead of the pod's own init containers:
	// native sidecars start in order, and the agent's init containers get a
	// guarded path out too. The egress container, when there is one, comes
	// before them all: nothing of the pod runs before egress is closed.
	lead := []corev1.Container{in.countersign, in.envoy}
	if in.egress != nil {
		lead = append([]corev1.Container{*in.egress}, lead...)
	}
	if len(pod.Spec.InitContainers) == 0 {
		ops = append(ops, Op{"add", "/spec/initContainers", lead})
	} else {
		for i, c := range lead {
			ops = append(ops, Op{"add", "/spec/initContainers/" + strconv.Itoa(i), c})
		}
	}
	if len(pod.Spec.Volumes) == 0 {
		ops = append(ops, Op{"add", "/spec/volumes", in.volumes})
	} else {
		for _, v := range in.volumes {
			ops = append(ops, Op{"add", "/spec/volumes/-", v})
		}
	}
	if len(in.hosts) > 0 {
		alias := corev1.HostAlias{IP: "127.0.0.1", Hostnames: in.hosts}
		if len(pod.Spec.HostAliases) == 0 {
			ops = append(ops, Op{"add", "/spec/hostAliases", []corev1.HostAlias{alias}})
		} else {
			ops = append(ops, Op{"add", "/spec/hostAliases/-", alias})
		}
	}
	return ops
}

// envOps sets each of want in a container's env at path: an existing
// variable of that name (every one, if the pod repeats it) is replaced,
// so the operator's base URL wins over the pod's.
func envOps(path string, have []corev1.EnvVar, want []corev1.EnvVar) []Op {
	if len(have) == 0 {
		return []Op{{"add", path, want}}
	}
	var ops []Op
	for _, w := range want {
		found := false
		for j, h := range have {
			if h.Name == w.Name {
				ops = append(ops, Op{"replace", path + "/" + strconv.Itoa(j), w})
				found = true
			}
		}
		if !found {
			ops = append(ops, Op{"add", path + "/-", w})
		}
	}
	return ops
}

// apply applies ops to the object exactly as the API server received it.
func apply(raw []byte, ops []Op) ([]byte, *corev1.Pod, error) {
	doc, err := json.Marshal(ops)
	if err != nil {
		return nil, nil, err
	}
	p, err := jsonpatch.DecodePatch(doc)
	if err != nil {
		return nil, nil, err
	}
	out, err := p.Apply(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("the patch does not apply: %w", err)
	}
	var pod corev1.Pod
	if err := json.Unmarshal(out, &pod); err != nil {
		return nil, nil, err
	}
	return doc, &pod, nil
}
