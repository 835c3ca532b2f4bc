package lab

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

//go:embed stages/*.yaml
var stages embed.FS

var kwokctlConfig = template.Must(template.New("kwokctl").Parse(`kind: KwokctlConfiguration
apiVersion: config.kwok.x-k8s.io/v1alpha1
options:
  runtime: binary
  # Every component listens on loopback only.
  bindAddress: 127.0.0.1
  kubeVersion: {{ .Version }}
  kubeApiserverBinary: {{ .K8sDir }}/kube-apiserver
  kubeControllerManagerBinary: {{ .K8sDir }}/kube-controller-manager
  kubeSchedulerBinary: {{ .K8sDir }}/kube-scheduler
  kubectlBinary: {{ .K8sDir }}/kubectl
  etcdBinary: {{ .K8sDir }}/etcd
  kwokControllerBinary: {{ .K8sDir }}/kwok
  # RBAC and admission as in a production cluster, so least privilege and
  # admission policies are tested for real.
  kubeAuthorization: true
  kubeAdmission: true
{{- if .SANs }}
  # Node agents reach the API server through the bridge address.
  kubeApiserverCertSANs:
{{- range .SANs }}
  - {{ . }}
{{- end }}
{{- end }}
componentsPatches:
- name: kube-apiserver
  extraArgs:
  # Room for thousands of Services (the default 10.0.0.0/24 holds 253:
  # 126 Redis of two ClusterIP Services each), as in a kubeadm cluster.
  - key: service-cluster-ip-range
    value: 10.96.0.0/16
  # The lab has no kube-proxy: the API server dials a Service's endpoint
  # IPs (kubext's webhook, in deployed mode: the manager pod's IP, which
  # the lab plugs into the root namespace) instead of its ClusterIP.
  - key: enable-aggregator-routing
    value: "true"
{{- if .AdmissionConfig }}
  - key: admission-control-config-file
    value: {{ .AdmissionConfig }}
{{- end }}
{{- if .PodCIDR }}
- name: kwok-controller
  extraArgs:
  # Pod IPs of nodes without a spec.podCIDR of their own. (A flag, not a
  # KwokConfiguration: kwok does not default the options such a file leaves
  # out.)
  - key: cidr
    value: {{ .PodCIDR }}
{{- end }}
`))

// podSecurityConfig makes the API server enforce a Pod Security level in
// every namespace that does not choose its own (Options.PodSecurity).
const podSecurityConfig = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: %[1]q
      enforce-version: latest
      warn: %[1]q
      warn-version: latest
    exemptions:
      namespaces: [kube-system]
