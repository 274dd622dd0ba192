// Command chartcheck checks the manifests `helm template` renders from
// charts/countersign, read from standard input, against the invariants the
// chart exists to keep:
//
//   - the rail key Secrets are mounted into the countersign container only,
//     and every key_file of the rails file lies in one of those mounts;
//   - Countersign's Envoy listener is a Unix socket (COUNTERSIGN_ENVOY_ADDR
//     unix:…) in an emptyDir that only the countersign and envoy containers
//     mount, and Envoy's countersign cluster is that socket (a pipe);
//   - the readiness probe is GET /readyz and the liveness probe GET /healthz
//     on COUNTERSIGN_HTTP_ADDR's port;
//   - pods run as non-root, with a read-only root filesystem, no privilege
//     escalation, all capabilities dropped, resources set, no service
//     account token, and every image pinned (a tag that is not latest, or a
//     digest); no container defines an environment variable twice;
//   - the database URL comes from a Secret, and `countersign migrate` runs
//     before serve (a pre-install/pre-upgrade Job or an init container);
//   - Envoy's bootstrap parses strictly into go-control-plane's Bootstrap,
//     validates into every typed Any, fails closed (ext_authz, then
//     ext_proc, then the router) and routes each rail to a rail account of
//     the rails file over verified TLS; Envoy logs at info or above (at
//     debug its router logs the rail key);
//   - the egress pods' Services are ClusterIP, with no external IPs.
//
// It then breaks copies of the manifests one fault at a time (a rail key
// mounted into Envoy, an agent container on the socket, gRPC on TCP, …) and
// fails unless each fault is caught by the invariant meant to catch it, so
// a checker that passes everything cannot pass silently.
//
// Usage: helm template … | go run ./scripts/chartcheck [-name default]
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/rails"
)

func main() {
	name := flag.String("name", "manifests", "name of the rendering, for messages")
	serve := flag.String("serve", "", "a countersign binary: also start `serve` with the rendered container's environment and files (see smoke.go)")
	flag.Parse()
	if err := run(*name, *serve, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "chartcheck %s: %v\n", *name, err)
		os.Exit(1)
	}
}

func run(name, serveBin string, in io.Reader, out io.Writer) error {
	raw, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	docs, err := splitDocs(raw)
	if err != nil {
		return err
	}
	if len(docs) == 0 {
		return errors.New("no manifests on standard input")
	}
	res, fs := check(docs)
	if err := res.err(); err != nil {
		return err
	}
	caught, err := selfTest(docs)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "chartcheck %s: %d objects, %d checks passed; %d broken copies each caught by its invariant\n",
		name, len(docs), res.passed, caught)
	if serveBin == "" {
		return nil
	}
	if fs.inj != nil {
		report, err := smokeInject(serveBin, fs.inj)
		if err != nil {
			return fmt.Errorf("countersign inject with the rendered flags: %w", err)
		}
		fmt.Fprintf(out, "chartcheck %s: countersign inject with the rendered flags: %s\n", name, report)
		return nil
	}
	report, err := smoke(serveBin, fs.eg)
	if err != nil {
		return fmt.Errorf("countersign serve with the rendered settings: %w", err)
	}
	fmt.Fprintf(out, "chartcheck %s: countersign serve with the rendered settings: %s\n", name, report)
	return nil
}

// splitDocs splits a multi-document YAML stream into objects, skipping
// empty documents.
func splitDocs(raw []byte) ([]map[string]any, error) {
	var docs []map[string]any
	var cur bytes.Buffer
	flush := func() error {
		defer cur.Reset()
		if len(bytes.TrimSpace(stripComments(cur.Bytes()))) == 0 {
			return nil
		}
		var m map[string]any
		if err := yaml.Unmarshal(cur.Bytes(), &m); err != nil {
			return fmt.Errorf("document %d: %w", len(docs)+1, err)
		}
		if m != nil {
			docs = append(docs, m)
		}
		return nil
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "---" || strings.HasPrefix(line, "--- ") {
			if err := flush(); err != nil {
				return nil, err
			}
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return docs, nil
}

func stripComments(b []byte) []byte {
	var out bytes.Buffer
	for line := range bytes.Lines(b) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out.Write(line)
		}
	}
	return out.Bytes()
}

// The Kubernetes objects, as far as the checks read them.

type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Data map[string]string `json:"data"`
	Spec json.RawMessage   `json:"spec"`
}

type workloadSpec struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	Template struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec podSpec `json:"spec"`
	} `json:"template"`
}

