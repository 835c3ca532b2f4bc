// Package chart holds the tests of the Helm chart (charts/kubext) and of the
// observability pack (config/prometheus): the chart's copies of config/ are
// in sync, `helm lint --strict` passes and the values schema refuses bad
// values, `helm template` with default values renders what
// `kubectl kustomize config/default` does, the alert rules pass promtool and
// their unit tests, every metric the rules and the dashboard use is one the
// binaries export, and the chart installs, upgrades and uninstalls on the lab.
package chart
