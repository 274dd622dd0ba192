package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// A mutation breaks a copy of the manifests in one way; want is the
// invariant that must catch it.
type mutation struct {
	name  string
	want  string
	apply func(docs []map[string]any) error
}

var mutations = []mutation{
	{"a rail key Secret mounted into envoy", invRailKeys, func(d []map[string]any) error {
		vol, err := firstVolume(d, func(v map[string]any) bool { return v["secret"] != nil })
		if err != nil {
			return err
		}
		return addMount(d, "envoy", vol, "/var/run/secrets/leak")
	}},
	{"envoy reads a rail key Secret through its environment", invRailKeys, func(d []map[string]any) error {
		c, err := egressContainer(d, "envoy")
		if err != nil {
			return err
		}
		c["envFrom"] = []any{map[string]any{"secretRef": map[string]any{"name": "countersign-stripe-main"}}}
		return nil
	}},
	{"an agent container in the egress pod mounting the socket", invSocketShare, func(d []map[string]any) error {
		spec, err := egressPodSpec(d)
		if err != nil {
			return err
		}
		spec["containers"] = append(spec["containers"].([]any), map[string]any{
			"name": "agent", "image": "example.com/agent:1.0",
			"volumeMounts": []any{map[string]any{"name": "grpc-socket", "mountPath": "/var/run/countersign"}},
		})
		return nil
	}},
	{"the socket volume mounted into an init container", invSocketShare, func(d []map[string]any) error {
		spec, err := egressPodSpec(d)
		if err != nil {
			return err
		}
		inits, _ := spec["initContainers"].([]any)
		spec["initContainers"] = append(inits, map[string]any{
			"name": "debug", "image": "example.com/debug:1.0",
			"volumeMounts": []any{map[string]any{"name": "grpc-socket", "mountPath": "/s"}},
		})
		return nil
	}},
	{"a rail settle time shorter than a rail route's timeout", invEnvoy, func(d []map[string]any) error {
		return setEnv(d, "countersign", "COUNTERSIGN_RAIL_SETTLE_TIME", "10s")
	}},
	{"a second, shorter COUNTERSIGN_RAIL_SETTLE_TIME after the chart's", invEnvOnce, func(d []map[string]any) error {
		return appendEnv(d, "countersign", "COUNTERSIGN_RAIL_SETTLE_TIME", "1s")
	}},
	{"a second COUNTERSIGN_ENVOY_ADDR, on TCP, after the chart's", invEnvOnce, func(d []map[string]any) error {
		return appendEnv(d, "countersign", "COUNTERSIGN_ENVOY_ADDR", "0.0.0.0:9192")
	}},
	{"gRPC on TCP", invGRPCUnix, func(d []map[string]any) error {
		return setEnv(d, "countersign", "COUNTERSIGN_ENVOY_ADDR", "127.0.0.1:9191")
	}},
	{"Envoy dialling another socket", invSocketShare, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "pipe: { path: /var/run/countersign/envoy.sock }", "pipe: { path: /tmp/other.sock }")
	}},
	{"Envoy dialling Countersign over TCP", invGRPCUnix, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "pipe: { path: /var/run/countersign/envoy.sock }", "socket_address: { address: 127.0.0.1, port_value: 9191 }")
	}},
	{"readiness probe on /healthz", invProbes, func(d []map[string]any) error {
		c, err := egressContainer(d, "countersign")
		if err != nil {
			return err
		}
		c["readinessProbe"].(map[string]any)["httpGet"].(map[string]any)["path"] = "/healthz"
		return nil
	}},
	{"HTTP listener on loopback", invProbes, func(d []map[string]any) error {
		return setEnv(d, "countersign", "COUNTERSIGN_HTTP_ADDR", "127.0.0.1:8080")
	}},
	{"runAsNonRoot false", invNonRoot, func(d []map[string]any) error {
		spec, err := egressPodSpec(d)
		if err != nil {
			return err
		}
		spec["securityContext"].(map[string]any)["runAsNonRoot"] = false
		for _, c := range spec["containers"].([]any) {
			if sc, ok := c.(map[string]any)["securityContext"].(map[string]any); ok {
				delete(sc, "runAsNonRoot")
			}
		}
		return nil
	}},
	{"envoy image latest", invImage, func(d []map[string]any) error {
		c, err := egressContainer(d, "envoy")
		if err != nil {
			return err
		}
		c["image"] = "envoyproxy/envoy:latest"
		return nil
	}},
	{"countersign image untagged", invImage, func(d []map[string]any) error {
		c, err := egressContainer(d, "countersign")
		if err != nil {
			return err
		}
		c["image"] = "ghcr.io/countersign/countersign"
		return nil
	}},
	{"a writable root filesystem", invHardening, func(d []map[string]any) error {
		c, err := egressContainer(d, "envoy")
		if err != nil {
			return err
		}
		c["securityContext"].(map[string]any)["readOnlyRootFilesystem"] = false
		return nil
	}},
	{"the database URL as a literal", invDatabase, func(d []map[string]any) error {
		return setEnv(d, "countersign", "COUNTERSIGN_DATABASE_URL", "postgres://u:p@db/countersign")
	}},
	{"a key_file outside the Secret mounts", invRailKeys, func(d []map[string]any) error {
		return editConfigMapData(d, "rails.yaml", "key_file: /var/run/secrets/countersign/rails/", "key_file: /etc/")
	}},
	{"ext_authz failing open", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "failure_mode_allow: false", "failure_mode_allow: true")
	}},
	{"x-envoy-* headers hidden from the check", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "encode_raw_headers: false", "encode_raw_headers: false\n              disallowed_headers: { patterns: [ { prefix: x-envoy- } ] }")
	}},
	{"an unknown field in the Envoy bootstrap", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "stat_prefix: egress", "stat_prefix: egress\n              no_such_field: true")
	}},
	{"an Envoy that trusts RFC 1918 and loopback addresses (an agent's x-envoy-retry-on obeyed)", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "stat_prefix: egress", "stat_prefix: egress\n          internal_address_config: {}")
	}},
	{"an Envoy with its default original-IP detector (a one-address X-Forwarded-For trusted)", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", untrustedXFF, "")
	}},
	{"a rail route that retries the payment", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "host_rewrite_literal: ", `retry_policy: { retry_on: "reset,connect-failure,5xx", num_retries: 3 }, host_rewrite_literal: `)
	}},
	{"a rail route that mirrors the allowed request, rail key included", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "host_rewrite_literal: ", `request_mirror_policies: [ { cluster: countersign } ], host_rewrite_literal: `)
	}},
	{"a rail route that hedges the payment", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "host_rewrite_literal: ", `hedge_policy: { initial_requests: 2 }, host_rewrite_literal: `)
	}},
	{"a rail route that follows redirects internally", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "host_rewrite_literal: ", `internal_redirect_policy: { max_internal_redirects: 1 }, host_rewrite_literal: `)
	}},
	{"a rail route that removes the idempotency key after the check", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "\n                route: { cluster: ", "\n                request_headers_to_remove: [ idempotency-key ]\n                route: { cluster: ")
	}},
	{"a rail virtual host that retries every rail call", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "\n              routes:\n", "\n              retry_policy: { retry_on: \"5xx\", num_retries: 2 }\n              routes:\n")
	}},
	{"a rail virtual host that sets a request header over the stamps", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "\n              routes:\n", "\n              request_headers_to_add: [ { header: { key: authorization, value: fixed } } ]\n              routes:\n")
	}},
	{"an access log of the agent's x-envoy-original-path (a refused request logged under a forged path)", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", `path: "%REQ(:PATH)%"`, `path: "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%"`)
	}},
	{"the router's upstream log showing the rail key", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "suppress_envoy_headers: true", "suppress_envoy_headers: true\n"+
			`              upstream_log: [ { name: envoy.access_loggers.stdout, typed_config: { "@type": type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog, log_format: { json_format: { key: "%REQ(AUTHORIZATION)%" } } } } ]`)
	}},
	{"a rail route that times the call by the agent's grpc-timeout header", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "host_rewrite_literal: ", `max_stream_duration: { grpc_timeout_header_max: 0s }, host_rewrite_literal: `)
	}},
	{"a rail route whose max_stream_duration turns its timeout off", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "host_rewrite_literal: ", `max_stream_duration: {}, host_rewrite_literal: `)
	}},
	{"a route to an account the rails file lacks", invEnvoy, func(d []map[string]any) error {
		return editConfigMapData(d, "envoy.yaml", "rail_account: \"", "rail_account: \"not_configured_")
	}},
	{"no migration before serve", invMigrate, func(d []map[string]any) error {
		// Whichever runs `migrate` (the hook Job or the init container)
		// runs something else.
		n := 0
		for _, o := range d {
			spec, _ := o["spec"].(map[string]any)
			tpl, _ := spec["template"].(map[string]any)
			ps, _ := tpl["spec"].(map[string]any)
			for _, list := range []string{"initContainers", "containers"} {
				cs, _ := ps[list].([]any)
				for _, c := range cs {
					m, _ := c.(map[string]any)
					if args, _ := m["args"].([]any); len(args) == 1 && args[0] == "migrate" {
						m["args"] = []any{"version"}
						n++
					}
				}
			}
		}
		if n == 0 {
			return errors.New("nothing runs migrate")
		}
		return nil
	}},
	{"the migration Job not a pre-upgrade hook", invMigrate, func(d []map[string]any) error {
		for _, o := range d {
			if o["kind"] != "Job" {
				continue
			}
			md, _ := o["metadata"].(map[string]any)
			ann, _ := md["annotations"].(map[string]any)
			ann["helm.sh/hook"] = "pre-install"
			return nil
		}
		// In initContainer mode there is no Job: break the init
		// container's place instead (after serve would be too late).
		spec, err := egressPodSpec(d)
		if err != nil {
			return err
		}
		inits, _ := spec["initContainers"].([]any)
		if len(inits) == 0 {
			return errors.New("no migration Job or init container")
		}
		spec["containers"] = append(spec["containers"].([]any), inits...)
		delete(spec, "initContainers")
		return nil
	}},
}