type podSpec struct {
	SecurityContext              *securityContext `json:"securityContext"`
	InitContainers               []container      `json:"initContainers"`
	Containers                   []container      `json:"containers"`
	Volumes                      []volume         `json:"volumes"`
	AutomountServiceAccountToken *bool            `json:"automountServiceAccountToken"`
	ServiceAccountName           string           `json:"serviceAccountName"`
	EnableServiceLinks           *bool            `json:"enableServiceLinks"`
	HostNetwork                  bool             `json:"hostNetwork"`
	HostPID                      bool             `json:"hostPID"`
	HostIPC                      bool             `json:"hostIPC"`
	ShareProcessNamespace        *bool            `json:"shareProcessNamespace"`
}

type securityContext struct {
	RunAsNonRoot             *bool  `json:"runAsNonRoot"`
	RunAsUser                *int64 `json:"runAsUser"`
	FSGroup                  *int64 `json:"fsGroup"`
	ReadOnlyRootFilesystem   *bool  `json:"readOnlyRootFilesystem"`
	AllowPrivilegeEscalation *bool  `json:"allowPrivilegeEscalation"`
	Privileged               *bool  `json:"privileged"`
	Capabilities             *struct {
		Add  []string `json:"add"`
		Drop []string `json:"drop"`
	} `json:"capabilities"`
}

type container struct {
	Name    string   `json:"name"`
	Image   string   `json:"image"`
	Command []string `json:"command"`
	Args    []string `json:"args"`
	Env     []struct {
		Name      string  `json:"name"`
		Value     *string `json:"value"`
		ValueFrom *struct {
			SecretKeyRef *struct {
				Name string `json:"name"`
				Key  string `json:"key"`
			} `json:"secretKeyRef"`
		} `json:"valueFrom"`
	} `json:"env"`
	EnvFrom []struct {
		SecretRef *struct {
			Name string `json:"name"`
		} `json:"secretRef"`
	} `json:"envFrom"`
	Ports []struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"containerPort"`
	} `json:"ports"`
	ReadinessProbe *probe `json:"readinessProbe"`
	LivenessProbe  *probe `json:"livenessProbe"`
	VolumeMounts   []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
		SubPath   string `json:"subPath"`
	} `json:"volumeMounts"`
	SecurityContext *securityContext `json:"securityContext"`
	Resources       struct {
		Requests map[string]any `json:"requests"`
		Limits   map[string]any `json:"limits"`
	} `json:"resources"`
}

type probe struct {
	HTTPGet *struct {
		Scheme string `json:"scheme"`
		Path   string `json:"path"`
		Port   any    `json:"port"`
	} `json:"httpGet"`
}

type volume struct {
	Name   string `json:"name"`
	Secret *struct {
		SecretName string `json:"secretName"`
		Items      []struct {
			Key  string `json:"key"`
			Path string `json:"path"`
		} `json:"items"`
	} `json:"secret"`
	ConfigMap *struct {
		Name string `json:"name"`
	} `json:"configMap"`
	EmptyDir  *struct{} `json:"emptyDir"`
	Projected *struct {
		Sources []struct {
			Secret *struct {
				Name string `json:"name"`
			} `json:"secret"`
		} `json:"sources"`
	} `json:"projected"`
}

type serviceSpec struct {
	Type        string            `json:"type"`
	ExternalIPs []string          `json:"externalIPs"`
	Selector    map[string]string `json:"selector"`
	Ports       []struct {
		Port       int `json:"port"`
		TargetPort any `json:"targetPort"`
	} `json:"ports"`
}

type networkPolicySpec struct {
	PodSelector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"podSelector"`
	Ingress []struct {
		Ports []struct {
			Port any `json:"port"`
		} `json:"ports"`
	} `json:"ingress"`
}

// env is the container's variable name as the kubelet sets it: its last
// definition (checkPod refuses a name defined twice).
func (c *container) env(name string) (value string, fromSecret string, ok bool) {
	for _, e := range slices.Backward(c.Env) {
		if e.Name != name {
			continue
		}
		if e.Value != nil {
			return *e.Value, "", true
		}
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			return "", e.ValueFrom.SecretKeyRef.Name, true
		}
		return "", "", true
	}
	return "", "", false
}

// secretsRead are the Secrets a container reads through its environment.
func (c *container) secretsRead() []string {
	var out []string
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			out = append(out, e.ValueFrom.SecretKeyRef.Name)
		}
	}
	for _, e := range c.EnvFrom {
		if e.SecretRef != nil {
			out = append(out, e.SecretRef.Name)
		}
	}
	return out
}

