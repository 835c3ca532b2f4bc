package reboot

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/rebootplan"
)

// A group of six nodes, all asking at once, with maxUnavailable 2: every
// node reboots exactly once, never more than two are unavailable, each is
// uncordoned afterwards and the group reports them done.
func TestRollingRebootStaysWithinBudget(t *testing.T) {
	g := makeGroup(t, "rolling", intstr.FromInt32(2), nil)
	var names []string
	for i := range 6 {
		name := fmt.Sprintf("rolling-%d", i)
		names = append(names, name)
		makeNode(t, g.Name, name, nil)
	}
	a := startAgents(t, g.Name, 100*time.Millisecond)
	for _, name := range names {
		annotate(t, name, rebootv1.AnnotationNeeded, "true")
	}
	eventually(t, "every node rebooted and released", func() (bool, error) {
		for _, name := range names {
			if n := getNode(t, name); !protocolDone(n) || n.Spec.Unschedulable {
				return false, nil
			}
		}
		return true, nil
	})
	reboots, maxDown := a.counts()
	for _, name := range names {
		if reboots[name] != 1 {
			t.Errorf("node %s rebooted %d times, want exactly once", name, reboots[name])
		}
	}
	if maxDown > 2 {
		t.Errorf("up to %d nodes were unavailable at once, budget is 2", maxDown)
	}
	if maxDown < 2 {
		t.Errorf("at most %d node was unavailable at once: the budget of 2 was not used", maxDown)
	}
	eventually(t, "group status: 6 done, idle", func() (bool, error) {
		got := &rebootv1.RebootGroup{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(g), got); err != nil {
			return false, err
		}
		ready := meta.FindStatusCondition(got.Status.Conditions, rebootv1.ConditionReady)
		return got.Status.Done == 6 && got.Status.Nodes == 6 && got.Status.MaxUnavailable == 2 &&
			got.Status.ObservedGeneration == got.Generation &&
			ready != nil && ready.Reason == rebootv1.ReasonIdle, nil
	})
	eventually(t, "the approval Event", hasEvent(t, names[0], EventApproved, "Marking node "+names[0]+" for reboot"))
	eventually(t, "the verification Event", hasEvent(t, names[0], EventVerified, "verified"))
	eventually(t, "the group's RolloutComplete Event", groupHasEvent(t, g.Name, EventRolloutComplete))
	// A node's routine steps are told on the node, not again on the group:
	// the group's Events are its rollouts'.
	for _, reason := range groupEventReasons(t, g.Name) {
		if !strings.HasPrefix(reason, "Rollout") {
			t.Errorf("the group has a %s Event; want only its rollouts' Events", reason)
		}
	}
}

// Once the rollout is over, reconciles write nothing.
func TestSteadyStateWritesNothing(t *testing.T) {
	g := makeGroup(t, "steady", intstr.FromInt32(1), nil)
	makeNode(t, g.Name, "steady-0", nil)
	makeNode(t, g.Name, "steady-1", nil)
	startAgents(t, g.Name, 0)
	annotate(t, "steady-0", rebootv1.AnnotationNeeded, "true")
	eventually(t, "the reboot verified", func() (bool, error) { return protocolDone(getNode(t, "steady-0")), nil })
	time.Sleep(500 * time.Millisecond) // let the status of the finished rollout land
	before := writes.Load()
	// Wake the controller a few times with changes that decide nothing.
	for i := range 3 {
		annotate(t, "steady-1", "example.com/touch", fmt.Sprint(i))
		time.Sleep(300 * time.Millisecond)
	}
	if n := writes.Load() - before; n != 0 {
		t.Errorf("the controller made %d API writes with nothing to change, want 0", n)
	}
}

// A node cordoned by an admin is rebooted and left cordoned: kubext
// uncordons only what it cordoned.
func TestAdminCordonIsKept(t *testing.T) {
	g := makeGroup(t, "cordon", intstr.FromInt32(1), nil)
	makeNode(t, g.Name, "cordon-0", func(n *corev1.Node) { n.Spec.Unschedulable = true })
	startAgents(t, g.Name, 0)
	annotate(t, "cordon-0", rebootv1.AnnotationNeeded, "true")
	eventually(t, "the reboot verified", func() (bool, error) { return protocolDone(getNode(t, "cordon-0")), nil })
	if !getNode(t, "cordon-0").Spec.Unschedulable {
		t.Error("the admin's cordon was removed")
	}
}

