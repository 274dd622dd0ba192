package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// injectorMutations break a copy of a mode injector rendering one way
// each; want is the invariant that must catch it.
var injectorMutations = []mutation{
	{"the sidecars' rails file reaching a rail over plain HTTP on loopback (the agent's too)", invSidecarRails, func(d []map[string]any) error {
		return editConfigMapData(d, "rails.yaml", "base_url: https://api.stripe.com", "base_url: http://127.0.0.1:12111")
	}},
	{"a webhook failing open", invWebhook, func(d []map[string]any) error {
		return eachWebhook(d, func(w map[string]any) { w["failurePolicy"] = "Ignore" }, 1)
	}},
	{"a webhook with side effects", invWebhook, func(d []map[string]any) error {
		return eachWebhook(d, func(w map[string]any) { w["sideEffects"] = "Some" }, 1)
	}},
	{"a webhook asking for v1beta1 reviews", invWebhook, func(d []map[string]any) error {
		return eachWebhook(d, func(w map[string]any) { w["admissionReviewVersions"] = []any{"v1", "v1beta1"} }, 1)
	}},
	{"a webhook without a timeout", invWebhook, func(d []map[string]any) error {
		return eachWebhook(d, func(w map[string]any) { delete(w, "timeoutSeconds") }, 1)
	}},
	{"a webhook for pod CREATE only (a sidecar's image swapped by an UPDATE)", invWebhook, func(d []map[string]any) error {
		return eachWebhook(d, func(w map[string]any) {
			w["rules"].([]any)[0].(map[string]any)["operations"] = []any{"CREATE"}
		}, 1)
	}},
	{"a webhook without pods/ephemeralcontainers (a debug container on the rail key)", invWebhook, func(d []map[string]any) error {
		return eachWebhook(d, func(w map[string]any) {
			w["rules"].([]any)[0].(map[string]any)["resources"] = []any{"pods"}
		}, 1)
	}},
	{"a webhook for pod DELETE too", invWebhook, func(d []map[string]any) error {
		return eachWebhook(d, func(w map[string]any) {
			w["rules"].([]any)[0].(map[string]any)["operations"] = []any{"CREATE", "UPDATE", "DELETE"}
		}, 1)
	}},
	{"one webhook only", invWebhook, func(d []map[string]any) error {
		mwc, err := kindObject(d, "MutatingWebhookConfiguration")
		if err != nil {
			return err
		}
		mwc["webhooks"] = mwc["webhooks"].([]any)[:1]
		return nil
	}},
	{"no secrets policy (a pod without the label reads the rail key in a pod-entry namespace)", invSecretsPolicy, func(d []map[string]any) error {
		removeKind(d, "ValidatingAdmissionPolicy")
		removeKind(d, "ValidatingAdmissionPolicyBinding")
		return nil
	}},
	{"the secrets policy bound to audit only", invSecretsPolicy, func(d []map[string]any) error {
		return editKind(d, "ValidatingAdmissionPolicyBinding", func(o map[string]any) { o["spec"].(map[string]any)["validationActions"] = []any{"Audit"} })
	}},
	{"the secrets policy failing open", invSecretsPolicy, func(d []map[string]any) error {
		return editKind(d, "ValidatingAdmissionPolicy", func(o map[string]any) { o["spec"].(map[string]any)["failurePolicy"] = "Ignore" })
	}},
	{"the secrets policy for CREATE only (an ephemeral container reads the key)", invSecretsPolicy, func(d []map[string]any) error {
		return editKind(d, "ValidatingAdmissionPolicy", func(o map[string]any) {
			o["spec"].(map[string]any)["matchConstraints"].(map[string]any)["resourceRules"].([]any)[0].(map[string]any)["operations"] = []any{"CREATE"}
		})
	}},
	{"the secrets policy binding excluding an agent namespace", invSecretsPolicy, func(d []map[string]any) error {
		return editKind(d, "ValidatingAdmissionPolicyBinding", func(o map[string]any) {
			e := o["spec"].(map[string]any)["matchResources"].(map[string]any)["namespaceSelector"].(map[string]any)["matchExpressions"].([]any)[0].(map[string]any)
			e["values"] = append(e["values"].([]any), "agents")
		})
	}},
	{"the secrets policy missing a rail key's Secret", invSecretsPolicy, func(d []map[string]any) error {
		inj, err := injectorPod(d)
		if err != nil {
			return err
		}
		secret, _, _ := strings.Cut(strings.SplitN(inj.arg("--rail-key"), "=", 3)[2], "/")
		return editKind(d, "ValidatingAdmissionPolicy", func(o map[string]any) {
			for _, v := range o["spec"].(map[string]any)["variables"].([]any) {
				if v := v.(map[string]any); v["name"] == "protected" {
					v["expression"] = strings.Replace(v["expression"].(string), `"`+secret+`"`, `"not-it"`, 1)
				}
			}
		})
	}},
	{"the secrets policy trusting a pod's annotation", invSecretsPolicy, func(d []map[string]any) error {
		return editKind(d, "ValidatingAdmissionPolicy", func(o map[string]any) {
			for _, v := range o["spec"].(map[string]any)["variables"].([]any) {
				if v := v.(map[string]any); v["name"] == "judged" {
					v["expression"] = v["expression"].(string) + " || (has(object.metadata.annotations) && 'countersign.io/status' in object.metadata.annotations)"
				}
			}
		})
	}},
	{"the secrets policy not looking at init containers", invSecretsPolicy, func(d []map[string]any) error {
		return editKind(d, "ValidatingAdmissionPolicy", func(o map[string]any) {
			v := o["spec"].(map[string]any)["validations"].([]any)[0].(map[string]any)
			v["expression"] = strings.Replace(v["expression"].(string), " || variables.initContainers", "", 1)
		})
	}},
	{"kube-system not excluded", invWebhookScope, func(d []map[string]any) error {
		return dropExcluded(d, "kube-system")
	}},
	{"the injector's own namespace not excluded", invWebhookScope, func(d []map[string]any) error {
		inj, err := injectorPod(d)
		if err != nil {
			return err
		}
		return dropExcluded(d, inj.ns)
	}},
	{"the pod webhook without its objectSelector", invWebhookScope, func(d []map[string]any) error {
		return eachWebhook(d, func(w map[string]any) {
			if webhookPath(w) == "/mutate/pod" {
				delete(w, "objectSelector")
			}
		}, 2)
	}},
	{"the namespace webhook without its label", invWebhookScope, func(d []map[string]any) error {
		return eachWebhook(d, func(w map[string]any) {
			if webhookPath(w) == "/mutate/namespace" {
				delete(w["namespaceSelector"].(map[string]any), "matchLabels")
			}
		}, 2)
	}},
	{"a webhook on a path the injector does not serve", invWebhookService, func(d []map[string]any) error {
		return eachWebhook(d, func(w map[string]any) {
			w["clientConfig"].(map[string]any)["service"].(map[string]any)["path"] = "/mutate"
		}, 1)
	}},
	{"the Service targeting another port", invWebhookService, func(d []map[string]any) error {
		svc, err := kindObject(d, "Service")
		if err != nil {
			return err
		}
		svc["spec"].(map[string]any)["ports"].([]any)[0].(map[string]any)["targetPort"] = 9443
		return nil
	}},
	{"a webhook calling another Service", invWebhookService, func(d []map[string]any) error {
		return eachWebhook(d, func(w map[string]any) {
			w["clientConfig"].(map[string]any)["service"].(map[string]any)["name"] = "someone-else"
		}, 1)
	}},
	{"the injector listening elsewhere", invWebhookService, func(d []map[string]any) error {
		return setArg(d, "--listen-addr", ":9443")
	}},
	{"a liveness probe over plain HTTP", invProbes, func(d []map[string]any) error {
		inj, err := injectorPod(d)
		if err != nil {
			return err
		}
		inj.c["livenessProbe"].(map[string]any)["httpGet"].(map[string]any)["scheme"] = "HTTP"
		return nil
	}},
	{"a ClusterRole for the injector", invRBAC, func(d []map[string]any) error {
		return addObject(d, map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
			"metadata": map[string]any{"name": "countersign-injector"},
			"rules":    []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"secrets"}, "verbs": []any{"get"}}}})
	}},
	{"a rail key Secret mounted into the injector", invInjectorSecret, func(d []map[string]any) error {
		inj, err := injectorPod(d)
		if err != nil {
			return err
		}
		secret, _, _ := strings.Cut(strings.SplitN(inj.arg("--rail-key"), "=", 3)[2], "/")
		// (A --tls-mode=self injector has no volumes of its own.)
		vols, _ := inj.spec["volumes"].([]any)
		mounts, _ := inj.c["volumeMounts"].([]any)
		inj.spec["volumes"] = append(vols, map[string]any{"name": "leak", "secret": map[string]any{"secretName": secret}})
		inj.c["volumeMounts"] = append(mounts, map[string]any{"name": "leak", "mountPath": "/leak"})
		return nil
	}},
	{"the ledger URL in the injector's environment", invInjectorSecret, func(d []map[string]any) error {
		inj, err := injectorPod(d)
		if err != nil {
			return err
		}
		inj.c["env"] = []any{map[string]any{"name": "COUNTERSIGN_DATABASE_URL", "valueFrom": map[string]any{
			"secretKeyRef": map[string]any{"name": inj.arg("--database-secret"), "key": "url"}}}}
		return nil
	}},
	{"the injector's root filesystem writable", invHardening, func(d []map[string]any) error {
		inj, err := injectorPod(d)
		if err != nil {
			return err
		}
		inj.c["securityContext"].(map[string]any)["readOnlyRootFilesystem"] = false
		return nil
	}},
	{"the injected Envoy's image latest", invImage, func(d []map[string]any) error {
		return setArg(d, "--envoy-image", "envoyproxy/envoy:latest")
	}},
	{"the replicas without a PodDisruptionBudget", invInjectorAvail, func(d []map[string]any) error {
		inj, err := injectorPod(d)
		if err != nil {
			return err
		}
		inj.deployment["spec"].(map[string]any)["replicas"] = 2
		removeKind(d, "PodDisruptionBudget") // one replica renders none
		return nil
	}},
	{"the sidecar ConfigMap of another name", invInjectorFlags, func(d []map[string]any) error {
		return setArg(d, "--envoy-configmap", "not-rendered")
	}},
	{"the injector told another namespace is its own", invInjectorFlags, func(d []map[string]any) error {
		return setArg(d, "--namespace", "default")
	}},
	{"the sidecar Envoy listening on the pod network", invSidecarEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "socket_address: { address: 127.0.0.1, port_value: 15001 }", "socket_address: { address: 0.0.0.0, port_value: 15001 }")
	}},
	{"the sidecar Envoy's admin on loopback TCP", invSidecarEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "pipe: { path: /var/run/countersign/envoy-admin.sock, mode: 384 }", "socket_address: { address: 127.0.0.1, port_value: 9901 }")
	}},
	{"the sidecar Envoy dialling another socket", invSidecarEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "pipe: { path: /var/run/countersign/envoy.sock }", "pipe: { path: /var/run/countersign/other.sock }")
	}},
	{"a base URL no virtual host serves", invSidecarEnvoy, func(d []map[string]any) error {
		inj, err := injectorPod(d)
		if err != nil {
			return err
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(inj.arg("--base-url"), "--base-url="), "=")
		return setArg(d, "--base-url", name+"=http://nowhere.egress.local:15001")
	}},
	{"the sidecar Envoy reaching an MCP server over plain HTTP", invEnvoy, func(d []map[string]any) error {
		return dropClusterTLS(d, "rail-stripe-mcp")
	}},
	{"the sidecar Envoy retrying a rail call", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "host_rewrite_literal: ", `retry_policy: { retry_on: "reset,5xx", num_retries: 2 }, host_rewrite_literal: `)
	}},
	{"the sidecar Envoy mirroring a rail call, rail key included", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "\n              routes:\n", "\n              request_mirror_policies: [ { cluster: countersign } ]\n              routes:\n")
	}},
	{"the sidecar Envoy logging the agent's x-envoy-original-path", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", `path: "%REQ(:PATH)%"`, `path: "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%"`)
	}},
	{"the sidecar Envoy timing a rail call by the agent's grpc-timeout header", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "host_rewrite_literal: ", `max_stream_duration: { grpc_timeout_header_offset: 1s }, host_rewrite_literal: `)
	}},
	{"the sidecar Envoy failing open", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "failure_mode_allow: false", "failure_mode_allow: true")
	}},
	{"the sidecar Envoy trusting the agent's X-Forwarded-For (its x-envoy-retry-on obeyed)", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "allow_extension_to_set_address_as_trusted: false", "allow_extension_to_set_address_as_trusted: true")
	}},
	{"a rail key for an account the rails file lacks", invSidecarRails, func(d []map[string]any) error {
		inj, err := injectorPod(d)
		if err != nil {
			return err
		}
		ref := strings.SplitN(inj.arg("--rail-key"), "=", 3)[2]
		return setArg(d, "--rail-key", "not_configured="+ref)
	}},
	{"the migration Job not a pre-upgrade hook", invMigrate, func(d []map[string]any) error {
		job, err := kindObject(d, "Job")
		if err != nil {
			return err
		}
		job["metadata"].(map[string]any)["annotations"].(map[string]any)["helm.sh/hook"] = "pre-install"
		return nil
	}},
	{"a sidecar key_file where the injector mounts nothing", invSidecarRails, func(d []map[string]any) error {
		return editConfigMapData(d, "rails.yaml", "key_file: /var/run/secrets/countersign/rails/", "key_file: /etc/countersign/")
	}},
}

