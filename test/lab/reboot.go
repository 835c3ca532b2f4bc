package lab

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const (
	// rebootAgentUser is the reboot-agent's service account as deployed
	// (config/default names it kubext-reboot-agent in kubext-system).
	rebootAgentUser = "system:serviceaccount:" + SystemNamespace + ":kubext-reboot-agent"
	// rebootAgentPolicy is the binding of config/policy/reboot-agent.yaml.
	rebootAgentPolicy = "reboot-agent-own-node.reboot.kubext.io"
	// nodeNameExtra is the extra of a service-account token bound to a pod
	// that names the pod's node.
	nodeNameExtra = "authentication.kubernetes.io/node-name"
)

// installRebootAgent serialises installRebootAgent calls of agents started
// together.
var installRebootAgent sync.Mutex

// NodeDir is the lab's stand-in for a node's own disk: the reboot agent's
// sentinel file and kubeconfig live there.
func (l *Lab) NodeDir(node string) string { return filepath.Join(l.Dir, "nodes", node) }

// SentinelDir is the node's /run/kubext, the one host directory the
// deployed reboot-agent mounts (config/reboot-agent/daemonset.yaml).
func (l *Lab) SentinelDir(node string) string { return filepath.Join(l.NodeDir(node), "run-kubext") }

// SentinelFile is the node's reboot sentinel (its
// /run/kubext/reboot-required): create it and the node's reboot agent asks
// for a reboot. A simulated reboot removes it, as a real boot clears /run.
func (l *Lab) SentinelFile(node string) string {
	return filepath.Join(l.SentinelDir(node), "reboot-required")
}

// RebootCommandArgs are reboot-agent flags that make the agent's reboot the
// lab's simulated one (`lab reboot`), with the node NotReady for downtime:
// the simulated time a machine takes to shut down and boot.
func (l *Lab) RebootCommandArgs(node string, downtime time.Duration) []string {
	cmd := fmt.Sprintf("%s reboot --dir %s", filepath.Join(l.BinDir, "lab"), l.Dir)
	if downtime > 0 {
		cmd += " --downtime " + downtime.String()
	}
	return []string{"--reboot-command", cmd + " " + node}
}

// StartRebootAgent runs bin/reboot-agent for a node as a local process (it
// needs no network namespace), and waits until it has synced its view of
// the node. The agent talks to the API server as the deployed agent would:
// as the kubext-reboot-agent service account with a token bound to its node
// (impersonated), so its RBAC and admission policy, installed into the lab
// on first use, are enforced. Its sentinel file is SentinelFile(node); its
// reboot command is the simulated reboot without downtime unless args say
// otherwise (RebootCommandArgs). Later args override earlier ones.
func (l *Lab) StartRebootAgent(ctx context.Context, node string, args ...string) (*Process, error) {
	if err := l.InstallRebootAgent(ctx); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(l.SentinelDir(node), 0o755); err != nil {
		return nil, err
	}
	kubeconfig, err := l.writeRebootAgentKubeconfig(node)
	if err != nil {
		return nil, err
	}
	probes, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	args = append(append([]string{
		"--kubeconfig", kubeconfig, "--node-name", node,
		"--sentinel-file", l.SentinelFile(node), "--sentinel-interval", "500ms",
		// A simulated node has no kernel of its own: its boot ID is only
		// in the Node's status.
		"--boot-id-file=",
		// Orders are carried out only when the reboot controller's
		// approvals ledger holds them, as deployed.
		"--reboot-ledger-namespace", SystemNamespace,
		"--metrics-bind-address", "0", "--health-probe-bind-address", probes,
	}, l.RebootCommandArgs(node, 0)...), args...)
	p, err := l.Start("reboot-agent-"+node, "", filepath.Join(l.BinDir, "reboot-agent"), args)
	if err != nil {
		return nil, err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		if !p.Running() {
			return false, fmt.Errorf("the reboot-agent of %s exited; see %s", node, p.Log)
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
		return nil, fmt.Errorf("the reboot-agent of %s did not become ready (see %s): %w", node, p.Log, err)
	}
	return p, nil
}

// InstallRebootAgent installs the reboot agent's RBAC (config/reboot-agent,
// named as config/default names it) and its admission policy
// (config/policy/reboot-agent.yaml) into the lab, unless they are there, and
// waits until the policy is enforced.
func (l *Lab) InstallRebootAgent(ctx context.Context) error {
	installRebootAgent.Lock()
	defer installRebootAgent.Unlock()
	root, done, err := l.prepareAgentAccess(ctx, rebootAgentPolicy)
	if err != nil || done {
		return err
	}
	// The RBAC as config/default deploys it: in kubext-system, every name
	// prefixed kubext-. Kustomize only reads files below its directory.
	dir, err := os.MkdirTemp(l.Dir, "reboot-agent-rbac")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rbac, err := os.ReadFile(filepath.Join(root, "config", "reboot-agent", "rbac.yaml"))
	if err != nil {
		return err
	}
	kustomization := "namespace: " + SystemNamespace + "\nnamePrefix: kubext-\nresources:\n  - rbac.yaml\n"
	if err := errors.Join(
		os.WriteFile(filepath.Join(dir, "rbac.yaml"), rbac, 0o644),
		os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o644),
	); err != nil {
		return err
	}
	if _, err := l.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-k", dir); err != nil {
		return err
	}
	for _, policy := range []string{"reboot-agent.yaml", "reboot-order.yaml", "reboot-ledger.yaml"} {
		if _, err := l.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-f", filepath.Join(root, "config", "policy", policy)); err != nil {
			return err
		}
	}
	if err := l.waitRebootAgentPolicy(ctx); err != nil {
		return err
	}
	l.log("Installed the reboot agent's RBAC and admission policy")
	return nil
}

