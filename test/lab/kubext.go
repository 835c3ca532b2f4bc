package lab

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// SystemNamespace is where kubext's components keep their Leases, as in a
// deployed cluster.
const SystemNamespace = "kubext-system"

// Manager is the manager process the lab runs.
type Manager struct {
	*Process
	// MetricsURL serves the manager's Prometheus metrics.
	MetricsURL string
}

// StartManager runs bin/manager against the lab with leader election, the
// way it runs in a cluster, and waits until it reports ready. name tells
// replicas apart (their logs are logs/<name>.log).
func (l *Lab) StartManager(ctx context.Context, name string, args ...string) (*Manager, error) {
	if err := l.EnsureNamespace(ctx, SystemNamespace); err != nil {
		return nil, err
	}
	metrics, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	probes, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	args = append([]string{
		"--kubeconfig", l.Kubeconfig, "--leader-elect", "--leader-election-namespace", SystemNamespace,
		"--metrics-bind-address", metrics, "--health-probe-bind-address", probes,
		// A local process has no serving certificate the lab's API server trusts.
		"--enable-webhooks=false",
	}, args...)
	p, err := l.Start(name, "", filepath.Join(l.BinDir, "manager"), args)
	if err != nil {
		return nil, err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		if !p.Running() {
			return false, fmt.Errorf("the manager exited; see %s", p.Log)
		}
		resp, err := http.Get("http://" + probes + "/readyz")
		if err != nil {
			return false, nil //nolint:nilerr // not listening yet
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		p.Stop(5 * time.Second)
		return nil, fmt.Errorf("the manager did not become ready (see %s): %w", p.Log, err)
	}
	return &Manager{Process: p, MetricsURL: "http://" + metrics + "/metrics"}, nil
}

// StartIPAgent runs bin/ip-agent for a node inside the node's network
// namespace, and waits until it renews its heartbeat.
func (l *Lab) StartIPAgent(ctx context.Context, node string, args ...string) (*Process, error) {
	if l.Net == nil {
		return nil, fmt.Errorf("the ip-agent needs the lab network (root)")
	}
	if err := l.EnsureNamespace(ctx, SystemNamespace); err != nil {
		return nil, err
	}
	cs, err := l.Clientset()
	if err != nil {
		return nil, err
	}
	lease := "ip-agent-" + node
	before := time.Time{}
	if old, err := cs.CoordinationV1().Leases(SystemNamespace).Get(ctx, lease, metav1.GetOptions{}); err == nil && old.Spec.RenewTime != nil {
		before = old.Spec.RenewTime.Time
	}
	args = append([]string{
		"--kubeconfig", l.AgentKubeconfig, "--node-name", node, "--heartbeat-namespace", SystemNamespace,
		"--interface", "eth0",
	}, args...)
	p, err := l.Start("ip-agent-"+node, l.Net.NodeNamespace(node), filepath.Join(l.BinDir, "ip-agent"), args)
	if err != nil {
		return nil, err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if !p.Running() {
			return false, fmt.Errorf("the ip-agent of %s exited; see %s", node, p.Log)
		}
		l, err := cs.CoordinationV1().Leases(SystemNamespace).Get(ctx, lease, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // not created yet
		}
		return l.Spec.RenewTime != nil && l.Spec.RenewTime.After(before), nil
	})
	if err != nil {
		p.Stop(5 * time.Second)
		return nil, fmt.Errorf("the ip-agent of %s did not renew its heartbeat (see %s): %w", node, p.Log, err)
	}
	return p, nil
}

// EnsureNamespace creates a namespace if it does not exist.
func (l *Lab) EnsureNamespace(ctx context.Context, name string) error {
	cs, err := l.Clientset()
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Kubectl runs the lab's kubectl against the lab.
func (l *Lab) Kubectl(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(l.K8sDir(), "kubectl"), append([]string{"--kubeconfig", l.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("kubectl %v: %w\n%s", args, err, out)
	}
	return out, nil
}
