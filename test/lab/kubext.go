package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
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
// way it runs in a cluster (as its service account, with the RBAC and
// admission policies of config/default: InstallManagerAccess), and waits
// until it reports ready. name tells
// replicas apart (their logs are logs/<name>.log).
func (l *Lab) StartManager(ctx context.Context, name string, args ...string) (*Manager, error) {
	return l.StartManagerBinary(ctx, filepath.Join(l.BinDir, "manager"), name, args...)
}

// StartManagerBinary is StartManager with another build of the manager
// (a bench comparing two).
func (l *Lab) StartManagerBinary(ctx context.Context, binary, name string, args ...string) (*Manager, error) {
	if err := l.InstallManagerAccess(ctx); err != nil {
		return nil, err
	}
	kubeconfig, err := l.writeManagerKubeconfig()
	if err != nil {
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
		"--kubeconfig", kubeconfig, "--leader-elect", "--leader-election-namespace", SystemNamespace,
		"--metrics-bind-address", metrics, "--health-probe-bind-address", probes,
		// A local process has no serving certificate the lab's API server trusts.
		"--enable-webhooks=false",
	}, args...)
	p, err := l.Start(name, "", binary, args)
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
// namespace, and waits until it renews its heartbeat. The agent talks to
// the API server as the deployed agent would: as the kubext-ip-agent
// service account with a token bound to its node (impersonated), so its
// RBAC and admission policy, installed into the lab on first use
// (InstallIPAgent), are enforced.
func (l *Lab) StartIPAgent(ctx context.Context, node string, args ...string) (*Process, error) {
	if l.Net == nil {
		return nil, fmt.Errorf("the ip-agent needs the lab network (root)")
	}
	if err := l.InstallIPAgent(ctx); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(l.NodeDir(node), 0o755); err != nil {
		return nil, err
	}
	kubeconfig, err := l.writeIPAgentKubeconfig(node)
	if err != nil {
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
		"--kubeconfig", kubeconfig, "--node-name", node, "--heartbeat-namespace", SystemNamespace,
		"--interface", "eth0",
		// The lab's pods reach each other with their own addresses (it has
		// no Services).
		"--exclude-snat", l.PodSubnet.String(),
	}, args...)
	p, err := l.Start("ip-agent-"+node, l.Net.NodeNamespace(node), filepath.Join(l.BinDir, "ip-agent"), args)
	if err != nil {
		return nil, err
	}
	// The log is appended to across restarts of the node's agent: only
	// this run's start counts (read at once: the new process takes far
	// longer than this to get there).
	earlier := agentWorkersStarted(p.Log)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if !p.Running() {
			return false, fmt.Errorf("the ip-agent of %s exited; see %s", node, p.Log)
		}
		// Ready: it renewed its heartbeat, or, on a node with nothing to
		// do (no pool selects it yet, and then it writes nothing), its
		// informers are synced and its reconciler runs.
		if l, err := cs.CoordinationV1().Leases(SystemNamespace).Get(ctx, lease, metav1.GetOptions{}); err == nil &&
			l.Spec.RenewTime != nil && l.Spec.RenewTime.After(before) {
			return true, nil
		}
		return agentWorkersStarted(p.Log) > earlier, nil
	})
	if err != nil {
		p.Stop(5 * time.Second)
		return nil, fmt.Errorf("the ip-agent of %s neither renewed its heartbeat nor started its reconciler (see %s): %w", node, p.Log, err)
	}
	return p, nil
}

const (
	// ipAgentUser is the ip-agent's service account as config/default
	// deploys it.
	ipAgentUser = "system:serviceaccount:" + SystemNamespace + ":kubext-ip-agent"
	// ipAgentPolicy is the binding of config/policy/ip-agent.yaml as
	// config/default names it.
	ipAgentPolicy = "kubext-ip-agent-own-node.ip.kubext.io"
)

// installIPAgent serialises InstallIPAgent calls of agents started
// together.
var installIPAgent sync.Mutex

