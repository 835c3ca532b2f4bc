package lab

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
)

const (
	// notReadyLabel makes kwok's node-not-ready stage take a node down.
	notReadyLabel = "node-not-ready.stage.kwok.x-k8s.io"
	// notReadyDelay and notReadyJitter make the stage act at once instead
	// of after 1–2 s.
	notReadyDelay  = "node-not-ready.stage.kwok.x-k8s.io/delay"
	notReadyJitter = "node-not-ready.stage.kwok.x-k8s.io/jitter-delay"
)

// createNodes registers the simulated nodes and waits until kwok reports
// them Ready. Each node gets a boot ID, and with the network its namespace
// address as InternalIP.
func (l *Lab) createNodes(ctx context.Context) error {
	cs, err := l.Clientset()
	if err != nil {
		return err
	}
	for _, name := range l.Nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				"kubernetes.io/hostname": name,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
				"type":                   "kwok",
			},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		}}
		if cidr := l.PodCIDR(name); cidr.IsValid() {
			node.Spec.PodCIDR = cidr.String()
			node.Spec.PodCIDRs = []string{cidr.String()}
		}
		if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating node %s: %w", name, err)
		}
	}
	for _, name := range l.Nodes {
		if err := l.WaitNodeReady(ctx, name, true, 2*time.Minute); err != nil {
			return err
		}
		// Only once kwok has initialised the node: its first status write
		// is computed from the node as created and would undo these. Only
		// the fields named are patched; kwok keeps them from now on.
		status := map[string]any{
			"capacity":    nodeResources(),
			"allocatable": nodeResources(),
			"nodeInfo":    map[string]any{"bootID": string(uuid.NewUUID()), "machineID": string(uuid.NewUUID())},
		}
		if l.Net != nil {
			status["addresses"] = []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: l.Net.NodeAddr(name).String()},
				{Type: corev1.NodeHostName, Address: name},
			}
		}
		if err := l.patchNodeStatus(ctx, name, status); err != nil {
			return err
		}
	}
	return nil
}

// minPodSlice is the smallest per-node slice of the pod subnet (16 addresses).
const minPodSlice = 28

// podCIDRs splits podSubnet into equal power-of-two slices, one per node
// plus at least one more (rest) for kwok's default pool, which serves nodes
// without a spec.podCIDR. When the slices would be smaller than a /28 no node
// gets its own (perNode is nil) and rest is the whole subnet.
//
// kwok hands out a slice's addresses from its first host address upwards
// and does not stop at the slice's end, so a node with more pods than its
// slice holds gets addresses of the next slice.
func podCIDRs(podSubnet netip.Prefix, nodes int) (perNode []netip.Prefix, rest netip.Prefix) {
	extra := 0
	for 1<<extra < nodes+1 {
		extra++
	}
	bits := podSubnet.Bits() + extra
	if bits > minPodSlice {
		return nil, podSubnet
	}
	base := podSubnet.Masked().Addr().As4()
	start := binary.BigEndian.Uint32(base[:])
	size := uint32(1) << (32 - bits)
	slice := func(i int) netip.Prefix {
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], start+uint32(i)*size)
		return netip.PrefixFrom(netip.AddrFrom4(a), bits)
	}
	for i := range nodes {
		perNode = append(perNode, slice(i))
	}
	return perNode, slice(nodes)
}

// PodCIDR is the slice of the pod subnet from which the node's pods get
// their IPs (its spec.podCIDR), or the zero Prefix when the node has none:
// without the network, for a node the lab did not create, or when there
// are too many nodes for a /28 each.
func (l *Lab) PodCIDR(node string) netip.Prefix {
	if !l.PodSubnet.IsValid() {
		return netip.Prefix{}
	}
	perNode, _ := podCIDRs(l.PodSubnet, len(l.Nodes))
	for i, n := range l.Nodes {
		if n == node && i < len(perNode) {
			return perNode[i]
		}
	}
	return netip.Prefix{}
}

func nodeResources() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("250"),
	}
}

func (l *Lab) patchNodeStatus(ctx context.Context, name string, status map[string]any) error {
	cs, err := l.Clientset()
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("patching the status of node %s: %w", name, err)
	}
	return nil
}

// NodeReady reports the node's Ready condition.
func NodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// WaitNodeReady waits until the node's Ready condition is ready (true) or
// not (false).
func (l *Lab) WaitNodeReady(ctx context.Context, name string, ready bool, timeout time.Duration) error {
	return l.waitNode(ctx, name, timeout, func(node *corev1.Node) bool { return NodeReady(node) == ready },
		fmt.Sprintf("become Ready=%t", ready))
}