// selfTest applies each mutation of the rendering's mode (mutations, or
// injectorMutations when it has a MutatingWebhookConfiguration) to a fresh
// copy of docs and requires the check to fail with the invariant meant to
// catch it.
func selfTest(docs []map[string]any) (int, error) {
	ms := slices.Concat(mutations, envoyMutations)
	if slices.ContainsFunc(docs, func(o map[string]any) bool { return o["kind"] == "MutatingWebhookConfiguration" }) {
		// Plus those of how the injector gets its certificate.
		ms = slices.Concat(injectorMutations, injectorFilesMutations)
		if inj, err := injectorPod(docs); err == nil && inj.arg("--tls-mode") == "--tls-mode=self" {
			ms = slices.Concat(injectorMutations, injectorSelfMutations)
		}
	}
	var errs []error
	for _, m := range ms {
		cp, err := deepCopy(docs)
		if err != nil {
			return 0, err
		}
		if err := m.apply(cp); err != nil {
			errs = append(errs, fmt.Errorf("self-test %q: cannot apply: %w", m.name, err))
			continue
		}
		res, _ := check(cp)
		if !res.has(m.want) {
			errs = append(errs, fmt.Errorf("self-test %q: not caught by [%s]; failures: %v", m.name, m.want, res.failures))
		}
	}
	return len(ms), errors.Join(errs...)
}