// A node NotReady for another reason uses up the budget; when it recovers
// the waiting node goes.
func TestNotReadyNodeUsesBudget(t *testing.T) {
	g := makeGroup(t, "notready", intstr.FromInt32(1), nil)
	makeNode(t, g.Name, "notready-down", nil)
	makeNode(t, g.Name, "notready-0", nil)
	setNodeStatus(t, "notready-down", false, "boot-notready-down-0")
	startAgents(t, g.Name, 0)
	annotate(t, "notready-0", rebootv1.AnnotationNeeded, "true")
	eventually(t, "the wait announced", hasEvent(t, "notready-0", "MaxUnavailable", "Max unavailable reached (1 of 1 unavailable), skipping reboot"))
	if _, approved := getNode(t, "notready-0").Annotations[rebootv1.AnnotationInProgress]; approved {
		t.Fatal("approved although the group's only slot is taken by a NotReady node")
	}
	setNodeStatus(t, "notready-down", true, "boot-notready-down-0")
	eventually(t, "the reboot verified", func() (bool, error) { return protocolDone(getNode(t, "notready-0")), nil })
}

// A node deleted while it reboots (an autoscaler, a person, a kubelet that
// re-registers) keeps its slot: the machine may still be down, so its
// group stays at its budget until the group's reboot timeout lets the slot
// go. Before the approvals ledger, the deletion freed the slot at once.
func TestDeletedNodeKeepsSlotUntilRebootTimeout(t *testing.T) {
	g := makeGroup(t, "deleted", intstr.FromInt32(1), func(s *rebootv1.RebootGroupSpec) { s.RebootTimeoutSeconds = 30 })
	makeNode(t, g.Name, "deleted-0", nil)
	makeNode(t, g.Name, "deleted-1", nil)
	startAgents(t, g.Name, 0, "deleted-0", "deleted-1") // nobody reboots: the first holds its slot
	annotate(t, "deleted-0", rebootv1.AnnotationNeeded, "true", rebootv1.AnnotationNeededSince, stamp(time.Now().Add(-time.Hour)))
	annotate(t, "deleted-1", rebootv1.AnnotationNeeded, "true")
	eventually(t, "deleted-0 ordered to reboot", func() (bool, error) {
		return getNode(t, "deleted-0").Annotations[rebootv1.AnnotationNow] != "", nil
	})
	if err := k8s.Delete(context.Background(), getNode(t, "deleted-0")); err != nil {
		t.Fatal(err)
	}
	// The controller sees the deletion at once (a node watch); give it
	// a few reconciles to get it wrong.
	notApprovedFor2s(t, "deleted-1", "while the deleted deleted-0 may still be rebooting in the only slot")
	clock.Advance(31 * time.Second)
	eventually(t, "deleted-1 approved once deleted-0's reboot timeout passed", func() (bool, error) {
		_, ok := getNode(t, "deleted-1").Annotations[rebootv1.AnnotationInProgress]
		return ok, nil
	})
	eventually(t, "deleted-0's slot gone from the ledger", func() (bool, error) {
		slots, err := ledgerSlots(context.Background())
		_, held := slots["deleted-0"]
		return !held, err
	})
}