// waitNode polls the node until cond holds; what says what it waited for.
func (l *Lab) waitNode(ctx context.Context, name string, timeout time.Duration, cond func(*corev1.Node) bool, what string) error {
	cs, err := l.Clientset()
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // keep polling through transient errors
		}
		return cond(node), nil
	})
	if err != nil {
		return fmt.Errorf("node %s did not %s within %s: %w", name, what, timeout, err)
	}
	return nil
}

// WaitNodeUsable waits until the node is Ready and the node lifecycle
// controller has seen it so (its not-ready and unreachable taints are
// gone). Until then that controller may still mark pods that start on the
// node NotReady, for good: the lab's kwok makes a pod Ready only once,
// when it starts.
func (l *Lab) WaitNodeUsable(ctx context.Context, name string, timeout time.Duration) error {
	return l.waitNode(ctx, name, timeout, func(node *corev1.Node) bool {
		for _, t := range node.Spec.Taints {
			if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
				return false
			}
		}
		return NodeReady(node)
	}, "become Ready without the not-ready taints")
}

// FailNode makes the node NotReady, as a dead kubelet would (kwok's
// node-not-ready stage). It does not touch the node's network namespace.
func (l *Lab) FailNode(ctx context.Context, name string) error {
	return l.patchNode(ctx, name, map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{notReadyLabel: "true"},
		"annotations": map[string]any{notReadyDelay: "0", notReadyJitter: "0"},
	}})
}

// RecoverNode undoes FailNode; kwok marks the node Ready again.
func (l *Lab) RecoverNode(ctx context.Context, name string) error {
	return l.patchNode(ctx, name, map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{notReadyLabel: nil},
		"annotations": map[string]any{notReadyDelay: nil, notReadyJitter: nil},
	}})
}

// KillNode makes the node fail the hard way, as a crashed or unplugged
// machine would: every process the lab started in the node's namespace (its
// agent) is killed (SIGKILL), the namespace is cut off the bridge (it reaches
// neither the API server nor the client, and nothing reaches it or its pods),
// and the node turns NotReady (FailNode). Pod servers behind the node keep
// running but are unreachable. It needs the lab network.
func (l *Lab) KillNode(ctx context.Context, name string) error {
	ns, err := l.nodeNamespace(name)
	if err != nil {
		return err
	}
	// In deployed mode, the node's pods die with it, whatever their
	// network namespace, and none start there until ReviveNode.
	l.mu.Lock()
	d := l.deployed
	l.mu.Unlock()
	if d != nil {
		d.nodeDown(name)
	}
	for _, p := range l.ProcessesIn(ns) {
		p.Kill()
	}
	if err := l.Net.CutOff(name); err != nil {
		return err
	}
	return l.FailNode(ctx, name)
}

// ReviveNode undoes KillNode: the node's namespace goes back on the bridge
// and kwok marks the node Ready again (wait for it with WaitNodeReady). The
// caller restarts the node's agent (in deployed mode the lab starts the
// node's pods again).
func (l *Lab) ReviveNode(ctx context.Context, name string) error {
	if _, err := l.nodeNamespace(name); err != nil {
		return err
	}
	if err := l.Net.Restore(name); err != nil {
		return err
	}
	if err := l.RecoverNode(ctx, name); err != nil {
		return err
	}
	l.mu.Lock()
	d := l.deployed
	l.mu.Unlock()
	if d != nil {
		d.nodeUp(name)
	}
	return nil
}

func (l *Lab) nodeNamespace(name string) (string, error) {
	if l.Net == nil {
		return "", errors.New("lab: the lab has no network (it needs root)")
	}
	ns := l.Net.NodeNamespace(name)
	if ns == "" {
		return "", fmt.Errorf("lab: no node %q in the lab network", name)
	}
	return ns, nil
}

// BootID is the node's current boot ID.
func (l *Lab) BootID(ctx context.Context, name string) (string, error) {
	cs, err := l.Clientset()
	if err != nil {
		return "", err
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return node.Status.NodeInfo.BootID, nil
}

// Reboot simulates a reboot of the node: it goes NotReady, comes back with
// a new boot ID, and turns Ready again (RebootFor without downtime).
func (l *Lab) Reboot(ctx context.Context, name string) error {
	return l.RebootFor(ctx, name, 0)
}

func (l *Lab) patchNode(ctx context.Context, name string, patch map[string]any) error {
	cs, err := l.Clientset()
	if err != nil {
		return err
	}
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, data, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patching node %s: %w", name, err)
	}
	return nil
}
