package dashcheck

import (
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

func TestMetricNames(t *testing.T) {
	cases := []struct {
		name, expr string
		want       []string
		err        string
	}{
		{"bare selector", "up", []string{"up"}, ""},
		{"matchers and range", `rate(a_total{job=~"$job", x="}{[by (b)"}[$__rate_interval])`, []string{"a_total"}, ""},
		{"aggregation with by before", `sum by (le, op) (rate(h_bucket[5m]))`, []string{"h_bucket"}, ""},
		{"aggregation with without after", `sum(rate(c_total[1m])) without (instance, job)`, []string{"c_total"}, ""},
		{"quantile with number", `histogram_quantile(0.99, sum by (le) (rate(h_bucket[5m])))`, []string{"h_bucket"}, ""},
		{"vector matching", `a / on (job) group_left (version) b * ignoring(x) c > bool 1e3`, []string{"a", "b", "c"}, ""},
		{"set operators and offset", `x and y offset 5m or z unless w @ 1609746000`, []string{"x", "y", "z", "w"}, ""},
		{"repeats once", `a + a - a`, []string{"a"}, ""},
		{"recording rule colons", `job:requests:rate5m`, []string{"job:requests:rate5m"}, ""},
		{"subquery and comment", "max_over_time(rate(q_total[5m])[1h:1m]) # not_a_metric\n", []string{"q_total"}, ""},
		{"keywords are not metrics", `clamp_min(inf, 0) + nan`, nil, ""},
		{"escaped quote in matcher", `m{a="x\"}y"}`, []string{"m"}, ""},
		{"name matcher refused", `{__name__="m"}`, nil, "__name__"},
		{"variable as metric refused", `rate($metric[5m])`, nil, "Grafana variable"},
		{"unclosed matcher refused", `m{a="x"`, nil, "unclosed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MetricNames(tc.expr)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("MetricNames(%q) = %v, %v; want an error with %q", tc.expr, got, err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("MetricNames(%q) = %v, %v; want %v", tc.expr, got, err, tc.want)
			}
		})
	}
}

func families() map[string]*dto.MetricFamily {
	f := func(name string, t dto.MetricType) *dto.MetricFamily {
		return &dto.MetricFamily{Name: proto.String(name), Type: t.Enum()}
	}
	return map[string]*dto.MetricFamily{
		"c_total": f("c_total", dto.MetricType_COUNTER),
		"h":       f("h", dto.MetricType_HISTOGRAM),
		"g":       f("g", dto.MetricType_GAUGE),
	}
}

const dashboard = `{
  "panels": [
    {"title": "one", "targets": [{"refId": "A", "expr": "rate(c_total[5m])"}, {"refId": "B", "expr": "histogram_quantile(0.5, sum by (le) (rate(h_bucket[5m]))) / h_count"}]},
    {"type": "row", "title": "nested", "panels": [{"title": "two", "targets": [{"refId": "A", "expr": "max(g)"}]}]}
  ],
  "templating": {"list": [
    {"name": "datasource", "type": "datasource", "query": "prometheus"},
    {"name": "job", "type": "query", "query": {"query": "label_values(g{x=\"a,b\"}, job)"}},
    {"name": "all", "type": "query", "query": "label_values(job)"}
  ]}
}`

func TestCheck(t *testing.T) {
	if err := Check([]byte(dashboard), families()); err != nil {
		t.Fatalf("Check of a dashboard naming only exported metrics: %v", err)
	}
	refs, err := Referenced([]byte(dashboard))
	if err != nil || !slices.Equal(refs, []string{"c_total", "g", "h"}) {
		t.Fatalf("Referenced = %v, %v", refs, err)
	}
	cases := []struct{ name, from, to, want string }{
		{"unknown metric in a panel", "rate(c_total[5m])", "rate(c_missing_total[5m])", `panel "one" target A: c_missing_total is not exported`},
		{"unknown metric in a nested panel", "max(g)", "max(gone)", `panel "two" target A: gone is not exported`},
		{"unknown metric in a variable", `label_values(g{`, `label_values(nope{`, `variable "job": nope is not exported`},
		{"_bucket of a gauge", "max(g)", "max(g_bucket)", "g_bucket is not exported"},
		{"_count of a counter", "h_count", "c_total_count", "c_total_count is not exported"},
		{"a panel naming no metric", "max(g)", "vector(1)", "names no metric"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doctored := strings.Replace(dashboard, tc.from, tc.to, 1)
			if doctored == dashboard {
				t.Fatalf("the case changed nothing")
			}
			err := Check([]byte(doctored), families())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check = %v, want an error with %q", err, tc.want)
			}
		})
	}
}