// port resolves a probe or Service port (a number or a port name) against
// the container's ports.
func (c *container) port(p any) (int, bool) {
	switch v := p.(type) {
	case float64:
		return int(v), true
	case string:
		if n, err := strconv.Atoi(v); err == nil {
			return n, true
		}
		for _, cp := range c.Ports {
			if cp.Name == v {
				return cp.ContainerPort, true
			}
		}
	}
	return 0, false
}

// result collects failures, each tagged with the invariant it breaks.
type result struct {
	passed   int
	failures []string
}

func (r *result) ok(invariant string, cond bool, format string, args ...any) bool {
	if cond {
		r.passed++
		return true
	}
	r.failures = append(r.failures, fmt.Sprintf("[%s] %s", invariant, fmt.Sprintf(format, args...)))
	return false
}

func (r *result) has(invariant string) bool {
	return slices.ContainsFunc(r.failures, func(f string) bool { return strings.HasPrefix(f, "["+invariant+"]") })
}

func (r *result) err() error {
	if len(r.failures) == 0 {
		return nil
	}
	return fmt.Errorf("%d invariant(s) broken:\n  %s", len(r.failures), strings.Join(r.failures, "\n  "))
}

// Invariant names: every failure is tagged with one.
const (
	invParse       = "parse"
	invImage       = "image-pinned"
	invNonRoot     = "run-as-non-root"
	invHardening   = "container-hardening"
	invEnvOnce     = "env-defined-once"
	invResources   = "resources"
	invNoToken     = "no-service-account-token"
	invPodShape    = "egress-pod-shape"
	invGRPCUnix    = "grpc-addr-unix"
	invSocketShare = "socket-shared-only-with-envoy"
	invRailKeys    = "rail-keys-only-in-countersign"
	invDatabase    = "database-url-from-secret"
	invRailsFile   = "rails-file"
	invProbes      = "probes"
	invMigrate     = "migrate-before-serve"
	invEnvoy       = "envoy-bootstrap"
	invEnvoyLog    = "envoy-log-level"
	invServices    = "services"
	invNetPol      = "network-policy"
)

type pod struct {
	where string
	spec  podSpec
}

func decode(doc map[string]any, v any) error {
	js, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return json.Unmarshal(js, v)
}

// facts is what the checks learnt of the rendering, for the smoke runs:
// the egress pod (mode egress) or the injector (mode injector), nil when
// they could not tell.
type facts struct {
	eg  *egress
	inj *injector
}

// check runs every invariant over the rendered objects. A rendering with a
// MutatingWebhookConfiguration is mode injector (injector.go); any other is
// mode egress.
func check(docs []map[string]any) (*result, facts) {
	r := &result{}
	var objs []object
	for i, d := range docs {
		var o object
		if !r.ok(invParse, decode(d, &o) == nil, "document %d is not a Kubernetes object", i+1) {
			return r, facts{}
		}
		objs = append(objs, o)
	}

	configMaps := map[string]object{}
	var deployments, jobs, services, netpols []object
	var pods []pod
	for _, o := range objs {
		switch o.Kind {
		case "ConfigMap":
			configMaps[o.Metadata.Name] = o
		case "Deployment", "StatefulSet", "DaemonSet", "Job":
			var ws workloadSpec
			if !r.ok(invParse, json.Unmarshal(o.Spec, &ws) == nil, "%s/%s: spec does not parse", o.Kind, o.Metadata.Name) {
				continue
			}
			pods = append(pods, pod{where: o.Kind + "/" + o.Metadata.Name, spec: ws.Template.Spec})
			switch o.Kind {
			case "Deployment":
				deployments = append(deployments, o)
			case "Job":
				jobs = append(jobs, o)
			default:
				r.ok(invPodShape, false, "%s/%s: the chart renders one Deployment and hook Jobs only", o.Kind, o.Metadata.Name)
			}
		case "Pod":
			r.ok(invPodShape, false, "Pod/%s: the chart renders no bare Pods", o.Metadata.Name)
		case "Service":
			services = append(services, o)
		case "NetworkPolicy":
			netpols = append(netpols, o)
		}
	}

	for _, p := range pods {
		checkPod(r, p)
	}
	if slices.ContainsFunc(objs, func(o object) bool { return o.Kind == "MutatingWebhookConfiguration" }) {
		return r, facts{inj: checkInjectorMode(r, docs, objs)}
	}
	if !r.ok(invPodShape, len(deployments) == 1, "want exactly one Deployment (the egress pods), got %d", len(deployments)) {
		return r, facts{}
	}
	d := deployments[0]
	var ws workloadSpec
	_ = json.Unmarshal(d.Spec, &ws)
	eg := checkEgressPod(r, d.Metadata.Name, ws.Template.Spec, configMaps)
	checkMigrate(r, ws.Template.Spec, jobs)
	if eg != nil {
		checkServices(r, ws.Template.Metadata.Labels, eg, services)
		checkNetworkPolicies(r, ws.Template.Metadata.Labels, eg, netpols)
	}
	return r, facts{eg: eg}
}