func deepCopy(docs []map[string]any) ([]map[string]any, error) {
	js, err := json.Marshal(docs)
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	return out, json.Unmarshal(js, &out)
}

func egressPodSpec(docs []map[string]any) (map[string]any, error) {
	for _, o := range docs {
		if o["kind"] != "Deployment" {
			continue
		}
		spec, _ := o["spec"].(map[string]any)
		tpl, _ := spec["template"].(map[string]any)
		ps, ok := tpl["spec"].(map[string]any)
		if ok {
			return ps, nil
		}
	}
	return nil, errors.New("no Deployment pod spec")
}

func egressContainer(docs []map[string]any, name string) (map[string]any, error) {
	spec, err := egressPodSpec(docs)
	if err != nil {
		return nil, err
	}
	cs, _ := spec["containers"].([]any)
	for _, c := range cs {
		if m, ok := c.(map[string]any); ok && m["name"] == name {
			return m, nil
		}
	}
	return nil, fmt.Errorf("no container %q", name)
}

func firstVolume(docs []map[string]any, pred func(map[string]any) bool) (string, error) {
	spec, err := egressPodSpec(docs)
	if err != nil {
		return "", err
	}
	vs, _ := spec["volumes"].([]any)
	for _, v := range vs {
		if m, ok := v.(map[string]any); ok && pred(m) {
			return m["name"].(string), nil
		}
	}
	return "", errors.New("no such volume")
}

func addMount(docs []map[string]any, container, vol, at string) error {
	c, err := egressContainer(docs, container)
	if err != nil {
		return err
	}
	ms, _ := c["volumeMounts"].([]any)
	c["volumeMounts"] = append(ms, map[string]any{"name": vol, "mountPath": at})
	return nil
}

func setEnv(docs []map[string]any, container, name, value string) error {
	c, err := egressContainer(docs, container)
	if err != nil {
		return err
	}
	env, _ := c["env"].([]any)
	for _, e := range env {
		if m, ok := e.(map[string]any); ok && m["name"] == name {
			delete(m, "valueFrom")
			m["value"] = value
			return nil
		}
	}
	return fmt.Errorf("container %q has no %s", container, name)
}

// appendEnv defines name again, last, as the kubelet would use it.
func appendEnv(docs []map[string]any, container, name, value string) error {
	c, err := egressContainer(docs, container)
	if err != nil {
		return err
	}
	env, _ := c["env"].([]any)
	c["env"] = append(env, map[string]any{"name": name, "value": value})
	return nil
}

// untrustedXFF is the chart's original-IP detector, as rendered into
// envoy.yaml: X-Forwarded-For, never trusted.
const untrustedXFF = `          original_ip_detection_extensions:
          - name: envoy.http.original_ip_detection.custom_header
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.http.original_ip_detection.custom_header.v3.CustomHeaderConfig
              header_name: x-forwarded-for
              allow_extension_to_set_address_as_trusted: false
`

func editConfigMapData(docs []map[string]any, key, old, replacement string) error {
	for _, o := range docs {
		if o["kind"] != "ConfigMap" {
			continue
		}
		data, _ := o["data"].(map[string]any)
		s, ok := data[key].(string)
		if !ok || !strings.Contains(s, old) {
			continue
		}
		data[key] = strings.Replace(s, old, replacement, 1)
		return nil
	}
	return fmt.Errorf("no ConfigMap key %s containing %q", key, old)
}
