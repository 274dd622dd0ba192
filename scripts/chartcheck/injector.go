package main

// Mode injector: the checks of a rendering of `countersign inject`, its
// Service and MutatingWebhookConfiguration, its certificate, and the
// ConfigMaps the injected sidecars read (docs/injection.md).

import (
	"encoding/base64"
	"encoding/json"
	"net"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/countersign/countersign/internal/inject"
	"github.com/countersign/countersign/internal/rails"
)

const (
	invWebhook        = "webhook-fails-closed"
	invWebhookScope   = "webhook-scope"
	invWebhookService = "webhook-reaches-injector"
	invWebhookTLS     = "webhook-tls"
	invRBAC           = "rbac-minimal"
	invInjectorSecret = "injector-reads-no-secret-but-its-certificate"
	invInjectorAvail  = "injector-availability"
	invInjectorFlags  = "injector-flags"
	invSidecarEnvoy   = "sidecar-envoy-bootstrap"
	invSidecarRails   = "sidecar-rails-file"
)

// injector is what the checks learn of the injector, for the smoke run.
type injector struct {
	container *container
	namespace string
	certFile  string
	keyFile   string
	// envoyConfigMap is the bootstrap the injected Envoy reads; the smoke
	// run looks for it in the patch.
	envoyConfigMap string
	// With --close-egress: the agents' UID and the egress container's
	// image (the smoke run's pods run as that UID, or are refused).
	egressUID   int64
	egressImage string
}

type labelSelector struct {
	MatchLabels      map[string]string `json:"matchLabels"`
	MatchExpressions []struct {
		Key      string   `json:"key"`
		Operator string   `json:"operator"`
		Values   []string `json:"values"`
	} `json:"matchExpressions"`
}

type webhook struct {
	Name         string `json:"name"`
	ClientConfig struct {
		URL     *string `json:"url"`
		Service *struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
			Path      string `json:"path"`
			Port      *int   `json:"port"`
		} `json:"service"`
		CABundle string `json:"caBundle"`
	} `json:"clientConfig"`
	NamespaceSelector *labelSelector `json:"namespaceSelector"`
	ObjectSelector    *labelSelector `json:"objectSelector"`
	Rules             []struct {
		APIGroups   []string `json:"apiGroups"`
		APIVersions []string `json:"apiVersions"`
		Operations  []string `json:"operations"`
		Resources   []string `json:"resources"`
	} `json:"rules"`
	FailurePolicy           string   `json:"failurePolicy"`
	SideEffects             string   `json:"sideEffects"`
	AdmissionReviewVersions []string `json:"admissionReviewVersions"`
	TimeoutSeconds          *int     `json:"timeoutSeconds"`
}