type injectorRef struct {
	deployment, spec, c map[string]any
	ns                  string
}

// arg is the first --name=value argument with that name.
func (i injectorRef) arg(name string) string {
	for _, a := range i.c["args"].([]any) {
		if s, _ := a.(string); strings.HasPrefix(s, name+"=") {
			return s
		}
	}
	return ""
}

func injectorPod(d []map[string]any) (injectorRef, error) {
	dep, err := kindObject(d, "Deployment")
	if err != nil {
		return injectorRef{}, err
	}
	spec := dep["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	ns, _ := dep["metadata"].(map[string]any)["namespace"].(string)
	return injectorRef{dep, spec, spec["containers"].([]any)[0].(map[string]any), ns}, nil
}

// setArg replaces the first --name=… argument of the injector.
func setArg(d []map[string]any, name, value string) error {
	inj, err := injectorPod(d)
	if err != nil {
		return err
	}
	args := inj.c["args"].([]any)
	for i, a := range args {
		if s, _ := a.(string); strings.HasPrefix(s, name+"=") {
			args[i] = name + "=" + value
			return nil
		}
	}
	return fmt.Errorf("the injector has no %s", name)
}

// editKind applies f to the first object of a kind.
func editKind(d []map[string]any, kind string, f func(map[string]any)) error {
	o, err := kindObject(d, kind)
	if err != nil {
		return err
	}
	f(o)
	return nil
}

func kindObject(d []map[string]any, kind string) (map[string]any, error) {
	for _, o := range d {
		if o["kind"] == kind {
			return o, nil
		}
	}
	return nil, fmt.Errorf("no %s", kind)
}

// removeKind drops every object of a kind; the slice keeps its length, so
// the dropped ones become empty ConfigMaps in no namespace anyone names.
func removeKind(d []map[string]any, kind string) {
	for i, o := range d {
		if o["kind"] == kind {
			d[i] = map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "removed", "namespace": "removed"}}
		}
	}
}

