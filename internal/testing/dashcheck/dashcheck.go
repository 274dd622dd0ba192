// Package dashcheck holds a Grafana dashboard to the metrics a server
// exports: it finds every PromQL expression in the dashboard (panel
// targets, rows' nested panels, query variables) and the metric names each
// one reads, and reports any name a scrape of /metrics does not have. It is
// test support: no production binary links it.
//
// Metric names are found by a small PromQL tokenizer rather than the
// Prometheus parser (whose module would bring the whole Prometheus server
// into the build). It knows strings, label matchers, ranges, comments,
// numbers and durations, Grafana variables, function calls and the
// label lists of by, without, on, ignoring, group_left and group_right;
// whatever identifier is left is a metric name. What it cannot check it
// refuses rather than passes: a __name__ matcher, or a Grafana variable
// where a metric name would be.
package dashcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// Query is one PromQL expression of a dashboard and where it is.
type Query struct {
	// Where names the panel (or variable) and the target's refId.
	Where string
	Expr  string
	// Panel is true for a panel's target, which must name a metric; a
	// variable may ask for label values alone.
	Panel bool
}

// Queries lists the dashboard's PromQL expressions.
func Queries(dashboard []byte) ([]Query, error) {
	var d struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(dashboard, &d); err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	var out []Query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				out = append(out, Query{Where: fmt.Sprintf("panel %q target %s", p.Title, t.RefID), Expr: t.Expr, Panel: true})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, err := variableQuery(v.Query)
		if err != nil {
			return nil, fmt.Errorf("variable %q: %w", v.Name, err)
		}
		if expr, ok := variableExpr(q); ok {
			out = append(out, Query{Where: fmt.Sprintf("variable %q", v.Name), Expr: expr})
		}
	}
	return out, nil
}

type panel struct {
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// variableQuery is a query variable's query: a string, or an object whose
// query member is one (Grafana's newer variable editor).
func variableQuery(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var o struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", fmt.Errorf("query is neither a string nor an object with a query: %s", raw)
	}
	return o.Query, nil
}

// variableExpr is the PromQL a Prometheus variable query evaluates:
// label_values(expr, label) and query_result(expr) read expr;
// label_values(label) reads no metric.
func variableExpr(q string) (string, bool) {
	q = strings.TrimSpace(q)
	for _, fn := range []string{"label_values", "query_result"} {
		inner, ok := strings.CutPrefix(q, fn+"(")
		if !ok {
			continue
		}
		inner = strings.TrimSuffix(strings.TrimSpace(inner), ")")
		if fn == "label_values" {
			i := strings.LastIndex(inner, ",")
			if i < 0 {
				return "", false
			}
			inner = inner[:i]
		}
		return inner, true
	}
	return q, q != ""
}

// keywords are identifiers that are not metric names and not followed by
// an argument list.
var keywords = map[string]bool{"bool": true, "offset": true, "and": true, "or": true, "unless": true,
	"atan2": true, "inf": true, "nan": true}

// labelLists are the modifiers followed by a list of label names.
var labelLists = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true}