// A node deleted while down whose group is deleted too keeps its slot for
// the reboot timeout its group had, recorded in the slot at the grant: a
// worker's slot holds every control-plane node of the cluster (they reboot
// only while no worker does), and before the slot kept the timeout a
// deleted group's 30 s became the default 15 minutes.
func TestDeletedGroupsSlotKeepsItsTimeout(t *testing.T) {
	ctx := context.Background()
	gone := makeGroup(t, "gonegroup", intstr.FromInt32(1), func(s *rebootv1.RebootGroupSpec) { s.RebootTimeoutSeconds = 30 })
	stays := makeGroup(t, "staysgroup", intstr.FromInt32(1), nil)
	makeNode(t, gone.Name, "gonegroup-w", nil)
	makeNode(t, stays.Name, "staysgroup-cp", func(n *corev1.Node) {
		n.Labels[rebootv1.LabelControlPlane] = ""
	})
	startAgents(t, gone.Name, 0, "gonegroup-w") // never comes back: it holds its slot
	startAgents(t, stays.Name, 0)
	annotate(t, "gonegroup-w", rebootv1.AnnotationNeeded, "true")
	eventually(t, "gonegroup-w ordered to reboot", func() (bool, error) {
		return getNode(t, "gonegroup-w").Annotations[rebootv1.AnnotationNow] != "", nil
	})
	slots, err := ledgerSlots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := slots["gonegroup-w"].TimeoutSeconds; got != 30 {
		t.Fatalf("the slot records a reboot timeout of %d s, want the group's 30", got)
	}
	if err := k8s.Delete(ctx, getNode(t, "gonegroup-w")); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	annotate(t, "staysgroup-cp", rebootv1.AnnotationNeeded, "true")
	notApprovedFor2s(t, "staysgroup-cp", "while a deleted worker may still be rebooting")
	clock.Advance(31 * time.Second)
	eventually(t, "the control-plane node approved once the deleted group's 30 s passed", func() (bool, error) {
		_, ok := getNode(t, "staysgroup-cp").Annotations[rebootv1.AnnotationInProgress]
		return ok, nil
	})
}

// notApprovedFor2s fails the test if node is approved within two seconds
// (a few reconciles' chance to get it wrong).
func notApprovedFor2s(t *testing.T, node, why string) {
	t.Helper()
	for range 20 {
		if _, approved := getNode(t, node).Annotations[rebootv1.AnnotationInProgress]; approved {
			t.Fatalf("%s approved %s", node, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A PodDisruptionBudget that allows no disruption blocks the drain: the
// node is given back (uncordoned) after the drain timeout, the PDB is named
// in an Event and the group's status, and the next node proceeds.
func TestDrainBlockedByPDB(t *testing.T) {
	ctx := context.Background()
	// The shortest drain timeout the API allows.
	g := makeGroup(t, "pdb", intstr.FromInt32(1), func(s *rebootv1.RebootGroupSpec) { s.Drain.TimeoutSeconds = 30 })
	makeNode(t, g.Name, "pdb-0", nil)
	makeNode(t, g.Name, "pdb-1", nil)
	startAgents(t, g.Name, 0)
	runPod(t, "pdb-0", "guarded", map[string]string{"app": "guarded"})
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "zero", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}},
		},
	}
	if err := k8s.Create(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), pdb) })

	annotate(t, "pdb-0", rebootv1.AnnotationNeeded, "true", rebootv1.AnnotationNeededSince, stamp(time.Now().Add(-time.Hour)))
	eventually(t, "pdb-0 approved", func() (bool, error) {
		_, ok := getNode(t, "pdb-0").Annotations[rebootv1.AnnotationInProgress]
		return ok, nil
	})
	eventuallyWithin(t, 30*time.Second+waitFor, "the drain timeout named in an Event",
		hasEvent(t, "pdb-0", EventDrainTimedOut, "PodDisruptionBudget default/zero allows no disruption of pod default/guarded"))
	eventually(t, "the drain timeout told on the group too", groupHasEvent(t, g.Name, EventDrainTimedOut))
	n := getNode(t, "pdb-0")
	if n.Spec.Unschedulable {
		t.Error("pdb-0 still cordoned after its drain timed out")
	}
	if n.Annotations[rebootv1.AnnotationRetryAfter] == "" || n.Annotations[rebootv1.AnnotationNeeded] != "true" {
		t.Errorf("pdb-0 not queued again with a retry time: %v", n.Annotations)
	}
	if _, ok := n.Annotations[rebootv1.AnnotationInProgress]; ok {
		t.Error("pdb-0 still holds its slot")
	}
	eventually(t, "DrainBlocked on the group", func() (bool, error) {
		got := &rebootv1.RebootGroup{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(g), got); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, rebootv1.ConditionDrainBlocked)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "PodDisruptionBudget default/zero"), nil
	})
	// DrainBlocked tells of the group's last drain, so the next node asks
	// only now: had it asked with pdb-0, its drain (nothing to evict) could
	// complete, and turn the condition False, before this test read it.
	annotate(t, "pdb-1", rebootv1.AnnotationNeeded, "true")
	eventually(t, "the next node rebooted", func() (bool, error) { return protocolDone(getNode(t, "pdb-1")), nil })
}