// waitRebootAgentPolicy waits until the API server enforces the reboot
// agent's policy (loading it takes a moment): until the agent of a node
// that does not exist is refused a dry-run request for a lab node's reboot.
func (l *Lab) waitRebootAgentPolicy(ctx context.Context) error {
	if len(l.Nodes) == 0 {
		return nil
	}
	cfg, err := l.RESTConfig()
	if err != nil {
		return err
	}
	cfg.Impersonate = rest.ImpersonationConfig{UserName: rebootAgentUser, Extra: map[string][]string{nodeNameExtra: {"no-such-node"}}}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"true"}}}`, "reboot.kubext.io/needed")
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = cs.CoreV1().Nodes().Patch(ctx, l.Nodes[0], types.MergePatchType, patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), "may change only its own node"), nil
	})
	if err != nil {
		return fmt.Errorf("the reboot agent's admission policy is not enforced (last answer: %v): %w", last, err)
	}
	return nil
}

// RebootAgentImpersonation is the deployed reboot-agent of node: its
// service account, with a token bound to the node's pod (for agents run in
// a bench's own process, as StartRebootAgent's kubeconfig has it).
func RebootAgentImpersonation(node string) rest.ImpersonationConfig {
	return rest.ImpersonationConfig{
		UserName: rebootAgentUser,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + SystemNamespace, "system:authenticated"},
		Extra:    map[string][]string{nodeNameExtra: {node}},
	}
}

// writeRebootAgentKubeconfig writes the node's agent kubeconfig: the lab's
// admin credentials impersonating the agent's service account with a token
// bound to the node.
func (l *Lab) writeRebootAgentKubeconfig(node string) (string, error) {
	return writeImpersonating(l.Kubeconfig, RebootAgentImpersonation(node), filepath.Join(l.NodeDir(node), "reboot-agent.kubeconfig"))
}

// RebootFor simulates a reboot of the node that keeps it down for downtime:
// it goes NotReady, its sentinel file goes (as a boot clears /run), it
// comes back with a new boot ID, and turns Ready again. In deployed mode
// the node's pods' processes die with it and start again once it is back,
// so that they see the new boot ID, as after a real reboot.
func (l *Lab) RebootFor(ctx context.Context, name string, downtime time.Duration) error {
	l.mu.Lock()
	d := l.deployed
	l.mu.Unlock()
	if d != nil {
		d.nodeDown(name)
		defer d.nodeUp(name)
	}
	if err := l.FailNode(ctx, name); err != nil {
		return err
	}
	// The node says so itself, as a kubelet going down stops posting
	// Ready: kwok's stage would, but only once its own queue reaches the
	// node (0.1-1 s at 1,000 nodes: the lab's, not the reboot's, time).
	// The label stays, so kwok agrees (its stage writes the same condition).
	if err := l.postReady(ctx, name, false); err != nil {
		return err
	}
	if err := l.WaitNodeReady(ctx, name, false, time.Minute); err != nil {
		return err
	}
	if err := os.Remove(l.SentinelFile(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(downtime):
	}
	// The kubelet reports the new boot ID when it starts, just before the
	// node turns Ready.
	id := string(uuid.NewUUID())
	bootID := map[string]any{"nodeInfo": map[string]any{"bootID": id}}
	if err := l.patchNodeStatus(ctx, name, bootID); err != nil {
		return err
	}
	// What the node's pods read as /proc/sys/kernel/random/boot_id.
	if err := l.setBootIDFile(name, id); err != nil {
		return err
	}
	if err := l.RecoverNode(ctx, name); err != nil {
		return err
	}
	// A kubelet that starts posts Ready itself; kwok's node-initialize
	// stage may do it first, with the same condition. Only now: with the
	// label still on, kwok's node-not-ready stage would take it back.
	if err := l.postReady(ctx, name, true); err != nil {
		return err
	}
	return l.WaitNodeReady(ctx, name, true, time.Minute)
}

// postReady writes the node's Ready condition as kwok's stages write it
// (the same reasons and messages, so that neither undoes the other), with
// the transition at now, unless the condition already has that status (kwok
// got there first): then, as a kubelet does, it keeps the transition time.
// Moving it would tell a reboot controller that the node went through a
// NotReady it never saw, and restart its soak.
func (l *Lab) postReady(ctx context.Context, name string, ready bool) error {
	now := metav1.Now()
	c := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		Reason: "KubeletReady", Message: "kubelet is posting ready status",
		LastHeartbeatTime: now, LastTransitionTime: now}
	if !ready {
		c.Status, c.Reason, c.Message = corev1.ConditionFalse, "nodeFailed", "node failed"
	}
	cs, err := l.Clientset()
	if err != nil {
		return err
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, old := range node.Status.Conditions {
		if old.Type == corev1.NodeReady && old.Status == c.Status && !old.LastTransitionTime.IsZero() {
			c.LastTransitionTime = old.LastTransitionTime
		}
	}
	return l.patchNodeStatus(ctx, name, map[string]any{"conditions": []corev1.NodeCondition{c}})
}