// MetricNames is the metric names expr reads, in order, without repeats.
func MetricNames(expr string) ([]string, error) {
	var names []string
	seen := map[string]bool{}
	r := []rune(expr)
	i := 0
	skipSpace := func() {
		for i < len(r) && strings.ContainsRune(" \t\r\n", r[i]) {
			i++
		}
	}
	for i < len(r) {
		c := r[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			end, err := skipString(r, i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '{':
			end, body, err := skipBlock(r, i, '{', '}')
			if err != nil {
				return nil, err
			}
			if strings.Contains(body, "__name__") {
				return nil, fmt.Errorf("a __name__ matcher in %q: name the metric instead", expr)
			}
			i = end
		case c == '[':
			end, _, err := skipBlock(r, i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = end
		case c == '#':
			for i < len(r) && r[i] != '\n' {
				i++
			}
		case c == '$':
			return nil, fmt.Errorf("a Grafana variable outside a label matcher or range in %q: its metric cannot be checked", expr)
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(r) && r[i+1] >= '0' && r[i+1] <= '9':
			for i < len(r) && (isIdent(r[i], true) || r[i] == '.') {
				i++
			}
		case isIdent(c, false):
			start := i
			for i < len(r) && isIdent(r[i], true) {
				i++
			}
			word := string(r[start:i])
			skipSpace()
			switch {
			case labelLists[strings.ToLower(word)]:
				if i < len(r) && r[i] == '(' {
					end, _, err := skipBlock(r, i, '(', ')')
					if err != nil {
						return nil, err
					}
					i = end
				}
			case keywords[strings.ToLower(word)]:
			case i < len(r) && r[i] == '(':
				// A function or aggregation: its arguments are read next.
			case grouping(r[i:]):
				// An aggregation whose by or without comes first.
			default:
				if !seen[word] {
					seen[word] = true
					names = append(names, word)
				}
			}
		default:
			i++
		}
	}
	return names, nil
}

// grouping reports whether r starts with by or without as a word.
func grouping(r []rune) bool {
	j := 0
	for j < len(r) && isIdent(r[j], true) {
		j++
	}
	w := strings.ToLower(string(r[:j]))
	return w == "by" || w == "without"
}

func isIdent(c rune, inner bool) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || inner && c >= '0' && c <= '9'
}

// skipString returns the index just past the string literal at r[i].
func skipString(r []rune, i int) (int, error) {
	q := r[i]
	for j := i + 1; j < len(r); j++ {
		switch {
		case r[j] == '\\' && q != '`':
			j++
		case r[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string in %q", string(r))
}

// skipBlock returns the index just past the block opened at r[i] (strings
// inside it skipped) and the block's text.
func skipBlock(r []rune, i int, open, closing rune) (int, string, error) {
	depth := 0
	for j := i; j < len(r); {
		switch r[j] {
		case '"', '\'', '`':
			end, err := skipString(r, j)
			if err != nil {
				return 0, "", err
			}
			j = end
			continue
		case open:
			depth++
		case closing:
			depth--
			if depth == 0 {
				return j + 1, string(r[i+1 : j]), nil
			}
		}
		j++
	}
	return 0, "", fmt.Errorf("unclosed %c in %q", open, string(r))
}

// Check reports every metric name the dashboard's queries read that
// families (a parsed scrape) does not export. A histogram's _bucket, _sum
// and _count series and a summary's _sum and _count belong to their
// family. A panel target that names no metric is reported too.
func Check(dashboard []byte, families map[string]*dto.MetricFamily) error {
	qs, err := Queries(dashboard)
	if err != nil {
		return err
	}
	if len(qs) == 0 {
		return errors.New("dashboard: no queries")
	}
	var errs []error
	for _, q := range qs {
		names, err := MetricNames(q.Expr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", q.Where, err))
			continue
		}
		if q.Panel && len(names) == 0 {
			errs = append(errs, fmt.Errorf("%s: %q names no metric", q.Where, q.Expr))
		}
		for _, n := range names {
			if !Exported(n, families) {
				errs = append(errs, fmt.Errorf("%s: %s is not exported", q.Where, n))
			}
		}
	}
	return errors.Join(errs...)
}

// Referenced is every metric family the dashboard's queries read, sorted.
func Referenced(dashboard []byte) ([]string, error) {
	qs, err := Queries(dashboard)
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, q := range qs {
		names, err := MetricNames(q.Expr)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", q.Where, err)
		}
		for _, n := range names {
			set[family(n)] = true
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// family strips a histogram or summary series suffix.
func family(name string) string {
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, s); ok {
			return base
		}
	}
	return name
}

// Exported reports whether the series name belongs to one of families.
func Exported(name string, families map[string]*dto.MetricFamily) bool {
	if _, ok := families[name]; ok {
		return true
	}
	for suffix, types := range map[string][]dto.MetricType{
		"_bucket": {dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM},
		"_sum":    {dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM, dto.MetricType_SUMMARY},
		"_count":  {dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM, dto.MetricType_SUMMARY},
	} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		if f, ok := families[base]; ok {
			for _, t := range types {
				if f.GetType() == t {
					return true
				}
			}
		}
	}
	return false
}