// addObject replaces the first ServiceAccount (the chart's, unchecked) by
// obj: the slice cannot grow in place.
func addObject(d []map[string]any, obj map[string]any) error {
	for i, o := range d {
		if o["kind"] == "ServiceAccount" {
			d[i] = obj
			return nil
		}
	}
	return errors.New("no ServiceAccount to stand in for")
}

func webhookPath(w map[string]any) string {
	cc, _ := w["clientConfig"].(map[string]any)
	svc, _ := cc["service"].(map[string]any)
	p, _ := svc["path"].(string)
	return p
}

// eachWebhook applies f to the first n webhooks.
func eachWebhook(d []map[string]any, f func(map[string]any), n int) error {
	mwc, err := kindObject(d, "MutatingWebhookConfiguration")
	if err != nil {
		return err
	}
	ws, _ := mwc["webhooks"].([]any)
	if len(ws) < n {
		return fmt.Errorf("%d webhooks, want %d", len(ws), n)
	}
	for _, w := range ws[:n] {
		f(w.(map[string]any))
	}
	return nil
}

// dropExcluded takes ns out of the first webhook's namespace exclusions.
func dropExcluded(d []map[string]any, ns string) error {
	found := false
	err := eachWebhook(d, func(w map[string]any) {
		sel, _ := w["namespaceSelector"].(map[string]any)
		exprs, _ := sel["matchExpressions"].([]any)
		for _, e := range exprs {
			m := e.(map[string]any)
			if m["key"] != "kubernetes.io/metadata.name" {
				continue
			}
			vals, _ := m["values"].([]any)
			m["values"] = slices.DeleteFunc(vals, func(v any) bool { found = found || v == ns; return v == ns })
		}
	}, 1)
	if err == nil && !found {
		err = fmt.Errorf("the first webhook does not exclude %s", ns)
	}
	return err
}

