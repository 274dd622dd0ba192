package server

import (
	"context"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/testing/dashcheck"
)

// dashboardFile is the Grafana dashboard shipped in the repository.
const dashboardFile = "../../deploy/grafana/countersign.json"

// TestDashboardQueriesExportedMetrics drives the real server through an
// ALLOW and a BLOCK at Envoy's Check, a native decision reconciled to
// confirmed absence and a sealing audit sequencer, scrapes /metrics and
// holds the Grafana dashboard to it: every metric a panel or variable
// reads is exported, the dashboard covers the families issue 12 asks for,
// and no countersign_ label carries an identifier.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	key, _, _, err := audit.WriteKeyPair(t.TempDir(), "dashboard.test")
	if err != nil {
		t.Fatal(err)
	}
	h := railHarness(t, noReconcileDelay, harnessOption{cfg: func(c *config.Config) {
		c.AuditSigningKey, c.AuditSealInterval = key, 20*time.Millisecond
	}})
	ctx := context.Background()
	allowed := h.request(1)
	allowed.Attributes.Request.Http.Body = "payment_intent=pi_bench&amount=1000"
	if resp, err := h.client.Check(ctx, allowed); err != nil || resp.GetStatus().GetCode() != 0 {
		t.Fatalf("Check = %v, %v; want ALLOW", resp, err)
	}
	blocked := h.request(2)
	blocked.Attributes.Request.Http.Headers["authorization"] = "Bearer csk_not_a_credential"
	if resp, err := h.client.Check(ctx, blocked); err != nil || resp.GetStatus().GetCode() == 0 {
		t.Fatalf("Check with an unknown credential = %v, %v; want a refusal", resp, err)
	}
	absent := h.confirmAbsent(t, 700)

	fams := scrape(t, h.httpAddr)
	dash, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := dashcheck.Check(dash, fams); err != nil {
		t.Fatalf("the dashboard reads metrics the server does not export:\n%v", err)
	}
	refs, err := dashcheck.Referenced(dash)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"countersign_decisions_total", "countersign_decision_seconds", "countersign_ledger_tx_seconds",
		"countersign_reconcile_outcomes_total", "countersign_quarantined_intents", "countersign_outbox_lag_seconds",
		"countersign_webhook_deliveries_total", "countersign_audit_sealed_records_total", "countersign_audit_seal_failures_total",
	} {
		if !slices.Contains(refs, want) {
			t.Errorf("the dashboard has no panel reading %s (it reads %v)", want, refs)
		}
	}

	// The scrape shows what was driven.
	verdicts := labelValues(fams["countersign_decisions_total"], "verdict")
	if !slices.Contains(verdicts, "ALLOW") || !slices.Contains(verdicts, "BLOCK") {
		t.Errorf("countersign_decisions_total verdicts = %v, want ALLOW and BLOCK", verdicts)
	}
	if n := counterWith(fams["countersign_reconcile_outcomes_total"], "outcome", "confirmed_absent"); n != 1 {
		t.Errorf("confirmed_absent reconciliations = %v, want 1", n)
	}
	if ops := labelValues(fams["countersign_ledger_tx_seconds"], "op"); !slices.Contains(ops, "reconcile_finding") {
		t.Errorf("ledger transactions observed by op %v, want reconcile_finding among them", ops)
	}
	if q := fams["countersign_quarantined_intents"]; q == nil || len(q.GetMetric()) != 1 || q.GetMetric()[0].GetGauge().GetValue() != 0 {
		t.Errorf("countersign_quarantined_intents = %v, want 0", q)
	}

	// Bounded labels: no identifier from a request is a label value.
	labels := []string{"source", "verdict", "reason_code", "op", "outcome", "result", "table"}
	for name, f := range fams {
		if !strings.HasPrefix(name, "countersign_") {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(labels, l.GetName()) {
					t.Errorf("%s has label %s, not one of %v", name, l.GetName(), labels)
				}
				if v := l.GetValue(); v == h.agentID || v == absent.GetIntent().GetSik() || strings.Contains(v, "pi_bench") {
					t.Errorf("%s carries an identifier as a label: %s=%q", name, l.GetName(), v)
				}
			}
		}
	}

	// The check fails for a dashboard naming what is not exported.
	for _, doctor := range []struct{ from, to string }{
		{"countersign_quarantined_intents{", "countersign_quarantined_intent{"},
		{"countersign_ledger_tx_seconds_bucket", "countersign_ledger_tx_seconds_total"},
	} {
		doctored := strings.Replace(string(dash), doctor.from, doctor.to, 1)
		if doctored == string(dash) {
			t.Fatalf("the dashboard has no %s to doctor", doctor.from)
		}
		name := strings.TrimSuffix(doctor.to, "{")
		if err := dashcheck.Check([]byte(doctored), fams); err == nil || !strings.Contains(err.Error(), name+" is not exported") {
			t.Errorf("Check of a dashboard reading %s = %v, want it reported", name, err)
		}
	}
}

// scrape parses the server's /metrics.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics = %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

func labelValues(f *dto.MetricFamily, label string) []string {
	var out []string
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && !slices.Contains(out, l.GetValue()) {
				out = append(out, l.GetValue())
			}
		}
	}
	return out
}

func counterWith(f *dto.MetricFamily, label, value string) float64 {
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == value {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// TestChartShipsTheDashboard: the Helm chart's copy of the dashboard
// (charts cannot read files outside their directory) is the dashboard.
func TestChartShipsTheDashboard(t *testing.T) {
	want, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../charts/countersign/dashboards/countersign.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("charts/countersign/dashboards/countersign.json differs from %s: copy it there", dashboardFile)
	}
}