var tagRE = regexp.MustCompile(`^[\w][\w.-]{0,127}$`)

// checkPod holds every pod the chart renders to the same baseline.
func checkPod(r *result, p pod) {
	s := p.spec
	podNonRoot := s.SecurityContext != nil && s.SecurityContext.RunAsNonRoot != nil && *s.SecurityContext.RunAsNonRoot
	r.ok(invNonRoot, s.SecurityContext == nil || s.SecurityContext.RunAsUser == nil || *s.SecurityContext.RunAsUser != 0,
		"%s: pod runAsUser is 0", p.where)
	// The one exception: an injector keeping its own certificate
	// (--tls-mode=self), whose RBAC checkSelfTLS holds to its Secret and
	// its webhook configuration.
	if !selfTLSInjector(s) {
		r.ok(invNoToken, s.AutomountServiceAccountToken != nil && !*s.AutomountServiceAccountToken,
			"%s: automountServiceAccountToken must be false (no container needs the Kubernetes API)", p.where)
	}
	r.ok(invHardening, !s.HostNetwork && !s.HostPID && !s.HostIPC,
		"%s: must not share the node's network, PID or IPC namespace", p.where)
	r.ok(invHardening, s.ShareProcessNamespace == nil || !*s.ShareProcessNamespace,
		"%s: shareProcessNamespace would let Envoy read Countersign's memory and files", p.where)
	all := slices.Concat(s.InitContainers, s.Containers)
	for _, c := range all {
		w := p.where + " container " + c.Name
		checkImage(r, w, c.Image)
		sc := c.SecurityContext
		if sc == nil {
			sc = &securityContext{}
		}
		nonRoot := podNonRoot
		if sc.RunAsNonRoot != nil {
			nonRoot = *sc.RunAsNonRoot
		}
		r.ok(invNonRoot, nonRoot, "%s: runAsNonRoot must be true (pod or container)", w)
		r.ok(invNonRoot, sc.RunAsUser == nil || *sc.RunAsUser != 0, "%s: runAsUser is 0", w)
		r.ok(invHardening, sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, "%s: readOnlyRootFilesystem must be true", w)
		r.ok(invHardening, sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation, "%s: allowPrivilegeEscalation must be false", w)
		r.ok(invHardening, sc.Privileged == nil || !*sc.Privileged, "%s: must not be privileged", w)
		r.ok(invHardening, sc.Capabilities != nil && slices.Contains(sc.Capabilities.Drop, "ALL") && len(sc.Capabilities.Add) == 0,
			"%s: capabilities must drop ALL and add none", w)
		r.ok(invResources, c.Resources.Requests["cpu"] != nil && c.Resources.Requests["memory"] != nil && c.Resources.Limits["memory"] != nil,
			"%s: resources need cpu and memory requests and a memory limit", w)
		// The kubelet keeps a name's last definition: a second
		// COUNTERSIGN_ENVOY_ADDR or _RAIL_SETTLE_TIME from values would
		// override what the chart renders, and what was checked here.
		seen := map[string]bool{}
		for _, e := range c.Env {
			r.ok(invEnvOnce, !seen[e.Name], "%s: environment variable %s is defined twice: the kubelet keeps the last, so a value set again overrides the chart's unseen", w, e.Name)
			seen[e.Name] = true
		}
	}
}