// injectorFilesMutations break a rendering whose injector serves a
// certificate from files (cert-manager's or the operator's Secret).
var injectorFilesMutations = []mutation{
	{"the injector's token mounted", invNoToken, func(d []map[string]any) error {
		inj, err := injectorPod(d)
		if err != nil {
			return err
		}
		inj.spec["automountServiceAccountToken"] = true
		return nil
	}},
	{"no caBundle and no CA injection", invWebhookTLS, func(d []map[string]any) error {
		mwc, err := kindObject(d, "MutatingWebhookConfiguration")
		if err != nil {
			return err
		}
		delete(mwc["metadata"].(map[string]any), "annotations")
		return eachWebhook(d, func(w map[string]any) { delete(w["clientConfig"].(map[string]any), "caBundle") }, 2)
	}},
	{"the certificate files outside the TLS volume", invWebhookTLS, func(d []map[string]any) error {
		return setArg(d, "--tls-cert-file", "/tmp/tls.crt")
	}},
}

// injectorSelfMutations break a rendering whose injector keeps its own
// certificate (--tls-mode=self).
var injectorSelfMutations = []mutation{
	{"self: the injector reading every Secret", invRBAC, func(d []map[string]any) error {
		role, err := kindObject(d, "Role")
		if err != nil {
			return err
		}
		delete(role["rules"].([]any)[1].(map[string]any), "resourceNames")
		return nil
	}},
	{"self: the injector listing namespaces", invRBAC, func(d []map[string]any) error {
		cr, err := kindObject(d, "ClusterRole")
		if err != nil {
			return err
		}
		cr["rules"] = append(cr["rules"].([]any), map[string]any{"apiGroups": []any{""}, "resources": []any{"namespaces"}, "verbs": []any{"list"}})
		return nil
	}},
	{"self: patching every webhook configuration", invRBAC, func(d []map[string]any) error {
		cr, err := kindObject(d, "ClusterRole")
		if err != nil {
			return err
		}
		delete(cr["rules"].([]any)[0].(map[string]any), "resourceNames")
		return nil
	}},
	{"self: the Role bound to another service account", invRBAC, func(d []map[string]any) error {
		rb, err := kindObject(d, "RoleBinding")
		if err != nil {
			return err
		}
		rb["subjects"].([]any)[0].(map[string]any)["name"] = "default"
		return nil
	}},
	{"self: no ClusterRoleBinding", invRBAC, func(d []map[string]any) error {
		removeKind(d, "ClusterRoleBinding")
		return nil
	}},
	{"self: without its service account token", invWebhookTLS, func(d []map[string]any) error {
		inj, err := injectorPod(d)
		if err != nil {
			return err
		}
		inj.spec["automountServiceAccountToken"] = false
		return nil
	}},
	{"self: a rendered caBundle helm would write back over the injector's", invWebhookTLS, func(d []map[string]any) error {
		return eachWebhook(d, func(w map[string]any) {
			w["clientConfig"].(map[string]any)["caBundle"] = "bm90IGEgY2VydA=="
		}, 1)
	}},
	{"self: patching another webhook configuration", invWebhookTLS, func(d []map[string]any) error {
		return setArg(d, "--webhook-config", "someone-else")
	}},
	{"self: a leaf for another Service", invWebhookTLS, func(d []map[string]any) error {
		return setArg(d, "--service", "someone-else")
	}},
	{"self: a Secret the Role does not name", invWebhookTLS, func(d []map[string]any) error {
		return setArg(d, "--tls-secret", "someone-else")
	}},
}

// dropClusterTLS removes cluster's transport_socket from the rendered
// envoy.yaml: its upstream is then reached over plain TCP.
func dropClusterTLS(docs []map[string]any, cluster string) error {
	for _, o := range docs {
		if o["kind"] != "ConfigMap" {
			continue
		}
		data, _ := o["data"].(map[string]any)
		s, _ := data["envoy.yaml"].(string)
		at := strings.Index(s, "- name: "+cluster+"\n")
		if at < 0 {
			continue
		}
		ts := strings.Index(s[at:], "\n    transport_socket:\n")
		if ts < 0 {
			return fmt.Errorf("cluster %s has no transport_socket", cluster)
		}
		start := at + ts + 1
		end := start + len("    transport_socket:\n")
		for end < len(s) && strings.HasPrefix(s[end:], "      ") {
			if nl := strings.IndexByte(s[end:], '\n'); nl >= 0 {
				end += nl + 1
			} else {
				end = len(s)
			}
		}
		data["envoy.yaml"] = s[:start] + s[end:]
		return nil
	}
	return fmt.Errorf("no envoy.yaml defines cluster %s", cluster)
}