type webhookConfiguration struct {
	Metadata struct {
		Name        string            `json:"name"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Webhooks []webhook `json:"webhooks"`
}

type certificateSpec struct {
	SecretName string   `json:"secretName"`
	DNSNames   []string `json:"dnsNames"`
	IssuerRef  struct {
		Name string `json:"name"`
		Kind string `json:"kind"`
	} `json:"issuerRef"`
}

// injectFlags are the injector container's --name=value arguments after
// `inject`; list flags (rail-key, base-url) may repeat.
func injectFlags(args []string) (map[string][]string, bool) {
	if len(args) == 0 || args[0] != "inject" {
		return nil, false
	}
	flags := map[string][]string{}
	for i := 1; i < len(args); i++ {
		name, ok := strings.CutPrefix(args[i], "--")
		if !ok {
			return nil, false
		}
		k, v, hasValue := strings.Cut(name, "=")
		if !hasValue && i+1 < len(args) {
			i++
			v = args[i]
		}
		flags[k] = append(flags[k], v)
	}
	return flags, true
}

func one(flags map[string][]string, name string) string {
	if v := flags[name]; len(v) == 1 {
		return v[0]
	}
	return ""
}

func checkInjectorMode(r *result, docs []map[string]any, objs []object) *injector {
	var deployments, services, pdbs, certs, jobs, rbac []object
	var mwcs []webhookConfiguration
	configMaps := map[string]map[string]object{} // namespace -> name -> ConfigMap
	for i, o := range objs {
		switch o.Kind {
		case "Deployment":
			deployments = append(deployments, o)
		case "Service":
			services = append(services, o)
		case "Job":
			jobs = append(jobs, o)
		case "PodDisruptionBudget":
			pdbs = append(pdbs, o)
		case "Certificate":
			certs = append(certs, o)
		case "ConfigMap":
			if configMaps[o.Metadata.Namespace] == nil {
				configMaps[o.Metadata.Namespace] = map[string]object{}
			}
			configMaps[o.Metadata.Namespace][o.Metadata.Name] = o
		case "MutatingWebhookConfiguration":
			var w webhookConfiguration
			if r.ok(invParse, decode(docs[i], &w) == nil, "MutatingWebhookConfiguration/%s does not parse", o.Metadata.Name) {
				mwcs = append(mwcs, w)
			}
		case "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding":
			rbac = append(rbac, o)
		case "Secret":
			r.ok(invInjectorSecret, false, "Secret/%s: the chart renders no Secret (rail keys, the ledger URL and the certificate are the operator's or cert-manager's)", o.Metadata.Name)
		}
	}
	if !r.ok(invPodShape, len(deployments) == 1, "mode injector: want exactly one Deployment (the injector), got %d", len(deployments)) {
		return nil
	}
	if !r.ok(invWebhook, len(mwcs) == 1, "want one MutatingWebhookConfiguration, got %d", len(mwcs)) {
		return nil
	}
	d := deployments[0]
	where := "Deployment/" + d.Metadata.Name
	var ws workloadSpec
	_ = json.Unmarshal(d.Spec, &ws)
	s := ws.Template.Spec
	if !r.ok(invPodShape, len(s.Containers) == 1 && len(s.InitContainers) == 0, "%s: the injector pod is one container", where) {
		return nil
	}
	c := &s.Containers[0]
	flags, ok := injectFlags(c.Args)
	if !r.ok(invInjectorFlags, ok, "%s: args must be `inject --flag=value…`, got %q", where, c.Args) {
		return nil
	}
	ns := d.Metadata.Namespace
	inj := &injector{container: c, namespace: ns, certFile: one(flags, "tls-cert-file"), keyFile: one(flags, "tls-key-file"),
		envoyConfigMap: one(flags, "envoy-configmap")}
	r.ok(invInjectorFlags, one(flags, "namespace") == ns && ns != "", "%s: --namespace %q must be the injector's own namespace %q (never injected)", where, one(flags, "namespace"), ns)
	checkImage(r, where+" --countersign-image", one(flags, "countersign-image"))
	checkImage(r, where+" --envoy-image", one(flags, "envoy-image"))
	if one(flags, "close-egress") == "true" {
		inj.egressImage = one(flags, "egress-image")
		checkImage(r, where+" --egress-image", inj.egressImage)
		uid, err := strconv.ParseInt(one(flags, "egress-agent-uid"), 10, 64)
		r.ok(invInjectorFlags, err == nil && uid > 0, "%s: --close-egress needs --egress-agent-uid, the agents' UID, got %q", where, one(flags, "egress-agent-uid"))
		inj.egressUID = uid
	}

	// Availability: every opted-in pod's creation waits on the injector.
	replicas := 1
	var spec struct {
		Replicas *int `json:"replicas"`
	}
	_ = json.Unmarshal(d.Spec, &spec)
	if spec.Replicas != nil {
		replicas = *spec.Replicas
	}
	r.ok(invInjectorAvail, replicas >= 1, "%s: replicas must be at least 1", where)
	if replicas > 1 {
		covered := slices.ContainsFunc(pdbs, func(o object) bool {
			var p struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				MinAvailable any `json:"minAvailable"`
			}
			_ = json.Unmarshal(o.Spec, &p)
			return selects(p.Selector.MatchLabels, ws.Template.Metadata.Labels) && p.MinAvailable != nil
		})
		r.ok(invInjectorAvail, covered, "%s: %d replicas but no PodDisruptionBudget with minAvailable selects them", where, replicas)
	}

	// What the injector reads: its certificate, nothing else.
	volumes := map[string]volume{}
	for _, v := range s.Volumes {
		volumes[v.Name] = v
	}
	protected := map[string]bool{one(flags, "database-secret"): true}
	for _, rk := range flags["rail-key"] {
		_, ref, _ := strings.Cut(rk, "=")
		sec, _, _ := strings.Cut(ref, "/")
		protected[sec] = true
	}
	tlsSecret, tlsVolume := "", ""
	for _, v := range s.Volumes {
		sec := ""
		switch {
		case v.Secret != nil:
			sec = v.Secret.SecretName
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				if src.Secret != nil {
					sec = src.Secret.Name
				}
			}
		default:
			continue
		}
		r.ok(invInjectorSecret, !protected[sec], "%s: volume %q mounts Secret %s, a rail key or the ledger URL: only the injected countersign container may", where, v.Name, sec)
		r.ok(invInjectorSecret, tlsSecret == "", "%s: the injector mounts one Secret (its certificate), found %s and %s", where, tlsSecret, sec)
		tlsSecret, tlsVolume = sec, v.Name
	}
	r.ok(invInjectorSecret, len(c.secretsRead()) == 0, "%s: the injector reads Secrets %v through its environment", where, c.secretsRead())
	if one(flags, "tls-mode") == "self" {
		checkSelfTLS(r, where, docs, objs, rbac, flags, s, tlsSecret, mwcs[0], ns)
	} else {
		for _, o := range rbac {
			// The injector reads nothing from the API server and patches
			// nothing (cert-manager or the operator fills caBundle).
			r.ok(invRBAC, false, "%s/%s: the injector calls no Kubernetes API and needs no RBAC", o.Kind, o.Metadata.Name)
		}
		checkInjectorTLS(r, where, c, inj, tlsVolume, tlsSecret, mwcs[0], certs, ns, volumes)
	}

	// The Service the webhooks call, the port behind it, the probes.
	listen := one(flags, "listen-addr")
	if listen == "" {
		listen = ":8443"
	}
	_, lp, err := net.SplitHostPort(listen)
	listenPort, _ := strconv.Atoi(lp)
	r.ok(invWebhookService, err == nil && listenPort > 0, "%s: --listen-addr %q is not host:port", where, listen)
	for _, pr := range []struct {
		name string
		p    *probe
	}{{"readiness", c.ReadinessProbe}, {"liveness", c.LivenessProbe}} {
		if !r.ok(invProbes, pr.p != nil && pr.p.HTTPGet != nil, "%s: the injector needs an HTTPS %s probe", where, pr.name) {
			continue
		}
		port, ok := c.port(pr.p.HTTPGet.Port)
		r.ok(invProbes, pr.p.HTTPGet.Scheme == "HTTPS" && pr.p.HTTPGet.Path == "/healthz" && ok && port == listenPort,
			"%s: %s probe must be HTTPS GET /healthz on --listen-addr's port %d, got %s %s %v", where, pr.name, listenPort, pr.p.HTTPGet.Scheme, pr.p.HTTPGet.Path, pr.p.HTTPGet.Port)
	}
	checkWebhooks(r, mwcs[0], ns, services, c, listenPort, ws.Template.Metadata.Labels)
	checkSecretsPolicy(r, docs, objs, flags, mwcs[0])

	checkSidecarConfig(r, where, flags, configMaps, ns)
	// Injected Countersigns never migrate: the hook Job must.
	checkMigrate(r, podSpec{}, jobs)
	return inj
}

// checkInjectorTLS: the injector serves the certificate of a Secret it
// mounts, and the API server trusts that certificate's CA: either a
// caBundle on every webhook, or cert-manager's CA injector pointed at the
// rendered Certificate that writes that Secret, for the Service's name.
func checkInjectorTLS(r *result, where string, c *container, inj *injector, tlsVolume, tlsSecret string, mwc webhookConfiguration, certs []object, ns string, volumes map[string]volume) {
	inVolume := func(file string) bool {
		for _, m := range c.VolumeMounts {
			if m.Name == tlsVolume && path.Dir(file) == strings.TrimSuffix(m.MountPath, "/") {
				v := volumes[tlsVolume]
				if v.Secret == nil || len(v.Secret.Items) == 0 {
					return true
				}
				return slices.ContainsFunc(v.Secret.Items, func(it struct {
					Key  string `json:"key"`
					Path string `json:"path"`
				}) bool {
					return it.Path == path.Base(file)
				})
			}
		}
		return false
	}
	r.ok(invWebhookTLS, tlsSecret != "" && inVolume(inj.certFile) && inVolume(inj.keyFile),
		"%s: --tls-cert-file %q and --tls-key-file %q must be files of the certificate Secret's volume", where, inj.certFile, inj.keyFile)
	svcName := ""
	for _, w := range mwc.Webhooks {
		if w.ClientConfig.Service != nil {
			svcName = w.ClientConfig.Service.Name
		}
	}
	from, annotated := mwc.Metadata.Annotations["cert-manager.io/inject-ca-from"]
	if !annotated {
		for _, w := range mwc.Webhooks {
			pem, err := base64.StdEncoding.DecodeString(w.ClientConfig.CABundle)
			r.ok(invWebhookTLS, err == nil && strings.Contains(string(pem), "BEGIN CERTIFICATE"),
				"webhook %s: no caBundle (base64 PEM) and no cert-manager.io/inject-ca-from: the API server cannot verify the injector", w.Name)
		}
		return
	}
	certNS, certName, _ := strings.Cut(from, "/")
	var cert *certificateSpec
	for _, o := range certs {
		if o.Metadata.Namespace == certNS && o.Metadata.Name == certName {
			cert = &certificateSpec{}
			_ = json.Unmarshal(o.Spec, cert)
		}
	}
	if !r.ok(invWebhookTLS, cert != nil, "cert-manager.io/inject-ca-from %q names no rendered Certificate", from) {
		return
	}
	r.ok(invWebhookTLS, cert.SecretName == tlsSecret, "Certificate %s writes Secret %q, but the injector serves %q", from, cert.SecretName, tlsSecret)
	r.ok(invWebhookTLS, slices.Contains(cert.DNSNames, svcName+"."+ns+".svc"), "Certificate %s: dnsNames %v lack %s.%s.svc, the name the API server calls", from, cert.DNSNames, svcName, ns)
	// An Issuer the chart renders, or the operator's own (issuerRef).
	r.ok(invWebhookTLS, cert.IssuerRef.Name != "", "Certificate %s names no issuer", from)
}

func nameNotIn(sel *labelSelector, ns string) bool {
	return sel != nil && slices.ContainsFunc(sel.MatchExpressions, func(e struct {
		Key      string   `json:"key"`
		Operator string   `json:"operator"`
		Values   []string `json:"values"`
	}) bool {
		return e.Key == "kubernetes.io/metadata.name" && e.Operator == "NotIn" && slices.Contains(e.Values, ns)
	})
}

func labelIs(sel *labelSelector, key, value string) bool {
	if sel == nil {
		return false
	}
	if sel.MatchLabels[key] == value {
		return true
	}
	for _, e := range sel.MatchExpressions {
		if e.Key == key && e.Operator == "In" && slices.Equal(e.Values, []string{value}) {
			return true
		}
	}
	return false
}

func labelNotIn(sel *labelSelector, key, value string) bool {
	if sel == nil {
		return false
	}
	for _, e := range sel.MatchExpressions {
		if e.Key == key && e.Operator == "NotIn" && slices.Contains(e.Values, value) {
			return true
		}
	}
	return false
}

// checkWebhooks: two webhooks, one per path, both failing closed, for pod
// CREATE and UPDATE (pods and pods/ephemeralcontainers: an update may swap
// a sidecar's image, an ephemeral container mount any volume, and the
// injector judges both) and nothing else, never kube-system or the
// injector's namespace, each calling the injector's Service on a port that
// reaches its HTTPS listener.
func checkWebhooks(r *result, mwc webhookConfiguration, ns string, services []object, c *container, listenPort int, podLabels map[string]string) {
	paths := map[string]int{}
	for _, w := range mwc.Webhooks {
		at := "webhook " + w.Name
		r.ok(invWebhook, w.FailurePolicy == "Fail", "%s: failurePolicy must be Fail (a pod that should be guarded is never admitted unguarded), got %q", at, w.FailurePolicy)
		r.ok(invWebhook, w.SideEffects == "None", "%s: sideEffects must be None, got %q", at, w.SideEffects)
		r.ok(invWebhook, slices.Equal(w.AdmissionReviewVersions, []string{"v1"}), "%s: admissionReviewVersions must be [v1] (the injector serves v1 only), got %q", at, w.AdmissionReviewVersions)
		r.ok(invWebhook, w.TimeoutSeconds != nil && *w.TimeoutSeconds >= 1 && *w.TimeoutSeconds <= 30, "%s: timeoutSeconds must be set, 1-30", at)
		r.ok(invWebhook, len(w.Rules) > 0, "%s: no rules", at)
		for _, rule := range w.Rules {
			r.ok(invWebhook, slices.Equal(rule.APIGroups, []string{""}) && slices.Equal(rule.APIVersions, []string{"v1"}) &&
				slices.Equal(rule.Operations, []string{"CREATE", "UPDATE"}) && slices.Equal(rule.Resources, []string{"pods", "pods/" + inject.SubresourceEphemeral}),
				"%s: a rule must be core/v1 operations [CREATE, UPDATE] of resources [pods, pods/%s]: an UPDATE may swap a sidecar's image "+
					"and an ephemeral container mount any volume, and the injector refuses anything else; got %+v", at, inject.SubresourceEphemeral, rule)
		}
		for _, excluded := range []string{"kube-system", ns} {
			r.ok(invWebhookScope, nameNotIn(w.NamespaceSelector, excluded), "%s: namespaceSelector must exclude %s (kubernetes.io/metadata.name NotIn)", at, excluded)
		}

		cc := w.ClientConfig
		if !r.ok(invWebhookService, cc.URL == nil && cc.Service != nil, "%s: clientConfig must name the injector's Service, not a URL", at) {
			continue
		}
		paths[cc.Service.Path]++
		switch cc.Service.Path {
		case inject.PathNamespace:
			r.ok(invWebhookScope, labelIs(w.NamespaceSelector, inject.InjectKey, "enabled"),
				"%s: %s serves namespaces labelled %s=enabled: its namespaceSelector must say so", at, inject.PathNamespace, inject.InjectKey)
		case inject.PathPod:
			r.ok(invWebhookScope, labelIs(w.ObjectSelector, inject.InjectKey, "true"),
				"%s: %s serves pods labelled %s: \"true\": its objectSelector must say so (else every pod of the cluster waits on the injector)", at, inject.PathPod, inject.InjectKey)
			r.ok(invWebhookScope, labelNotIn(w.NamespaceSelector, inject.InjectKey, "enabled"),
				"%s: %s must skip namespaces labelled %s=enabled (the namespace webhook's)", at, inject.PathPod, inject.InjectKey)
		default:
			r.ok(invWebhookService, false, "%s: path %q is neither %s nor %s", at, cc.Service.Path, inject.PathNamespace, inject.PathPod)
		}
		port := 443
		if cc.Service.Port != nil {
			port = *cc.Service.Port
		}
		reached := false
		for _, o := range services {
			if o.Metadata.Name != cc.Service.Name || o.Metadata.Namespace != cc.Service.Namespace {
				continue
			}
			var s serviceSpec
			_ = json.Unmarshal(o.Spec, &s)
			r.ok(invWebhookService, selects(s.Selector, podLabels), "Service/%s does not select the injector's pods", o.Metadata.Name)
			for _, p := range s.Ports {
				if p.Port != port {
					continue
				}
				tp, ok := c.port(p.TargetPort)
				if p.TargetPort == nil {
					tp, ok = p.Port, true
				}
				reached = ok && tp == listenPort && slices.ContainsFunc(c.Ports, func(cp struct {
					Name          string `json:"name"`
					ContainerPort int    `json:"containerPort"`
				}) bool {
					return cp.ContainerPort == listenPort
				})
			}
		}
		r.ok(invWebhookService, reached, "%s: Service %s/%s port %d does not reach the injector's --listen-addr port %d",
			at, cc.Service.Namespace, cc.Service.Name, port, listenPort)
	}
	r.ok(invWebhook, len(mwc.Webhooks) == 2 && paths[inject.PathNamespace] == 1 && paths[inject.PathPod] == 1,
		"want two webhooks, one on %s and one on %s, got %v", inject.PathNamespace, inject.PathPod, paths)
}

// checkSidecarConfig: the ConfigMaps the injector names, in every
// namespace the chart renders them into, are what the injected pod needs:
// Envoy's bootstrap with its listener on 127.0.0.1:15001, admin and the
// countersign cluster on sockets in the socket volume, every --base-url
// routed to a rail account; the rails file with each --rail-key account's
// key file where the injector mounts it.
func checkSidecarConfig(r *result, where string, flags map[string][]string, configMaps map[string]map[string]object, ns string) {
	envoyCM, envoyKey := one(flags, "envoy-configmap"), one(flags, "envoy-configmap-key")
	railsCM, railsKey := one(flags, "rails-configmap"), one(flags, "rails-configmap-key")
	if envoyKey == "" {
		envoyKey = "envoy.yaml"
	}
	if railsKey == "" {
		railsKey = "rails.yaml"
	}
	r.ok(invInjectorFlags, envoyCM != "" && railsCM != "" && one(flags, "database-secret") != "",
		"%s: --envoy-configmap, --rails-configmap and --database-secret are required", where)
	railKeys := map[string]string{} // account -> secret/key
	for _, rk := range flags["rail-key"] {
		acct, ref, ok := strings.Cut(rk, "=")
		r.ok(invInjectorFlags, ok && strings.Contains(ref, "/"), "%s: --rail-key %q is not account=secret/key", where, rk)
		railKeys[acct] = ref
	}
	r.ok(invInjectorFlags, len(railKeys) > 0, "%s: no --rail-key", where)
	type baseURL struct{ name, hostPort, host string }
	var baseURLs []baseURL
	for _, b := range flags["base-url"] {
		name, raw, _ := strings.Cut(b, "=")
		u, err := url.Parse(raw)
		if r.ok(invInjectorFlags, err == nil && u.Scheme == "http" && u.Port() == strconv.Itoa(inject.EnvoyPort),
			"%s: --base-url %q must be NAME=http://host:%d", where, b, inject.EnvoyPort) {
			baseURLs = append(baseURLs, baseURL{name, u.Host, u.Hostname()})
		}
	}
	r.ok(invInjectorFlags, len(baseURLs) > 0, "%s: no --base-url: the agent's SDK would not find Envoy", where)

	namespaces := 0
	for cmNS, cms := range configMaps {
		envoy, hasEnvoy := cms[envoyCM]
		railsObj, hasRails := cms[railsCM]
		if !hasEnvoy && !hasRails {
			continue
		}
		namespaces++
		at := "namespace " + cmNS
		r.ok(invInjectorFlags, cmNS != ns && cmNS != "kube-system", "%s: sidecar ConfigMaps in a namespace that is never injected", at)
		if !r.ok(invInjectorFlags, hasEnvoy && hasRails, "%s: ConfigMaps %s and %s (named by --envoy-configmap and --rails-configmap) must both be rendered", at, envoyCM, railsCM) {
			continue
		}
		railsData, ok := railsObj.Data[railsKey]
		if !r.ok(invSidecarRails, ok, "%s: ConfigMap %s has no key %s", at, railsCM, railsKey) {
			continue
		}
		var f rails.File
		if !r.ok(invSidecarRails, yaml.UnmarshalStrict([]byte(railsData), &f) == nil, "%s: the rails file does not parse strictly", at) {
			continue
		}
		accounts := map[string]rails.AccountConfig{}
		for _, a := range f.Rails {
			accounts[a.Account] = a
			want := inject.RailKeyDir + "/" + a.Account + "/key"
			r.ok(invSidecarRails, a.KeyFile == want, "%s: rails account %q: key_file %q is not where the injector mounts its key (%s)", at, a.Account, a.KeyFile, want)
			_, hasKey := railKeys[a.Account]
			r.ok(invSidecarRails, hasKey, "%s: rails account %q has no --rail-key: its key file would not exist", at, a.Account)
			// The injected countersign runs with --in-agent-pod: the agent
			// shares its loopback, so it refuses to start on an http URL.
			urls := map[string]string{"base_url": a.BaseURL}
			if a.MCP != nil {
				urls["mcp.base_url"] = a.MCP.BaseURL
			}
			for field, raw := range urls {
				u, err := url.Parse(raw)
				r.ok(invSidecarRails, raw == "" || (err == nil && u.Scheme == "https"),
					"%s: rails account %q: %s %q is not https: the injected countersign runs in the agent's pod (--in-agent-pod), whose loopback the agent shares, and refuses it", at, a.Account, field, raw)
			}
		}
		for acct := range railKeys {
			_, ok := accounts[acct]
			r.ok(invSidecarRails, ok, "%s: --rail-key account %q is not in the rails file", at, acct)
		}

		data, ok := envoy.Data[envoyKey]
		if !r.ok(invSidecarEnvoy, ok, "%s: ConfigMap %s has no key %s", at, envoyCM, envoyKey) {
			continue
		}
		info := checkEnvoyBootstrap(r, data, accounts, true)
		if info == nil {
			continue
		}
		r.ok(invSidecarEnvoy, info.pipe == inject.EnvoySocket, "%s: Envoy's countersign cluster dials %q, not the injected Countersign's socket %s", at, info.pipe, inject.EnvoySocket)
		r.ok(invSidecarEnvoy, info.adminPipe != "" && path.Dir(info.adminPipe) == inject.SocketDir,
			"%s: Envoy's admin must be a socket in %s (the agent shares the pod's loopback), got %q", at, inject.SocketDir, info.adminPipe)
		r.ok(invSidecarEnvoy, info.listenerAddr == "127.0.0.1" && info.listenerPort == inject.EnvoyPort,
			"%s: the listener must be 127.0.0.1:%d (the injected pod's; the base URLs point there), got %s:%d", at, inject.EnvoyPort, info.listenerAddr, info.listenerPort)
		reached := map[string]bool{}
		for _, b := range baseURLs {
			acct, ok := info.routed[b.hostPort]
			_, ok2 := info.routed[b.host]
			r.ok(invSidecarEnvoy, ok && ok2, "%s: --base-url %s host %s is routed to no rail account", at, b.name, b.hostPort)
			reached[acct] = true
		}
		for acct := range accounts {
			r.ok(invSidecarEnvoy, reached[acct], "%s: rail account %q has no --base-url: the agent cannot reach it", at, acct)
		}
	}
	_ = namespaces // none is allowed: the operator then creates them (README)
}

// selfTLSInjector: a pod running `countersign inject --tls-mode=self`.
func selfTLSInjector(s podSpec) bool {
	for _, c := range s.Containers {
		if flags, ok := injectFlags(c.Args); ok && one(flags, "tls-mode") == "self" {
			return true
		}
	}
	return false
}

type rbacRule struct {
	APIGroups     []string `json:"apiGroups"`
	Resources     []string `json:"resources"`
	ResourceNames []string `json:"resourceNames"`
	Verbs         []string `json:"verbs"`
}

type rbacObject struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Rules   []rbacRule `json:"rules"`
	RoleRef struct {
		Kind string `json:"kind"`
		Name string `json:"name"`
	} `json:"roleRef"`
	Subjects []struct {
		Kind      string `json:"kind"`
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"subjects"`
}

// checkSelfTLS: an injector keeping its own certificate (webhookcert) gets
// a token and exactly this RBAC, bound to its service account and nothing
// else: create Secrets in its namespace (create cannot be limited to a
// name), get and update its certificate Secret, get and patch its own
// webhook configuration. It mounts no certificate; the webhook
// configuration carries no caBundle of the chart's (helm would write it
// back over the injector's on every upgrade); and the names it is given
// are the ones rendered.
func checkSelfTLS(r *result, where string, docs []map[string]any, objs []object, rbac []object, flags map[string][]string, s podSpec, tlsSecret string, mwc webhookConfiguration, ns string) {
	r.ok(invWebhookTLS, s.AutomountServiceAccountToken != nil && *s.AutomountServiceAccountToken,
		"%s: --tls-mode=self needs its service account token (automountServiceAccountToken: true)", where)
	r.ok(invWebhookTLS, one(flags, "tls-cert-file") == "" && one(flags, "tls-key-file") == "" && tlsSecret == "",
		"%s: --tls-mode=self makes its own certificate: no --tls-cert-file, --tls-key-file or certificate volume", where)
	r.ok(invWebhookTLS, one(flags, "webhook-config") == mwc.Metadata.Name,
		"%s: --webhook-config %q, but the chart renders MutatingWebhookConfiguration %q", where, one(flags, "webhook-config"), mwc.Metadata.Name)
	_, annotated := mwc.Metadata.Annotations["cert-manager.io/inject-ca-from"]
	r.ok(invWebhookTLS, !annotated, "MutatingWebhookConfiguration %s: cert-manager's CA injection beside --tls-mode=self: two writers of caBundle", mwc.Metadata.Name)
	for _, w := range mwc.Webhooks {
		r.ok(invWebhookTLS, w.ClientConfig.CABundle == "", "webhook %s: a rendered caBundle beside --tls-mode=self: every helm upgrade would write it back over the injector's", w.Name)
		if w.ClientConfig.Service != nil {
			r.ok(invWebhookTLS, one(flags, "service") == w.ClientConfig.Service.Name,
				"%s: --service %q, but webhook %s calls Service %q: the leaf would be for another name", where, one(flags, "service"), w.Name, w.ClientConfig.Service.Name)
		}
	}
	sa := s.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	secret := one(flags, "tls-secret")
	var roles, clusterRoles, bindings, clusterBindings []rbacObject
	for i, o := range objs {
		if !slices.ContainsFunc(rbac, func(x object) bool { return x.Kind == o.Kind && x.Metadata.Name == o.Metadata.Name }) {
			continue
		}
		var ro rbacObject
		if !r.ok(invParse, decode(docs[i], &ro) == nil, "%s/%s does not parse", o.Kind, o.Metadata.Name) {
			continue
		}
		switch ro.Kind {
		case "Role":
			roles = append(roles, ro)
		case "ClusterRole":
			clusterRoles = append(clusterRoles, ro)
		case "RoleBinding":
			bindings = append(bindings, ro)
		case "ClusterRoleBinding":
			clusterBindings = append(clusterBindings, ro)
		}
	}
	wantRole := []rbacRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{secret}, Verbs: []string{"get", "update"}},
	}
	wantClusterRole := []rbacRule{
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"}, ResourceNames: []string{mwc.Metadata.Name}, Verbs: []string{"get", "patch"}},
	}
	if r.ok(invRBAC, len(roles) == 1 && len(clusterRoles) == 1 && len(bindings) == 1 && len(clusterBindings) == 1,
		"--tls-mode=self: want one Role, ClusterRole, RoleBinding and ClusterRoleBinding, got %d, %d, %d and %d", len(roles), len(clusterRoles), len(bindings), len(clusterBindings)) {
		r.ok(invRBAC, roles[0].Metadata.Namespace == ns && rulesEqual(roles[0].Rules, wantRole),
			"Role %s: rules %+v, want exactly %+v in namespace %s", roles[0].Metadata.Name, roles[0].Rules, wantRole, ns)
		r.ok(invRBAC, rulesEqual(clusterRoles[0].Rules, wantClusterRole),
			"ClusterRole %s: rules %+v, want exactly %+v", clusterRoles[0].Metadata.Name, clusterRoles[0].Rules, wantClusterRole)
		for _, b := range []struct {
			binding  rbacObject
			roleKind string
			role     string
		}{{bindings[0], "Role", roles[0].Metadata.Name}, {clusterBindings[0], "ClusterRole", clusterRoles[0].Metadata.Name}} {
			bound := b.binding.RoleRef.Kind == b.roleKind && b.binding.RoleRef.Name == b.role && len(b.binding.Subjects) == 1 &&
				b.binding.Subjects[0].Kind == "ServiceAccount" && b.binding.Subjects[0].Name == sa && b.binding.Subjects[0].Namespace == ns
			r.ok(invRBAC, bound, "%s %s: must bind %s %s to the injector's service account %s/%s alone", b.binding.Kind, b.binding.Metadata.Name, b.roleKind, b.role, ns, sa)
		}
	}
	r.ok(invWebhookTLS, secret != "" && len(roles) == 1 && len(roles[0].Rules) == 2 && slices.Equal(roles[0].Rules[1].ResourceNames, []string{secret}),
		"%s: --tls-secret %q is not the Secret the Role lets it read and update", where, secret)
}

func rulesEqual(a, b []rbacRule) bool {
	return slices.EqualFunc(a, b, func(x, y rbacRule) bool {
		return slices.Equal(x.APIGroups, y.APIGroups) && slices.Equal(x.Resources, y.Resources) &&
			slices.Equal(x.ResourceNames, y.ResourceNames) && slices.Equal(x.Verbs, y.Verbs)
	})
}