func checkImage(r *result, where, image string) {
	ref, digest, hasDigest := strings.Cut(image, "@")
	if hasDigest {
		r.ok(invImage, strings.HasPrefix(digest, "sha256:") && len(digest) == len("sha256:")+64, "%s: image %q: bad digest", where, image)
	}
	// The tag is after the last colon that follows the last slash (a
	// registry host may carry a port).
	repo, tag := ref, ""
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		repo, tag = ref[:i], ref[i+1:]
	}
	r.ok(invImage, repo != "", "%s: image %q has no repository", where, image)
	r.ok(invImage, hasDigest || tag != "", "%s: image %q is neither tagged nor pinned by digest", where, image)
	r.ok(invImage, tag == "" || tagRE.MatchString(tag), "%s: image %q has an invalid tag", where, image)
	r.ok(invImage, !strings.EqualFold(tag, "latest"), "%s: image %q uses latest", where, image)
}

// egress is what the egress pod's checks learn about it.
type egress struct {
	countersign, envoy *container
	httpPort           int
	envoyPort          int
	// railsPath and railsData are the rails file: where countersign reads
	// it, and what the ConfigMap holds.
	railsPath, railsData string
}

func checkEgressPod(r *result, name string, s podSpec, configMaps map[string]object) *egress {
	where := "Deployment/" + name
	var cs, ev *container
	for i := range s.Containers {
		c := &s.Containers[i]
		switch c.Name {
		case "countersign":
			cs = c
		case "envoy":
			ev = c
		default:
			r.ok(invPodShape, false, "%s: unexpected container %q: the pod is Envoy and Countersign only (agents run in their own pods)", where, c.Name)
		}
	}
	if !r.ok(invPodShape, cs != nil && ev != nil, "%s: needs a countersign and an envoy container", where) {
		return nil
	}
	r.ok(invPodShape, slices.Equal(cs.Args, []string{"serve"}), "%s: countersign must run `serve`, got args %q", where, cs.Args)
	checkEnvoyLogLevel(r, where, slices.Concat(ev.Command, ev.Args))
	r.ok(invPodShape, s.EnableServiceLinks != nil && !*s.EnableServiceLinks,
		"%s: enableServiceLinks must be false (service variables share Countersign's COUNTERSIGN_ prefix)", where)

	volumes := map[string]volume{}
	for _, v := range s.Volumes {
		volumes[v.Name] = v
	}
	// Which containers (init ones included) mount each volume, and where.
	type mount struct{ container, path string }
	mounts := map[string][]mount{}
	for _, c := range slices.Concat(s.InitContainers, s.Containers) {
		for _, m := range c.VolumeMounts {
			mounts[m.Name] = append(mounts[m.Name], mount{c.Name, m.MountPath})
		}
	}
	mountedBy := func(vol string) []string {
		var names []string
		for _, m := range mounts[vol] {
			names = append(names, m.container)
		}
		slices.Sort(names)
		return slices.Compact(names)
	}
	// The volume and path under it that hold file p in container c.
	locate := func(c *container, p string) (vol, rel string, ok bool) {
		best := -1
		for _, m := range c.VolumeMounts {
			mp := strings.TrimSuffix(m.MountPath, "/")
			if (p == mp || strings.HasPrefix(p, mp+"/")) && len(mp) > best {
				best, vol, rel, ok = len(mp), m.Name, strings.TrimPrefix(strings.TrimPrefix(p, mp), "/"), true
			}
		}
		return vol, rel, ok
	}

	// The database URL: from a Secret, never a literal.
	val, secret, ok := cs.env("COUNTERSIGN_DATABASE_URL")
	r.ok(invDatabase, ok && secret != "" && val == "", "%s: COUNTERSIGN_DATABASE_URL must come from a secretKeyRef", where)
	dbSecret := secret

	// The Envoy listener (ext_authz, ext_proc: its ALLOW carries the rail
	// keys): a Unix socket in an emptyDir shared with Envoy only.
	envoyAddr, _, _ := cs.env("COUNTERSIGN_ENVOY_ADDR")
	sock, isUnix := strings.CutPrefix(envoyAddr, "unix:")
	sock = "/" + strings.TrimLeft(sock, "/")
	r.ok(invGRPCUnix, isUnix, "%s: COUNTERSIGN_ENVOY_ADDR must be unix:/path, got %q", where, envoyAddr)
	sockVol, sockRel, found := "", "", false
	if isUnix {
		sockVol, sockRel, found = locate(cs, sock)
		if r.ok(invSocketShare, found, "%s: the socket %s is in no volume of the countersign container", where, sock) {
			v := volumes[sockVol]
			r.ok(invSocketShare, v.EmptyDir != nil, "%s: the socket's volume %q must be an emptyDir", where, sockVol)
			r.ok(invSocketShare, slices.Equal(mountedBy(sockVol), []string{"countersign", "envoy"}),
				"%s: the socket's volume %q must be mounted by countersign and envoy only, is by %v", where, sockVol, mountedBy(sockVol))
		}
	}
	r.ok(invSocketShare, s.SecurityContext != nil && s.SecurityContext.FSGroup != nil,
		"%s: podSecurityContext.fsGroup is how Envoy reaches the 0660 socket", where)

	// Secrets: every Secret volume is mounted into countersign only; no
	// container but countersign (and the migration, for the database URL)
	// reads any Secret.
	secretVolumes := map[string]string{} // volume -> secret
	for _, v := range s.Volumes {
		switch {
		case v.Secret != nil:
			secretVolumes[v.Name] = v.Secret.SecretName
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				if src.Secret != nil {
					secretVolumes[v.Name] = src.Secret.Name
				}
			}
		}
	}
	for vol, sec := range secretVolumes {
		r.ok(invRailKeys, slices.Equal(mountedBy(vol), []string{"countersign"}),
			"%s: Secret volume %q (secret %s) must be mounted into countersign only, is by %v", where, vol, sec, mountedBy(vol))
	}
	for _, c := range slices.Concat(s.InitContainers, s.Containers) {
		for _, sec := range c.secretsRead() {
			allowed := c.Name == "countersign" || (c.Name == "migrate" && sec == dbSecret)
			r.ok(invRailKeys, allowed, "%s: container %s reads Secret %s", where, c.Name, sec)
		}
	}

	// The audit signing key, when set: a file of a Secret volume (which the
	// check above keeps to countersign).
	if keyPath, _, ok := cs.env("COUNTERSIGN_AUDIT_SIGNING_KEY"); ok {
		vol, _, found := locate(cs, keyPath)
		r.ok(invRailKeys, path.IsAbs(keyPath) && found && volumes[vol].Secret != nil,
			"%s: COUNTERSIGN_AUDIT_SIGNING_KEY %q is not a file of a Secret mounted into countersign", where, keyPath)
	}

	// The rails file: from a rendered ConfigMap; every key file in a
	// Secret mounted into countersign.
	railsPath, _, _ := cs.env("COUNTERSIGN_RAILS_FILE")
	railsData := ""
	var accounts map[string]rails.AccountConfig
	if r.ok(invRailsFile, path.IsAbs(railsPath), "%s: COUNTERSIGN_RAILS_FILE must be an absolute path, got %q", where, railsPath) {
		vol, rel, ok := locate(cs, railsPath)
		if r.ok(invRailsFile, ok && volumes[vol].ConfigMap != nil, "%s: the rails file %s is not in a ConfigMap volume", where, railsPath) {
			cm, ok := configMaps[volumes[vol].ConfigMap.Name]
			data, hasKey := cm.Data[rel]
			if r.ok(invRailsFile, ok && hasKey, "%s: ConfigMap %s with key %s (the rails file) is not rendered", where, volumes[vol].ConfigMap.Name, rel) {
				railsData = data
				accounts = checkRailsFile(r, where, data, func(keyFile string) (string, bool) {
					vol, rel, ok := locate(cs, keyFile)
					if !ok {
						return "", false
					}
					v := volumes[vol]
					if v.Secret == nil {
						return "", false
					}
					if len(v.Secret.Items) == 0 {
						return v.Secret.SecretName, true
					}
					for _, it := range v.Secret.Items {
						if it.Path == rel {
							return v.Secret.SecretName, true
						}
					}
					return "", false
				})
			}
		}
	}

	// HTTP: reachable by the kubelet; the probes on its port.
	httpAddr, _, _ := cs.env("COUNTERSIGN_HTTP_ADDR")
	host, portStr, err := net.SplitHostPort(httpAddr)
	httpPort, _ := strconv.Atoi(portStr)
	r.ok(invProbes, err == nil && httpPort > 0, "%s: COUNTERSIGN_HTTP_ADDR must be host:port, got %q", where, httpAddr)
	ip := net.ParseIP(host)
	r.ok(invProbes, host != "localhost" && (ip == nil || !ip.IsLoopback()), "%s: COUNTERSIGN_HTTP_ADDR %q is loopback: the kubelet's probes cannot reach it", where, httpAddr)
	for _, pr := range []struct {
		name, path string
		p          *probe
	}{{"readiness", "/readyz", cs.ReadinessProbe}, {"liveness", "/healthz", cs.LivenessProbe}} {
		if !r.ok(invProbes, pr.p != nil && pr.p.HTTPGet != nil, "%s: countersign needs an HTTP %s probe", where, pr.name) {
			continue
		}
		r.ok(invProbes, pr.p.HTTPGet.Path == pr.path, "%s: countersign %s probe path must be %s, got %q", where, pr.name, pr.path, pr.p.HTTPGet.Path)
		port, ok := cs.port(pr.p.HTTPGet.Port)
		r.ok(invProbes, ok && port == httpPort, "%s: countersign %s probe port %v is not COUNTERSIGN_HTTP_ADDR's %d", where, pr.name, pr.p.HTTPGet.Port, httpPort)
	}

	// Envoy's bootstrap: from a ConfigMap mounted into envoy.
	eg := &egress{countersign: cs, envoy: ev, httpPort: httpPort, railsPath: railsPath, railsData: railsData}
	cfgPath := ""
	for i, a := range ev.Args {
		if (a == "-c" || a == "--config-path") && i+1 < len(ev.Args) {
			cfgPath = ev.Args[i+1]
		}
	}
	vol, rel, ok := locate(ev, cfgPath)
	if !r.ok(invEnvoy, cfgPath != "" && ok && volumes[vol].ConfigMap != nil, "%s: envoy's -c %q is not in a ConfigMap volume", where, cfgPath) {
		return eg
	}
	cm, ok := configMaps[volumes[vol].ConfigMap.Name]
	data, hasKey := cm.Data[rel]
	if !r.ok(invEnvoy, ok && hasKey, "%s: ConfigMap %s with key %s (Envoy's bootstrap) is not rendered", where, volumes[vol].ConfigMap.Name, rel) {
		return eg
	}
	info := checkEnvoyBootstrap(r, data, accounts, false)
	if info == nil {
		return eg
	}
	// A listing proves an attempt absent only once the rail can no longer
	// apply it: Countersign's settle time must cover the longest a rail
	// route lets a rail call run.
	settle := config.DefaultRailSettle
	if v, _, ok := cs.env("COUNTERSIGN_RAIL_SETTLE_TIME"); ok {
		d, err := time.ParseDuration(v)
		r.ok(invEnvoy, err == nil, "%s: COUNTERSIGN_RAIL_SETTLE_TIME %q is not a duration", where, v)
		settle = d
	}
	r.ok(invEnvoy, info.longestRoute <= settle,
		"%s: the rail settle time (%s) is shorter than a rail route's timeout (%s): the reconciler could prove absent a request still at the rail", where, settle, info.longestRoute)
	eg.envoyPort = info.listenerPort
	// The pipe is the very socket Countersign listens on.
	if found {
		pvol, prel, ok := locate(ev, info.pipe)
		r.ok(invSocketShare, ok && pvol == sockVol && prel == sockRel,
			"envoy cluster countersign dials %s, which is not Countersign's socket %s (volume %s, %s)", info.pipe, sock, sockVol, sockRel)
	}
	hasPort := slices.ContainsFunc(ev.Ports, func(p struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"containerPort"`
	}) bool {
		return p.ContainerPort == info.listenerPort
	})
	r.ok(invEnvoy, hasPort, "%s: envoy's listener port %d is not a container port", where, info.listenerPort)
	return eg
}

// checkRailsFile parses the rails file strictly, as Countersign does, and
// checks each key file is in a Secret mounted into countersign.
func checkRailsFile(r *result, where, data string, secretFor func(string) (string, bool)) map[string]rails.AccountConfig {
	var f rails.File
	if !r.ok(invRailsFile, yaml.UnmarshalStrict([]byte(data), &f) == nil, "%s: the rails file does not parse strictly", where) {
		return nil
	}
	r.ok(invRailsFile, len(f.Rails) > 0, "%s: the rails file names no rail account", where)
	accounts := map[string]rails.AccountConfig{}
	for _, a := range f.Rails {
		r.ok(invRailsFile, a.Account != "" && len(a.Hosts) > 0 && (a.Rail == "stripe" || a.Rail == "razorpay"),
			"%s: rails account %q needs hosts and a rail of stripe or razorpay", where, a.Account)
		_, dup := accounts[a.Account]
		r.ok(invRailsFile, !dup, "%s: rails account %q is configured twice", where, a.Account)
		accounts[a.Account] = a
		_, ok := secretFor(a.KeyFile)
		r.ok(invRailKeys, path.IsAbs(a.KeyFile) && ok, "%s: rails account %q: key_file %q is not a file of a Secret mounted into countersign", where, a.Account, a.KeyFile)
	}
	return accounts
}

func checkMigrate(r *result, s podSpec, jobs []object) {
	runs := 0
	for _, c := range s.InitContainers {
		if slices.Equal(c.Args, []string{"migrate"}) {
			runs++
			checkMigrateContainer(r, "Deployment init container "+c.Name, c)
		}
	}
	for _, j := range jobs {
		var ws workloadSpec
		_ = json.Unmarshal(j.Spec, &ws)
		for _, c := range ws.Template.Spec.Containers {
			if !slices.Equal(c.Args, []string{"migrate"}) {
				continue
			}
			hooks := strings.Split(j.Metadata.Annotations["helm.sh/hook"], ",")
			r.ok(invMigrate, slices.Contains(hooks, "pre-install") && slices.Contains(hooks, "pre-upgrade"),
				"Job/%s runs migrate but is not a pre-install,pre-upgrade hook (got %q)", j.Metadata.Name, j.Metadata.Annotations["helm.sh/hook"])
			runs++
			checkMigrateContainer(r, "Job/"+j.Metadata.Name, c)
		}
	}
	r.ok(invMigrate, runs == 1, "`countersign migrate` must run exactly once before serve (a hook Job or an init container), found %d", runs)
}

func checkMigrateContainer(r *result, where string, c container) {
	val, secret, ok := c.env("COUNTERSIGN_DATABASE_URL")
	r.ok(invDatabase, ok && secret != "" && val == "", "%s: COUNTERSIGN_DATABASE_URL must come from a secretKeyRef", where)
	r.ok(invMigrate, len(c.VolumeMounts) == 0 || !slices.ContainsFunc(c.VolumeMounts, func(m struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
		SubPath   string `json:"subPath"`
	}) bool {
		return strings.HasPrefix(m.Name, "rail-key")
	}), "%s: the migration needs no rail key", where)
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// checkServices: every Service of the egress pods exposes Envoy's listener
// or Countersign's HTTP port, and nothing else.
func checkServices(r *result, podLabels map[string]string, eg *egress, services []object) {
	n := 0
	for _, o := range services {
		var s serviceSpec
		_ = json.Unmarshal(o.Spec, &s)
		if !selects(s.Selector, podLabels) {
			r.ok(invServices, false, "Service/%s selects no egress pod", o.Metadata.Name)
			continue
		}
		n++
		// Envoy's listener is plain HTTP and hands out nothing but what
		// Countersign allows, yet it is the agents' alone: a NodePort or
		// LoadBalancer Service, or an external IP, opens it beyond the
		// cluster, where only the NetworkPolicy (if any) stands.
		r.ok(invServices, (s.Type == "" || s.Type == "ClusterIP") && len(s.ExternalIPs) == 0,
			"Service/%s is type %q with externalIPs %q: the egress pods' Services are ClusterIP only, on no address outside the cluster", o.Metadata.Name, s.Type, s.ExternalIPs)
		for _, p := range s.Ports {
			ev, eok := eg.envoy.port(p.TargetPort)
			cs, cok := eg.countersign.port(p.TargetPort)
			r.ok(invServices, (eok && ev == eg.envoyPort) || (cok && cs == eg.httpPort),
				"Service/%s port %d targets %v: neither Envoy's listener nor Countersign's HTTP port", o.Metadata.Name, p.Port, p.TargetPort)
		}
	}
	r.ok(invServices, n > 0, "no Service reaches the egress pods")
}

func checkNetworkPolicies(r *result, podLabels map[string]string, eg *egress, netpols []object) {
	for _, o := range netpols {
		var s networkPolicySpec
		_ = json.Unmarshal(o.Spec, &s)
		r.ok(invNetPol, selects(s.PodSelector.MatchLabels, podLabels), "NetworkPolicy/%s does not select the egress pods", o.Metadata.Name)
		for _, in := range s.Ingress {
			r.ok(invNetPol, len(in.Ports) > 0, "NetworkPolicy/%s has an ingress rule for every port", o.Metadata.Name)
			for _, p := range in.Ports {
				ev, eok := eg.envoy.port(p.Port)
				cs, cok := eg.countersign.port(p.Port)
				r.ok(invNetPol, (eok && ev == eg.envoyPort) || (cok && cs == eg.httpPort),
					"NetworkPolicy/%s admits port %v: neither Envoy's listener nor Countersign's HTTP port", o.Metadata.Name, p.Port)
			}
		}
	}
}