`

// K8sDir is where `make tools` puts the control-plane binaries.
func (l *Lab) K8sDir() string { return filepath.Join(l.BinDir, "k8s-"+KubeVersion) }

func (l *Lab) kwokctl(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(l.K8sDir(), "kwokctl"), append([]string{"--name", l.Name}, args...)...)
	cmd.Env = append(os.Environ(), "KWOK_WORKDIR="+filepath.Join(l.Dir, "kwok"))
	return cmd
}

func (l *Lab) createCluster(ctx context.Context, gateway netip.Addr, podSecurity string) error {
	for _, bin := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "etcd", "kwok", "kwokctl"} {
		if _, err := os.Stat(filepath.Join(l.K8sDir(), bin)); err != nil {
			return fmt.Errorf("lab: %s is missing in %s: run `make tools` first", bin, l.K8sDir())
		}
	}
	var cfg bytes.Buffer
	data := struct {
		Version, K8sDir, PodCIDR, AdmissionConfig string
		SANs                                      []string
	}{Version: KubeVersion, K8sDir: l.K8sDir()}
	if l.PodSubnet.IsValid() {
		_, rest := podCIDRs(l.PodSubnet, len(l.Nodes))
		data.PodCIDR = rest.String()
	}
	if gateway.IsValid() {
		data.SANs = []string{gateway.String()}
	}
	if podSecurity != "" {
		data.AdmissionConfig = filepath.Join(l.Dir, "admission.yaml")
		if err := os.WriteFile(data.AdmissionConfig, fmt.Appendf(nil, podSecurityConfig, podSecurity), 0o644); err != nil {
			return err
		}
	}
	if err := kwokctlConfig.Execute(&cfg, data); err != nil {
		return err
	}
	files, err := stages.ReadDir("stages")
	if err != nil {
		return err
	}
	for _, f := range files {
		stage, err := stages.ReadFile("stages/" + f.Name())
		if err != nil {
			return err
		}
		cfg.WriteString("---\n")
		cfg.Write(stage)
	}
	cfgPath := filepath.Join(l.Dir, "kwokctl.yaml")
	if err := os.WriteFile(cfgPath, cfg.Bytes(), 0o644); err != nil {
		return err
	}
	l.Kubeconfig = filepath.Join(l.Dir, "kubeconfig")
	cmd := l.kwokctl(ctx, "create", "cluster", "--config", cfgPath, "--kubeconfig", l.Kubeconfig, "--wait", "3m")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kwokctl create cluster: %w\n%s", err, out)
	}
	return nil
}

func (l *Lab) deleteCluster(ctx context.Context) error {
	clusterDir := filepath.Join(l.Dir, "kwok", "clusters", l.Name)
	if _, err := os.Stat(clusterDir); err != nil {
		return nil // never created, or already gone
	}
	pids := readPIDs(filepath.Join(clusterDir, "pids"))
	// A component a crashed caller left paused (PauseComponent) would
	// ignore the stop signal until the kill after the timeout.
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	out, err := l.kwokctl(ctx, "delete", "cluster", "--kubeconfig", filepath.Join(l.Dir, "kubeconfig")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kwokctl delete cluster: %w\n%s", err, out)
	}
	// kwokctl signals the components and returns; wait until they are gone
	// so that a lab brought up next does not meet their ports or files.
	return waitExited(pids, 30*time.Second)
}

// readPIDs reads the pid files kwokctl keeps for the cluster's components.
func readPIDs(dir string) []int {
	files, _ := os.ReadDir(dir)
	var pids []int
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(dir, f.Name()))
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitExited waits for the processes to exit and kills those that outlive
// the timeout.
func waitExited(pids []int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil {
			if time.Now().After(deadline) {
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
					return fmt.Errorf("killing pid %d: %w", pid, err)
				}
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// apiServerAddr is host:port of the API server, read from the kubeconfig.
func (l *Lab) apiServerAddr() (string, error) {
	cfg, err := clientcmd.LoadFromFile(l.Kubeconfig)
	if err != nil {
		return "", err
	}
	cluster, ok := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]
	if !ok {
		return "", fmt.Errorf("%s: no cluster in the current context", l.Kubeconfig)
	}
	u, err := url.Parse(cluster.Server)
	if err != nil {
		return "", err
	}
	return u.Host, nil
}

// writeAgentKubeconfig writes a copy of the admin kubeconfig that reaches
// the API server at addr (the forwarder on the bridge).
func (l *Lab) writeAgentKubeconfig(addr string) error {
	cfg, err := clientcmd.LoadFromFile(l.Kubeconfig)
	if err != nil {
		return err
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + addr
	}
	l.AgentKubeconfig = filepath.Join(l.Dir, "agent-kubeconfig")
	return clientcmd.WriteToFile(*cfg, l.AgentKubeconfig)
}

// ApplyCRDs installs the CustomResourceDefinitions found in dir and waits
// until the API server serves them.
func (l *Lab) ApplyCRDs(ctx context.Context, dir string) error {
	cfg, err := l.RESTConfig()
	if err != nil {
		return err
	}
	crds, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{dir}, ErrorIfPathMissing: true})
	if err != nil {
		return fmt.Errorf("installing CRDs from %s: %w", dir, err)
	}
	names := make([]string, 0, len(crds))
	for _, c := range crds {
		names = append(names, c.Name)
	}
	l.log("Installed CRDs: %s", strings.Join(names, ", "))
	return nil
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}
