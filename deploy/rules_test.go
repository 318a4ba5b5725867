package deploy

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// prometheusRule is the part of the Prometheus operator's PrometheusRule
// (monitoring.coreos.com/v1) the alerts use; decoded strictly, so a
// misspelled field (exp:, annotation:) is reported.
type prometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Groups []struct {
			Name  string      `json:"name"`
			Rules []alertRule `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func loadRules(t *testing.T) *prometheusRule {
	t.Helper()
	data, err := os.ReadFile("prometheus-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var r prometheusRule
	if err := yaml.UnmarshalStrict(data, &r); err != nil {
		t.Fatalf("prometheus-rules.yaml: %v", err)
	}
	return &r
}

// promQLGrouping and the other patterns strip from an expression what
// holds names that are not metrics: label lists of by/without/on/ignoring
// and group_left/right, label matchers, range selectors and strings.
var (
	promQLString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promQLMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promQLRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promQLGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promQLIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promQLKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true}
)

// exprMetrics returns the metric names a PromQL expression selects: the
// identifiers left once strings, matchers, ranges and grouping labels are
// gone, except function names (followed by "(") and keywords.
func exprMetrics(expr string) []string {
	e := promQLString.ReplaceAllString(expr, `""`)
	e = promQLMatchers.ReplaceAllString(e, " ")
	e = promQLRanges.ReplaceAllString(e, " ")
	e = promQLGrouping.ReplaceAllString(e, " ")
	var out []string
	for _, loc := range promQLIdent.FindAllStringIndex(e, -1) {
		name := e[loc[0]:loc[1]]
		if loc[0] > 0 && (e[loc[0]-1] >= '0' && e[loc[0]-1] <= '9' || e[loc[0]-1] == '.') {
			continue // the unit of a number or duration (5m, 1e3)
		}
		if strings.HasPrefix(strings.TrimLeft(e[loc[1]:], " \t\n"), "(") || promQLKeywords[strings.ToLower(name)] {
			continue
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

func TestExprMetrics(t *testing.T) {
	for _, tt := range []struct {
		expr string
		want []string
	}{
		{`nri_cpualign_connected == 0`, []string{"nri_cpualign_connected"}},
		{`sum by (instance, reason) (increase(nri_cpualign_admission_errors_total[10m])) > 0`, []string{"nri_cpualign_admission_errors_total"}},
		{`kube_daemonset_status_number_unavailable{namespace="nri-cpualign", daemonset="x"} > 0`, []string{"kube_daemonset_status_number_unavailable"}},
		{`rate(a_total[5m] offset 1h) / on (instance) group_left (node) b_info and c unless d{x="y, z"}`, []string{"a_total", "b_info", "c", "d"}},
		{`max without (pod) (x) > bool 1e3`, []string{"x"}},
	} {
		if got := exprMetrics(tt.expr); !slices.Equal(got, tt.want) {
			t.Errorf("exprMetrics(%q) = %q, want %q", tt.expr, got, tt.want)
		}
	}
}

// documentedMetrics returns the metric names docs/metrics.md lists in the
// first column of its tables (label lists such as {event} stripped).
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, l := range strings.Split(string(data), "\n") {
		cells := strings.Split(l, "|")
		if len(cells) < 3 || !strings.HasPrefix(strings.TrimSpace(l), "|") {
			continue
		}
		for _, m := range regexp.MustCompile("`([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\\{[^}`]*\\})?`").FindAllStringSubmatch(cells[1], -1) {
			names[m[1]] = true
		}
	}
	return names
}

// wantAlerts is what an operator must hear about (issue 26): each alert
// and the metric its expression must use.
var wantAlerts = map[string]string{
	"NRICPUAlignNotReady":          "kube_daemonset_status_number_unavailable",
	"NRICPUAlignNotConnected":      "nri_cpualign_connected",
	"NRICPUAlignAdmissionRefusals": "nri_cpualign_admission_errors_total",
	"NRICPUAlignCPUSetDrift":       "nri_cpualign_reconcile_drift_total",
	"NRICPUAlignCheckpointErrors":  "nri_cpualign_checkpoint_errors_total",
	"NRICPUAlignSharedPoolEmpty":   "nri_cpualign_shared_pool_empty",
}

func TestPrometheusRules(t *testing.T) {
	r := loadRules(t)
	if r.APIVersion != "monitoring.coreos.com/v1" || r.Kind != "PrometheusRule" || r.Metadata.Namespace != loadManifests(t).namespaces[0].Name {
		t.Errorf("prometheus-rules.yaml is %s %s in namespace %q, want a monitoring.coreos.com/v1 PrometheusRule in deploy/'s namespace", r.APIVersion, r.Kind, r.Metadata.Namespace)
	}
	documented := documentedMetrics(t)
	if !documented["nri_cpualign_reconcile_drift_total"] || !documented["cpu_manager_pinning_requests_total"] {
		t.Fatalf("documentedMetrics found %d names in docs/metrics.md, not the known ones: the parsing is wrong", len(documented))
	}
	docs, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	_, alertsSection, _ := strings.Cut(string(docs), "\n## Alerts")
	seen := map[string]bool{}
	for _, g := range r.Spec.Groups {
		for _, rule := range g.Rules {
			if rule.Alert == "" || seen[rule.Alert] {
				t.Errorf("group %s: rule with alert name %q (empty or repeated)", g.Name, rule.Alert)
				continue
			}
			seen[rule.Alert] = true
			metrics := exprMetrics(rule.Expr)
			if len(metrics) == 0 {
				t.Errorf("%s: expression %q selects no metric", rule.Alert, rule.Expr)
			}
			for _, m := range metrics {
				if !documented[m] {
					t.Errorf("%s: expression %q uses %s, which docs/metrics.md does not document", rule.Alert, rule.Expr, m)
				}
			}
			if want, ok := wantAlerts[rule.Alert]; ok && !slices.Contains(metrics, want) {
				t.Errorf("%s: expression %q does not use %s", rule.Alert, rule.Expr, want)
			}
			if s := rule.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", rule.Alert, s)
			}
			if rule.Annotations["summary"] == "" || rule.Annotations["description"] == "" {
				t.Errorf("%s: needs a summary and a description annotation", rule.Alert)
			}
			if !strings.Contains(alertsSection, "`"+rule.Alert+"`") {
				t.Errorf("%s is not explained in docs/metrics.md's Alerts section", rule.Alert)
			}
		}
	}
	for a := range wantAlerts {
		if !seen[a] {
			t.Errorf("prometheus-rules.yaml has no alert %s", a)
		}
	}
}