// InstallIPAgent installs the ip-agent's RBAC (config/ip-agent/rbac.yaml)
// and admission policy (config/policy/ip-agent.yaml) into the lab, exactly
// as `make deploy` (config/default) renders them, unless they are there,
// and waits until the policy is enforced.
func (l *Lab) InstallIPAgent(ctx context.Context) error {
	installIPAgent.Lock()
	defer installIPAgent.Unlock()
	root, done, err := l.prepareAgentAccess(ctx, ipAgentPolicy)
	if err != nil || done {
		return err
	}
	objs, err := RenderIPAgentAccess(ctx, filepath.Join(l.K8sDir(), "kubectl"), filepath.Join(root, "config", "default"))
	if err != nil {
		return err
	}
	if err := l.applyObjects(ctx, "ip-agent-access.json", objs); err != nil {
		return err
	}
	if err := l.waitIPAgentPolicy(ctx); err != nil {
		return err
	}
	l.log("Installed the ip-agent's RBAC and admission policy (%d objects from config/default)", len(objs))
	return nil
}

// prepareAgentAccess is the start of installing an agent's access: done
// when the binding of its admission policy is already there; otherwise the
// repository root to read the manifests from, with the system namespace
// created.
func (l *Lab) prepareAgentAccess(ctx context.Context, policyBinding string) (root string, done bool, err error) {
	cs, err := l.Clientset()
	if err != nil {
		return "", false, err
	}
	_, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, policyBinding, metav1.GetOptions{})
	if err == nil {
		return "", true, nil
	}
	if !apierrors.IsNotFound(err) {
		return "", false, err
	}
	if root, err = RepoRoot(); err != nil {
		return "", false, err
	}
	return root, false, l.EnsureNamespace(ctx, SystemNamespace)
}

// RenderIPAgentAccess renders the kustomization in dir with kubectl
// kustomize and returns what of it gives the ip-agent its access: its
// ServiceAccount and RBAC, and its admission policy and binding (every
// object of those kinds whose name contains "ip-agent"). Cluster-scoped
// objects come without the namespace kustomize gives them.
func RenderIPAgentAccess(ctx context.Context, kubectl, dir string) ([]*unstructured.Unstructured, error) {
	objs, err := renderAccess(ctx, kubectl, dir)
	if err != nil {
		return nil, err
	}
	objs = slices.DeleteFunc(objs, func(u *unstructured.Unstructured) bool { return !strings.Contains(u.GetName(), "ip-agent") })
	if len(objs) == 0 {
		return nil, fmt.Errorf("kubectl kustomize %s renders no ip-agent RBAC or admission policy", dir)
	}
	return objs, nil
}

// accessKinds are the kinds that say who may do what, and how much:
// identities, RBAC, admission policies, API priority and fairness.
// Cluster-scoped ones are true.
var accessKinds = map[string]bool{"ServiceAccount": false, "Role": false, "RoleBinding": false,
	"ClusterRole": true, "ClusterRoleBinding": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true, "FlowSchema": true}

// renderAccess renders the kustomization in dir with kubectl kustomize and
// returns its objects of the accessKinds, the cluster-scoped ones without
// the namespace kustomize gives them.
func renderAccess(ctx context.Context, kubectl, dir string) ([]*unstructured.Unstructured, error) {
	out, err := exec.CommandContext(ctx, kubectl, "kustomize", dir).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return nil, fmt.Errorf("kubectl kustomize %s: %w\n%s", dir, err, exit.Stderr)
		}
		return nil, fmt.Errorf("kubectl kustomize %s: %w", dir, err)
	}
	var objs []*unstructured.Unstructured
	dec := k8syaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("kubectl kustomize %s: %w", dir, err)
		}
		clusterScoped, access := accessKinds[u.GetKind()]
		if !access {
			continue
		}
		if clusterScoped {
			u.SetNamespace("")
		}
		objs = append(objs, u)
	}
	return objs, nil
}

