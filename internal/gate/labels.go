package gate

import (
	"encoding/json"
	"sort"
)

// labelsOf is canonical labels with "" read as none.
func labelsOf(canonical string) string {
	if canonical == "" {
		return "{}"
	}
	return canonical
}

// changedLabels names, in order, the label members whose value differs
// between two canonical label sets (added, removed or changed); never the
// values, which may be what the agent is trying to smuggle.
func changedLabels(approved, sent string) []string {
	a, b := labelMap(approved), labelMap(sent)
	var out []string
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			out = append(out, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return []string{"their encoding"} // unreachable for canonical input
	}
	return out
}

func labelMap(canonical string) map[string]string {
	m := map[string]string{}
	if json.Unmarshal([]byte(labelsOf(canonical)), &m) != nil {
		return map[string]string{"(unreadable labels)": canonical}
	}
	return m
}
