// Command kubeschema turns the Kubernetes OpenAPI v2 document
// (api/openapi-spec/swagger.json of the k8s.io/kubernetes module) into
// kubeconform's per-kind JSON schemas: one file per group/version/kind,
// named <kind><-group>-<version>.json as kubeconform's {{.ResourceKind}}{{.KindSuffix}}
// expects, each standalone (the definitions it refers to, transitively,
// under "definitions").
//
// The schemas are strict: an object with declared properties accepts no
// others (a misspelt field is an error, as `kubectl apply --validate=strict`
// makes it), apiVersion and kind must be the file's, and int-or-string and
// quantity values take either JSON type.
//
// Usage: go run ./scripts/kubeschema -swagger …/swagger.json -out DIR
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

const refPrefix = "#/definitions/"

type gvk struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

func main() {
	swagger := flag.String("swagger", "", "the OpenAPI v2 document (api/openapi-spec/swagger.json)")
	out := flag.String("out", "", "directory to write the schemas into")
	flag.Parse()
	n, err := run(*swagger, *out)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubeschema: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "kubeschema: wrote %d schemas to %s\n", n, *out)
}

func run(swagger, out string) (int, error) {
	if swagger == "" || out == "" {
		return 0, errors.New("-swagger and -out are required")
	}
	raw, err := os.ReadFile(swagger)
	if err != nil {
		return 0, err
	}
	var doc struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return 0, fmt.Errorf("%s: %w", swagger, err)
	}
	if len(doc.Definitions) == 0 {
		return 0, fmt.Errorf("%s has no definitions", swagger)
	}
	defs := map[string]any{}
	for name, d := range doc.Definitions {
		defs[name] = convert(name, d)
	}
	if err := os.MkdirAll(out, 0o750); err != nil {
		return 0, err
	}
	names := make([]string, 0, len(doc.Definitions))
	for name := range doc.Definitions {
		names = append(names, name)
	}
	sort.Strings(names)
	written := map[string]string{}
	for _, name := range names {
		var kinds []gvk
		if x, ok := doc.Definitions[name]["x-kubernetes-group-version-kind"]; ok {
			b, _ := json.Marshal(x)
			_ = json.Unmarshal(b, &kinds)
		}
		for _, k := range kinds {
			// Options kinds (DeleteOptions, …) are listed under every group;
			// the resource's own definition wins a name clash.
			file := fileName(k)
			if prev, dup := written[file]; dup && !strings.HasSuffix(prev, "."+k.Kind) {
				continue
			}
			s := standalone(name, k, defs)
			b, err := json.Marshal(s)
			if err != nil {
				return 0, err
			}
			if err := os.WriteFile(filepath.Join(out, file), b, 0o600); err != nil {
				return 0, err
			}
			written[file] = name
		}
	}
	return len(written), nil
}

// fileName is kubeconform's {{.ResourceKind}}{{.KindSuffix}}.json: the kind
// in lower case, the group's first label and the version.
func fileName(k gvk) string {
	suffix := "-" + strings.ToLower(k.Version)
	if k.Group != "" {
		suffix = "-" + strings.ToLower(strings.Split(k.Group, ".")[0]) + suffix
	}
	return strings.ToLower(k.Kind) + suffix + ".json"
}

// standalone is definition name as a schema for kind k, with every
// definition it refers to.
func standalone(name string, k gvk, defs map[string]any) map[string]any {
	closure := map[string]any{}
	var walk func(v any)
	walk = func(v any) {
		switch t := v.(type) {
		case map[string]any:
			if ref, ok := t["$ref"].(string); ok {
				target := strings.TrimPrefix(ref, refPrefix)
				if _, seen := closure[target]; !seen {
					closure[target] = defs[target]
					walk(defs[target])
				}
			}
			for _, c := range t {
				walk(c)
			}
		case []any:
			for _, c := range t {
				walk(c)
			}
		}
	}
	top := deepCopy(defs[name]).(map[string]any)
	walk(top)
	apiVersion := k.Version
	if k.Group != "" {
		apiVersion = k.Group + "/" + k.Version
	}
	props, _ := top["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
		top["properties"] = props
	}
	props["apiVersion"] = map[string]any{"type": "string", "enum": []any{apiVersion}}
	props["kind"] = map[string]any{"type": "string", "enum": []any{k.Kind}}
	top["definitions"] = closure
	return top
}

// convert makes one OpenAPI v2 schema a strict JSON schema (draft 4, as
// kubeconform compiles them).
func convert(name string, d map[string]any) any {
	switch name {
	case "io.k8s.apimachinery.pkg.util.intstr.IntOrString":
		return map[string]any{"description": d["description"], "oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
	case "io.k8s.apimachinery.pkg.api.resource.Quantity":
		return map[string]any{"description": d["description"], "oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "number"}}}
	}
	return strict(d)
}

func strict(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, c := range t {
			if strings.HasPrefix(k, "x-") {
				continue
			}
			out[k] = strict(c)
		}
		// A property is a map of schemas, not a schema: convert each.
		if props, ok := t["properties"].(map[string]any); ok {
			p := map[string]any{}
			for k, c := range props {
				p[k] = strict(c)
			}
			out["properties"] = p
			_, declared := t["additionalProperties"]
			_, preserve := t["x-kubernetes-preserve-unknown-fields"]
			if !declared && !preserve {
				out["additionalProperties"] = false
			}
		}
		if f, _ := t["format"].(string); f == "int-or-string" {
			delete(out, "type")
			delete(out, "format")
			out["oneOf"] = []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, c := range t {
			out[i] = strict(c)
		}
		return out
	}
	return v
}

func deepCopy(v any) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}