// The drain evicts the node's pods (through the Eviction API) before the
// reboot is ordered.
func TestDrainEvictsPods(t *testing.T) {
	g := makeGroup(t, "evict", intstr.FromInt32(1), func(s *rebootv1.RebootGroupSpec) {
		s.Drain.GracePeriodSeconds = ptr.To[int64](0) // no kubelet here to finish a graceful deletion
	})
	makeNode(t, g.Name, "evict-0", nil)
	startAgents(t, g.Name, 0)
	pod := runPod(t, "evict-0", "evictme", map[string]string{"app": "evictme"})
	annotate(t, "evict-0", rebootv1.AnnotationNeeded, "true")
	eventually(t, "the reboot ordered", func() (bool, error) {
		return getNode(t, "evict-0").Annotations[rebootv1.AnnotationNow] != "" || protocolDone(getNode(t, "evict-0")), nil
	})
	err := k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), &corev1.Pod{})
	if err == nil {
		t.Error("the pod is still there after the drain")
	}
	eventually(t, "the reboot verified", func() (bool, error) { return protocolDone(getNode(t, "evict-0")), nil })
}

// A reboot that does not come back within rebootTimeoutSeconds is marked
// failed and Stuck, keeps its slot, and halts the group (maxFailures 1).
func TestStuckRebootKeepsSlot(t *testing.T) {
	ctx := context.Background()
	g := makeGroup(t, "stuck", intstr.FromInt32(1), func(s *rebootv1.RebootGroupSpec) { s.RebootTimeoutSeconds = 30 })
	makeNode(t, g.Name, "stuck-0", nil)
	makeNode(t, g.Name, "stuck-1", nil)
	startAgents(t, g.Name, 0, "stuck-0") // stuck-0's agent never reboots it
	annotate(t, "stuck-0", rebootv1.AnnotationNeeded, "true", rebootv1.AnnotationNeededSince, stamp(time.Now().Add(-time.Hour)))
	annotate(t, "stuck-1", rebootv1.AnnotationNeeded, "true")
	eventually(t, "stuck-0 ordered to reboot", func() (bool, error) {
		return getNode(t, "stuck-0").Annotations[rebootv1.AnnotationNow] != "", nil
	})
	clock.Advance(31 * time.Second)
	annotate(t, "stuck-1", "example.com/wake", "1") // wake the controller; the timer would, 30 s later
	eventually(t, "stuck-0 marked failed", func() (bool, error) {
		return getNode(t, "stuck-0").Annotations[rebootv1.AnnotationFailed] != "", nil
	})
	eventually(t, "Stuck and Halted on the group", func() (bool, error) {
		got := &rebootv1.RebootGroup{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(g), got); err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(got.Status.Conditions, rebootv1.ConditionStuck) &&
			meta.IsStatusConditionTrue(got.Status.Conditions, rebootv1.ConditionHalted), nil
	})
	n := getNode(t, "stuck-0")
	if _, ok := n.Annotations[rebootv1.AnnotationInProgress]; !ok {
		t.Error("the stuck node gave up its slot")
	}
	if _, ok := getNode(t, "stuck-1").Annotations[rebootv1.AnnotationInProgress]; ok {
		t.Error("stuck-1 approved while stuck-0 still holds the only slot")
	}
	// It comes back late: verified, and the failure is cleared.
	setNodeStatus(t, "stuck-0", false, "boot-stuck-0-late")
	setNodeStatus(t, "stuck-0", true, "boot-stuck-0-late")
	eventually(t, "the late reboot verified", func() (bool, error) { return protocolDone(getNode(t, "stuck-0")), nil })
}

// runPod creates a running pod on a node, owned by a (made-up) ReplicaSet
// as drain requires of pods it may evict.
func runPod(t *testing.T, node, name string, labels map[string]string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name + "-rs",
				UID: "00000000-0000-0000-0000-000000000001", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "example.com/c:1"}}},
	}
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), pod, client.GracePeriodSeconds(0))
	})
	orig := pod.DeepCopy()
	pod.Status.Phase = corev1.PodRunning
	if err := k8s.Status().Patch(ctx, pod, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	return pod
}

