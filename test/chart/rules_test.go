package chart

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// promtool finds promtool (Debian's prometheus package); missing, the test
// fails saying so: `make test` installs it (Makefile, "Chart").
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: `make promtool` installs it (apt-get install prometheus); the rule tests do not skip")
	}
	return p
}

// rulesFile writes the rule groups of config/prometheus/rules.yaml (a
// PrometheusRule) as a plain Prometheus rules file, with the promtool unit
// tests beside it, and returns the directory.
func rulesFile(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root(t), "config/prometheus/rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		Spec map[string]any `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &rule); err != nil {
		t.Fatal(err)
	}
	groups, err := yaml.Marshal(rule.Spec)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.groups.yaml"), groups, 0o600); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(root(t), "config/prometheus/tests/rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules_test.yaml"), tests, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPromtoolCheckRules: the alert rules are valid PromQL and rules
// (promtool check rules, with its linter).
func TestPromtoolCheckRules(t *testing.T) {
	dir := rulesFile(t)
	out, err := exec.Command(promtool(t), "check", "rules", "--lint=all", "--lint-fatal", filepath.Join(dir, "rules.groups.yaml")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestPromtoolRuleUnitTests runs config/prometheus/tests/rules_test.yaml:
// alerts fire on the series that should fire them, after their `for`, with
// their labels and annotations, and stay silent otherwise.
func TestPromtoolRuleUnitTests(t *testing.T) {
	dir := rulesFile(t)
	cmd := exec.Command(promtool(t), "test", "rules", "rules_test.yaml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestPromtoolUnitTestsCanFail: a broken alert (its threshold changed) makes
// the unit tests fail, so they test something.
func TestPromtoolUnitTestsCanFail(t *testing.T) {
	dir := rulesFile(t)
	path := filepath.Join(dir, "rules.groups.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(data), ">= 0.9", ">= 0.99", 1)
	if broken == string(data) {
		t.Fatal("the pool threshold >= 0.9 is not in the rules any more: update this test")
	}
	if err := os.WriteFile(path, []byte(broken), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool(t), "test", "rules", "rules_test.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("promtool test rules passed with the pool alert at 99%%:\n%s", out)
	}
}
