package reboot

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/heartbeat"
	"github.com/kubext/kubext/internal/heartbeat/heartbeattest"
	"github.com/kubext/kubext/internal/rebootagent"
	"github.com/kubext/kubext/internal/rebootplan"
	"github.com/kubext/kubext/test/testenv"
)

// ownAPIServer starts an API server for one test (for tests that run
// controllers of their own: this package's shared one has a controller
// running already), stopped when the test ends, and a client of it.
func ownAPIServer(t *testing.T) (*testenv.Env, client.Client) {
	t.Helper()
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return env, c
}

// testLabel ties a test's nodes to its group, so tests do not see each
// other's nodes.
const testLabel = "reboot-test"

// makeGroup creates a RebootGroup selecting the test's nodes.
func makeGroup(t *testing.T, name string, maxUnavailable intstr.IntOrString, change func(*rebootv1.RebootGroupSpec)) *rebootv1.RebootGroup {
	t.Helper()
	g := &rebootv1.RebootGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: rebootv1.RebootGroupSpec{
			NodeSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{testLabel: name}},
			MaxUnavailable: &maxUnavailable,
			SoakSeconds:    ptr.To[int32](0),
		},
	}
	if change != nil {
		change(&g.Spec)
	}
	if err := k8s.Create(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), g) })
	return g
}

// makeNode creates a Ready node of the test's group with a boot ID, as a
// kubelet would report it.
func makeNode(t *testing.T, group, name string, change func(*corev1.Node)) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{testLabel: group}, Annotations: map[string]string{}}}
	if change != nil {
		change(n)
	}
	if err := k8s.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	dropSlotsAtEnd(t, name)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), n) })
	setNodeStatus(t, name, true, "boot-"+name+"-0")
	startHeartbeat(t, name)
}

// testNodes are the nodes each running test made, for dropSlotsAtEnd.
var testNodes = struct {
	sync.Mutex
	of map[*testing.T][]string
}{of: map[*testing.T][]string{}}