// Nothing starts outside a maintenance window, the group says when the
// next one opens, and a paused group approves nothing; lifting either lets
// the node go.
func TestWindowsAndPauseHoldReboots(t *testing.T) {
	ctx := context.Background()
	// A window on another day of the week than today, wherever the test
	// runs (UTC).
	other := rebootv1.Weekday(time.Now().UTC().Add(48 * time.Hour).Weekday().String())
	g := makeGroup(t, "window", intstr.FromInt32(1), func(s *rebootv1.RebootGroupSpec) {
		s.Windows = []rebootv1.MaintenanceWindow{{Days: []rebootv1.Weekday{other}, Start: "01:00", End: "02:00", TimeZone: "UTC"}}
	})
	makeNode(t, g.Name, "window-0", nil)
	startAgents(t, g.Name, 0)
	annotate(t, "window-0", rebootv1.AnnotationNeeded, "true")
	eventually(t, "the group reporting the next window", func() (bool, error) {
		got := &rebootv1.RebootGroup{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(g), got); err != nil {
			return false, err
		}
		ready := meta.FindStatusCondition(got.Status.Conditions, rebootv1.ConditionReady)
		return got.Status.NextWindow != nil && got.Status.NextWindow.UTC().Weekday().String() == string(other) &&
			got.Status.Needing == 1 && ready != nil && ready.Reason == rebootv1.ReasonOutsideWindow, nil
	})
	eventually(t, "the wait announced", hasEvent(t, "window-0", "OutsideWindow", "Outside maintenance window"))
	if _, ok := getNode(t, "window-0").Annotations[rebootv1.AnnotationInProgress]; ok {
		t.Fatal("approved outside its maintenance window")
	}

	// Pause, then drop the window: still nothing while paused.
	patchGroup(t, g, `{"spec":{"paused":true,"windows":null}}`)
	eventually(t, "Paused reported", func() (bool, error) {
		got := &rebootv1.RebootGroup{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(g), got); err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(got.Status.Conditions, rebootv1.ConditionPaused), nil
	})
	time.Sleep(300 * time.Millisecond)
	if _, ok := getNode(t, "window-0").Annotations[rebootv1.AnnotationInProgress]; ok {
		t.Fatal("approved while the group is paused")
	}
	patchGroup(t, g, `{"spec":{"paused":false}}`)
	eventually(t, "the reboot verified once resumed", func() (bool, error) { return protocolDone(getNode(t, "window-0")), nil })
}

func patchGroup(t *testing.T, g *rebootv1.RebootGroup, mergePatch string) {
	t.Helper()
	if err := k8s.Patch(context.Background(), g.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(mergePatch))); err != nil {
		t.Fatal(err)
	}
}

// A request withdrawn while it waits (`kubectl kubext reboot cancel` writes
// needed=false and nothing else: the order policy keeps needed-since to
// the controller) loses its place in the queue: the controller forgets
// needed-since, and a new request queues from when it is made.
func TestWithdrawnWaitingRequestLeavesTheQueue(t *testing.T) {
	g := makeGroup(t, "requeue", intstr.FromInt32(1), func(s *rebootv1.RebootGroupSpec) { s.Paused = true })
	makeNode(t, g.Name, "requeue-0", nil)
	annotate(t, "requeue-0", rebootv1.AnnotationNeeded, "true")
	var first string
	eventually(t, "the request noted", func() (bool, error) {
		first = getNode(t, "requeue-0").Annotations[rebootv1.AnnotationNeededSince]
		return first != "", nil
	})
	annotate(t, "requeue-0", rebootv1.AnnotationNeeded, "false")
	eventually(t, "its place forgotten", func() (bool, error) {
		_, noted := getNode(t, "requeue-0").Annotations[rebootv1.AnnotationNeededSince]
		return !noted, nil
	})
	time.Sleep(10 * time.Millisecond) // the stamps have milliseconds
	annotate(t, "requeue-0", rebootv1.AnnotationNeeded, "true")
	eventually(t, "the new request noted anew", func() (bool, error) {
		again := getNode(t, "requeue-0").Annotations[rebootv1.AnnotationNeededSince]
		return again != "" && again > first, nil
	})
	if n := getNode(t, "requeue-0"); rebootplan.NodeFrom(n).HoldsSlot() {
		t.Fatal("a node of a paused group was approved")
	}
}
