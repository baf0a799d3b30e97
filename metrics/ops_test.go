package metrics_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// metricNames are the names the observers register (read from the
// package's source: a vector with no series yet is not gathered), with
// the series a histogram adds.
func metricNames(t *testing.T) []string {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var src []byte
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	var all []string
	for _, m := range regexp.MustCompile(`Name: "([a-z_]+)"`).FindAllStringSubmatch(string(src), -1) {
		n := "mcprel_" + m[1]
		all = append(all, n, n+"_bucket", n+"_sum", n+"_count")
	}
	if len(all) < 40 {
		t.Fatalf("found only %d names in the package's source: the pattern no longer matches it", len(all)/4)
	}
	return all
}

// usedMetrics finds the mcprel metrics an expression queries.
func usedMetrics(expr string) []string {
	return regexp.MustCompile(`mcprel_[a-z_]+`).FindAllString(expr, -1)
}

// The alerting rules pass promtool and query only metrics that exist.
func TestRulesFile(t *testing.T) {
	names := metricNames(t)
	raw, err := os.ReadFile("ops/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range usedMetrics(string(raw)) {
		if !slices.Contains(names, m) {
			t.Errorf("rules.yml queries %s, which the observer does not export", m)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("MCPREL_REQUIRE_PROMTOOL") == "1" {
			t.Fatal("promtool is not installed (apt-get install prometheus)")
		}
		t.Skip("promtool is not installed (apt-get install prometheus); the rules were checked for metric names only")
	}
	if out, err := exec.Command(promtool, "check", "rules", "ops/rules.yml").CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// The dashboard parses and its panels query only metrics that exist.
func TestDashboard(t *testing.T) {
	names := metricNames(t)
	raw, err := os.ReadFile("ops/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	if len(d.Panels) == 0 {
		t.Fatal("the dashboard has no panels")
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, target := range p.Targets {
			used := usedMetrics(target.Expr)
			if len(used) == 0 || strings.TrimSpace(target.Expr) == "" {
				t.Errorf("panel %q: %q queries no mcprel metric", p.Title, target.Expr)
			}
			for _, m := range used {
				if !slices.Contains(names, m) {
					t.Errorf("panel %q queries %s, which the observer does not export", p.Title, m)
				}
			}
		}
	}
}