// dropSlotsAtEnd takes the test's nodes out of the approvals ledger once
// the test is over and its nodes are deleted (the cleanup is registered
// with the test's first node, so it runs after every node's deletion). A
// test that fails midway leaves its nodes' slots behind, and a node
// deleted while down keeps its slot until its group's reboot timeout (the
// default once the group is gone too): a control-plane node's slot would
// then hold every worker of every later test.
func dropSlotsAtEnd(t *testing.T, node string) {
	testNodes.Lock()
	defer testNodes.Unlock()
	names, registered := testNodes.of[t]
	testNodes.of[t] = append(names, node)
	if registered {
		return
	}
	t.Cleanup(func() {
		testNodes.Lock()
		names := testNodes.of[t]
		delete(testNodes.of, t)
		testNodes.Unlock()
		// A reconcile in flight when the nodes were deleted may still
		// write a slot of one of them (an order decided from a cache that
		// had not seen the deletion): look again a moment later.
		for range 3 {
			dropped, err := dropSlots(context.Background(), names)
			if err != nil {
				t.Errorf("dropping the slots of %v from the reboot ledger: %v", names, err)
				return
			}
			if !dropped {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

// dropSlots removes the named nodes' slots from the approvals ledger,
// conditional on the version read (the controller writes it too) and
// again on a conflict; it says whether any was there.
func dropSlots(ctx context.Context, names []string) (bool, error) {
	dropped := false
	err := retry.OnError(wait.Backoff{Steps: 50, Duration: 10 * time.Millisecond, Factor: 1.5, Cap: time.Second},
		apierrors.IsConflict, func() error {
			dropped = false
			cm := &corev1.ConfigMap{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: DefaultLedgerName}, cm); err != nil {
				return client.IgnoreNotFound(err)
			}
			slots, err := rebootv1.ParseLedger(cm.Data)
			if err != nil {
				return err
			}
			for _, name := range names {
				if _, ok := slots[name]; ok {
					delete(slots, name)
					dropped = true
				}
			}
			if !dropped {
				return nil
			}
			data, err := json.Marshal(slots)
			if err != nil {
				return err
			}
			cm.Data[ledgerKey] = string(data)
			return k8s.Update(ctx, cm)
		})
	return dropped, err
}

// heartbeats stop the running agent heartbeats, by node.
var heartbeats sync.Map

// startHeartbeat renews the node's reboot-agent heartbeat Lease as a live
// agent does (with the agent's own heartbeat code, on a short lease), until
// stopHeartbeat or the end of the test.
func startHeartbeat(t *testing.T, node string) {
	t.Helper()
	hb, err := heartbeat.New(heartbeat.Config{
		Client: heartbeattest.Typed(kube.CoordinationV1()), Namespace: "default", Component: rebootagent.HeartbeatComponent, Node: node,
		Duration: 3 * time.Second, RenewInterval: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = hb.Start(ctx) }()
	stop := func() { cancel(); <-done }
	heartbeats.Store(node, stop)
	t.Cleanup(func() {
		stopHeartbeat(node)
		_ = kube.CoordinationV1().Leases("default").Delete(context.Background(),
			heartbeat.LeaseName(rebootagent.HeartbeatComponent, node), metav1.DeleteOptions{})
	})
}

// stopHeartbeat stops renewing the node's heartbeat, as a dead agent would.
func stopHeartbeat(node string) {
	if stop, ok := heartbeats.LoadAndDelete(node); ok {
		stop.(func())()
	}
}

// setNodeStatus writes the node's Ready condition and boot ID, moving the
// condition's transition time when its status changes.
func setNodeStatus(t *testing.T, name string, ready bool, bootID string) {
	t.Helper()
	if err := writeNodeStatus(context.Background(), name, ready, bootID); err != nil {
		t.Fatal(err)
	}
}

func writeNodeStatus(ctx context.Context, name string, ready bool, bootID string) error {
	n := &corev1.Node{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
		return err
	}
	orig := n.DeepCopy()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	cond := corev1.NodeCondition{Type: corev1.NodeReady, Status: status, Reason: "Test",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == status {
			cond.LastTransitionTime = c.LastTransitionTime
		}
	}
	n.Status.Conditions = []corev1.NodeCondition{cond}
	n.Status.NodeInfo.BootID = bootID
	return k8s.Status().Patch(ctx, n, client.MergeFrom(orig))
}

// annotate sets (or with "" removes) annotations on a node.
func annotate(t *testing.T, name string, kv ...string) {
	t.Helper()
	n := &corev1.Node{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	orig := n.DeepCopy()
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(n.Annotations, kv[i])
		} else {
			n.Annotations[kv[i]] = kv[i+1]
		}
	}
	if err := k8s.Patch(context.Background(), n, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}

func getNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	return n
}

// eventually polls cond until it holds or waitFor runs out.
func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	eventuallyWithin(t, waitFor, what, cond)
}

// eventuallyWithin is eventually with its own time limit, for what waits
// for a timeout of the spec (e.g. a drain's, at least 30s).
func eventuallyWithin(t *testing.T, limit time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, limit, true,
		func(context.Context) (bool, error) { return cond() })
	if err != nil {
		var nodes corev1.NodeList
		_ = k8s.List(context.Background(), &nodes)
		for _, n := range nodes.Items {
			t.Logf("node %s unschedulable=%v boot=%s conditions=%v annotations=%v", n.Name, n.Spec.Unschedulable,
				n.Status.NodeInfo.BootID, n.Status.Conditions, n.Annotations)
		}
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// agents simulates the reboot agents of a group's nodes: a node told to
// reboot (now set, boot-id matching) goes NotReady, gets a new boot ID
// after downtime and turns Ready again. It counts reboots per node, and
// samples how many of the group's nodes are unavailable at once.
type agents struct {
	group    string
	downtime time.Duration
	skip     map[string]bool // nodes whose agent does nothing

	mu      sync.Mutex
	reboots map[string]int
	maxDown int
}

func startAgents(t *testing.T, group string, downtime time.Duration, skip ...string) *agents {
	a := &agents{group: group, downtime: downtime, skip: map[string]bool{}, reboots: map[string]int{}}
	for _, s := range skip {
		a.skip[s] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		rebooting := map[string]bool{}
		var mu sync.Mutex
		for ctx.Err() == nil {
			var nodes corev1.NodeList
			if err := k8s.List(ctx, &nodes, client.MatchingLabels{testLabel: group}); err == nil {
				a.sample(nodes.Items)
				for _, n := range nodes.Items {
					mu.Lock()
					busy := rebooting[n.Name]
					mu.Unlock()
					if busy || a.skip[n.Name] || n.Annotations[rebootv1.AnnotationNow] == "" ||
						n.Annotations[rebootv1.AnnotationBootID] != n.Status.NodeInfo.BootID {
						continue
					}
					mu.Lock()
					rebooting[n.Name] = true
					mu.Unlock()
					wg.Add(1)
					go func(name, boot string) {
						defer wg.Done()
						a.reboot(ctx, name, boot)
						mu.Lock()
						delete(rebooting, name)
						mu.Unlock()
					}(n.Name, n.Status.NodeInfo.BootID)
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
		wg.Wait()
	}()
	return a
}

func (a *agents) reboot(ctx context.Context, name, boot string) {
	a.mu.Lock()
	a.reboots[name]++
	count := a.reboots[name]
	a.mu.Unlock()
	_ = writeNodeStatus(ctx, name, false, boot)
	select {
	case <-ctx.Done():
		return
	case <-time.After(a.downtime):
	}
	next := fmt.Sprintf("boot-%s-%d", name, count)
	_ = writeNodeStatus(ctx, name, false, next)
	_ = writeNodeStatus(ctx, name, true, next)
}

func (a *agents) sample(nodes []corev1.Node) {
	down := 0
	for i := range nodes {
		if rebootplan.NodeFrom(&nodes[i]).Unavailable() {
			down++
		}
	}
	a.mu.Lock()
	a.maxDown = max(a.maxDown, down)
	a.mu.Unlock()
}

func (a *agents) counts() (map[string]int, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]int{}
	for k, v := range a.reboots {
		out[k] = v
	}
	return out, a.maxDown
}

// groupEventReasons lists the reasons of the Events about a RebootGroup.
func groupEventReasons(t *testing.T, group string) []string {
	t.Helper()
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "RebootGroup" && e.Regarding.Name == group {
			out = append(out, e.Reason)
		}
	}
	return out
}

// groupHasEvent says whether the group has an Event with the reason.
func groupHasEvent(t *testing.T, group, reason string) func() (bool, error) {
	return func() (bool, error) { return slices.Contains(groupEventReasons(t, group), reason), nil }
}

// nodeEvents lists the Events about a node (this one, not an earlier node
// of the same name) with the given reason.
func nodeEvents(t *testing.T, node, reason string) []eventsv1.Event {
	t.Helper()
	uid := getNode(t, node).UID
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "Node" && e.Regarding.UID == uid && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

func hasEvent(t *testing.T, node, reason, contains string) func() (bool, error) {
	return func() (bool, error) {
		for _, e := range nodeEvents(t, node, reason) {
			if strings.Contains(e.Note, contains) {
				return true, nil
			}
		}
		return false, nil
	}
}

// protocolDone says the node's reboot is verified and nothing of the
// protocol is left on it but rebooted-at.
func protocolDone(n *corev1.Node) bool {
	for k := range n.Annotations {
		if strings.HasPrefix(k, "reboot.kubext.io/") && k != rebootv1.AnnotationRebootedAt {
			return false
		}
	}
	_, ok := n.Annotations[rebootv1.AnnotationRebootedAt]
	return ok
}

// ledgerSlots reads the approvals ledger as the controller stores it.
func ledgerSlots(ctx context.Context) (map[string]slot, error) {
	return ledgerSlotsFrom(ctx, k8s)
}

// ledgerSlotsFrom reads the ledger's slots through c (none when there is
// no ledger yet).
func ledgerSlotsFrom(ctx context.Context, c client.Client) (map[string]slot, error) {
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: DefaultLedgerName}, cm); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return rebootv1.ParseLedger(cm.Data)
}

// setAnnotations merges annotations into a node.
func setAnnotations(t *testing.T, c client.Client, name string, annotations map[string]string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		t.Fatal(err)
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Patch(context.Background(), n, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

func getNodeFrom(t *testing.T, c client.Client, name string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	return n
}

// holdingSlots counts the nodes of a pool that hold a slot.
func holdingSlots(t *testing.T, c client.Client, pool string) int {
	t.Helper()
	list := &corev1.NodeList{}
	if err := c.List(context.Background(), list, client.MatchingLabels{"pool": pool}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := range list.Items {
		if rebootplan.NodeFrom(&list.Items[i]).HoldsSlot() {
			n++
		}
	}
	return n
}

// askSince makes a node ask for a reboot, as having asked at since.
func askSince(t *testing.T, c client.Client, name string, since time.Time) {
	t.Helper()
	setAnnotations(t, c, name, map[string]string{
		rebootv1.AnnotationNeeded: "true", rebootv1.AnnotationNeededSince: since.UTC().Format(time.RFC3339)})
}

// stallBeforeGrant starts one reconcile of a in the background and
// returns once a has decided to approve node and stalls before its grant,
// as a paused leader would. resume lets it go on; done reports its end.
func stallBeforeGrant(t *testing.T, a *Reconciler, node string) (resume func(), done <-chan error) {
	t.Helper()
	stalled, resumed := make(chan struct{}), make(chan struct{})
	a.beforeGrant = func() {
		a.beforeGrant = nil // stall once
		close(stalled)
		<-resumed
	}
	aDone := make(chan error, 1)
	go func() {
		_, err := a.Reconcile(t.Context(), rollout)
		aDone <- err
	}()
	select {
	case <-stalled:
	case err := <-aDone:
		t.Fatalf("controller A finished without deciding to approve %s: %v", node, err)
	}
	return func() { close(resumed) }, aDone
}

// rollToTheEnd reconciles with r, as its requeues would, until every named
// node is rebooted and released; meanwhile it plays their agents: a node
// ordered to reboot comes back at once in a new boot.
func rollToTheEnd(t *testing.T, r *Reconciler, c client.Client, names []string) {
	t.Helper()
	ctx := t.Context()
	eventuallyWithin(t, waitFor, "every node rebooted and released", func() (bool, error) {
		if _, err := r.Reconcile(ctx, rollout); err != nil {
			return false, err
		}
		done := 0
		for _, name := range names {
			n := getNodeFrom(t, c, name)
			switch {
			case protocolDone(n):
				done++
			case n.Annotations[rebootv1.AnnotationNow] != "" && n.Status.NodeInfo.BootID == n.Annotations[rebootv1.AnnotationBootID]:
				n.Status.NodeInfo.BootID += "+"
				if err := c.Status().Update(ctx, n); err != nil {
					return false, err
				}
			}
		}
		return done == len(names), nil
	})
}