// applyObjects applies objects server-side through a file in the lab's
// directory named name.
func (l *Lab) applyObjects(ctx context.Context, name string, objs []*unstructured.Unstructured) error {
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List"}}
	for _, o := range objs {
		list.Items = append(list.Items, *o)
	}
	manifest, err := list.MarshalJSON()
	if err != nil {
		return err
	}
	path := filepath.Join(l.Dir, name)
	if err := os.WriteFile(path, manifest, 0o644); err != nil {
		return err
	}
	_, err = l.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-f", path)
	return err
}

// waitIPAgentPolicy waits until the API server enforces the ip-agent's
// policy (loading it takes a moment): until the agent of a node that does
// not exist is refused a dry-run creation of a lab node's heartbeat.
func (l *Lab) waitIPAgentPolicy(ctx context.Context) error {
	if len(l.Nodes) == 0 {
		return nil
	}
	cfg, err := l.RESTConfig()
	if err != nil {
		return err
	}
	cfg.Impersonate = ipAgentImpersonation("no-such-node")
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: SystemNamespace, Name: "ip-agent-" + l.Nodes[0]},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(l.Nodes[0])},
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = cs.CoordinationV1().Leases(SystemNamespace).Create(ctx, lease, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), "may write only its own heartbeat Lease"), nil
	})
	if err != nil {
		return fmt.Errorf("the ip-agent's admission policy is not enforced (last answer: %v): %w", last, err)
	}
	return nil
}

// IPAgentImpersonation is the deployed ip-agent of node: its service
// account, with a token bound to the node's pod (for agents run in the
// bench's own process).
func IPAgentImpersonation(node string) rest.ImpersonationConfig { return ipAgentImpersonation(node) }

// ipAgentImpersonation is the deployed ip-agent of node: its service
// account, with a token bound to the node's pod.
func ipAgentImpersonation(node string) rest.ImpersonationConfig {
	return rest.ImpersonationConfig{
		UserName: ipAgentUser,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + SystemNamespace, "system:authenticated"},
		Extra:    map[string][]string{nodeNameExtra: {node}},
	}
}

// writeIPAgentKubeconfig writes the node's ip-agent kubeconfig: the
// credentials of AgentKubeconfig (it reaches the API server from the node's
// network namespace) impersonating the agent's service account with a token
// bound to the node.
func (l *Lab) writeIPAgentKubeconfig(node string) (string, error) {
	return writeImpersonating(l.AgentKubeconfig, ipAgentImpersonation(node), filepath.Join(l.NodeDir(node), "ip-agent.kubeconfig"))
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

// agentSyncedMessage is ipagent.SyncedMessage (not imported: ipagent's
// tests use this package).
const agentSyncedMessage = "Informers synced: reconciling the node"

// agentWorkersStarted counts the times the ip-agent's log at path says its
// reconciler started (ipagent.SyncedMessage, once its informers synced).
func agentWorkersStarted(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n := 0
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.Contains(line, agentSyncedMessage) {
			n++
		}
	}
	return n
}

// WitnessPort is the UDP port of the ip-agents' witness protocol on the
// lab's node network.
const WitnessPort = 7946

// WitnessArgs are the ip-agent flags that put it in the witness protocol
// (pools with failover Witness): the port, a key shared by the lab's
// agents, made once per lab (what the Secret kubext-witness-key holds in a
// cluster), and the node network as the only source the port takes
// (the lab's pods are outside it).
func (l *Lab) WitnessArgs() ([]string, error) {
	key := filepath.Join(l.Dir, "witness.key")
	if _, err := os.Stat(key); errors.Is(err, os.ErrNotExist) {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		if err := os.WriteFile(key, b, 0o600); err != nil {
			return nil, err
		}
	}
	args := []string{"--witness-port", strconv.Itoa(WitnessPort), "--witness-key-file", key}
	if l.Net != nil {
		args = append(args, "--witness-allow-from", l.Net.Subnet.String())
	}
	return args, nil
}
