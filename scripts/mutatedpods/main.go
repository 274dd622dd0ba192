// Command mutatedpods writes the pods the injector's golden cases admit with
// a patch, mutated, as complete Pod manifests, so that they can be validated
// against the Kubernetes OpenAPI schema (scripts/chart-test.sh runs
// kubeconform, strict, on them).
//
// For every internal/inject/testdata/<case>.golden.json that carries a
// patch, it applies that patch (RFC 6902, as the API server would) to the
// pod in <case>.in.json, checks that the result is the pod the golden file
// records, and writes it to DIR/<case>.json. It prints how many it wrote.
//
// Usage: go run ./scripts/mutatedpods [-testdata internal/inject/testdata] DIR
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
)

func main() {
	testdata := flag.String("testdata", "internal/inject/testdata", "the injector's golden cases")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: mutatedpods [-testdata DIR] OUTDIR")
		os.Exit(2)
	}
	n, err := run(*testdata, flag.Arg(0))
	if err != nil {
		fmt.Fprintf(os.Stderr, "mutatedpods: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(n)
}

// golden is the part of a case's .golden.json this command reads.
type golden struct {
	Patch json.RawMessage `json:"patch"`
	Pod   json.RawMessage `json:"pod"`
}

func run(testdata, out string) (int, error) {
	goldens, err := filepath.Glob(filepath.Join(testdata, "*.golden.json"))
	if err != nil {
		return 0, err
	}
	sort.Strings(goldens)
	if err := os.MkdirAll(out, 0o750); err != nil {
		return 0, err
	}
	n := 0
	for _, path := range goldens {
		name := strings.TrimSuffix(filepath.Base(path), ".golden.json")
		pod, err := mutated(path, filepath.Join(testdata, name+".in.json"))
		if err != nil {
			return n, fmt.Errorf("%s: %w", name, err)
		}
		if pod == nil {
			continue // refused, skipped or malformed: no patch
		}
		if err := os.WriteFile(filepath.Join(out, name+".json"), pod, 0o600); err != nil {
			return n, err
		}
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("no golden case in %s admits a pod with a patch", testdata)
	}
	return n, nil
}

// mutated returns the case's pod with its golden patch applied, as an
// indented manifest, or nil if the case has no patch.
func mutated(goldenPath, inPath string) ([]byte, error) {
	raw, err := os.ReadFile(goldenPath)
	if err != nil {
		return nil, err
	}
	var g golden
	if err := json.Unmarshal(raw, &g); err != nil {
		return nil, fmt.Errorf("%s: %w", goldenPath, err)
	}
	if len(g.Patch) == 0 || string(g.Patch) == "null" {
		return nil, nil
	}
	raw, err = os.ReadFile(inPath)
	if err != nil {
		return nil, err
	}
	var review struct {
		Request struct {
			Object json.RawMessage `json:"object"`
		} `json:"request"`
	}
	if err := json.Unmarshal(raw, &review); err != nil {
		return nil, fmt.Errorf("%s: %w", inPath, err)
	}
	if len(review.Request.Object) == 0 {
		return nil, fmt.Errorf("%s: no request.object", inPath)
	}
	p, err := jsonpatch.DecodePatch(g.Patch)
	if err != nil {
		return nil, fmt.Errorf("the golden patch is not RFC 6902: %w", err)
	}
	obj, err := p.Apply(review.Request.Object)
	if err != nil {
		return nil, fmt.Errorf("the golden patch does not apply to the pod: %w", err)
	}
	if same, err := equalJSON(obj, g.Pod); err != nil {
		return nil, err
	} else if !same {
		return nil, errors.New("the patched pod is not the golden file's pod (run go test ./internal/inject -update)")
	}
	return manifest(obj)
}

// manifest checks that obj is a complete v1 Pod (apiVersion, kind, metadata
// and spec) and indents it.
func manifest(obj []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		return nil, fmt.Errorf("the patched pod is not a JSON object: %w", err)
	}
	for key, want := range map[string]string{"apiVersion": `"v1"`, "kind": `"Pod"`} {
		if got := string(m[key]); got != want {
			return nil, fmt.Errorf("the patched pod has %s %s, want %s", key, got, want)
		}
	}
	for _, key := range []string{"metadata", "spec"} {
		if len(m[key]) == 0 || string(m[key]) == "null" {
			return nil, fmt.Errorf("the patched pod has no %s", key)
		}
	}
	var b bytes.Buffer
	if err := json.Indent(&b, obj, "", "  "); err != nil {
		return nil, err
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}

func equalJSON(a, b []byte) (bool, error) {
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		return false, err
	}
	if err := json.Unmarshal(b, &y); err != nil {
		return false, fmt.Errorf("the golden file's pod: %w", err)
	}
	return reflect.DeepEqual(x, y), nil
}
