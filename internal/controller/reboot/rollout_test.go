package reboot

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/rebootplan"
)

// setClock is a clock a test sets.
type setClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *setClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *setClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// notes records the notes of the Events a controller emits.
type notes struct {
	mu  sync.Mutex
	all []string
}

func (n *notes) Eventf(_, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.all = append(n.all, eventtype+" "+reason+" "+fmt.Sprintf(note, args...))
}

// has says whether a recorded Event's note contains s.
func (n *notes) has(s string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.ContainsFunc(n.all, func(note string) bool { return strings.Contains(note, s) })
}

// TestRolloutResumesAtTheNextWindow (kured #620): five nodes ask for a
// reboot in a group with a ten-minute window. The window closes after two
// reboots and during the third (approved inside it, so it finishes). The
// group's status then shows 3 of 5 done, waiting for the window, and
// when it reopens. The controller is replaced by a new one (a manager
// restart or a new leader: nothing of the old one's memory) which writes
// nothing while the window is closed; when the window reopens it reboots
// the remaining two, and none of the first three again. The controllers
// run against an API server of their own (this package's shared one has
// a controller running already) on a clock the test sets.
func TestRolloutResumesAtTheNextWindow(t *testing.T) {
	env, c := ownAPIServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	opens := time.Date(2026, 11, 23, 2, 0, 0, 0, time.UTC)
	clk := &setClock{t: opens}
	one := intstr.FromInt32(1)
	group := &rebootv1.RebootGroup{ObjectMeta: metav1.ObjectMeta{Name: "resume"}, Spec: rebootv1.RebootGroupSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "resume"}}, MaxUnavailable: &one,
		SoakSeconds: ptr.To[int32](0),
		Windows:     []rebootv1.MaintenanceWindow{{Start: "02:00", End: "02:10", TimeZone: "UTC"}}}}
	if err := c.Create(ctx, group); err != nil {
		t.Fatal(err)
	}
	const nodes = 5
	for i := range nodes {
		name := fmt.Sprintf("resume-%d", i)
		readyNode(t, c, name, "resume")
		n := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			t.Fatal(err)
		}
		orig := n.DeepCopy()
		n.Annotations = map[string]string{rebootv1.AnnotationNeeded: "true",
			// Asked in order: resume-0 first.
			rebootv1.AnnotationNeededSince: opens.Add(-time.Duration(nodes-i) * time.Minute).Format(time.RFC3339)}
		if err := c.Patch(ctx, n, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
	}

	reboots := map[string]int{}
	// agents reboot the nodes told to: a new boot ID, Ready.
	agents := func() {
		list := &corev1.NodeList{}
		if c.List(ctx, list, client.MatchingLabels{"pool": "resume"}) != nil {
			return
		}
		for i := range list.Items {
			n := &list.Items[i]
			if n.Annotations[rebootv1.AnnotationNow] == "" || n.Annotations[rebootv1.AnnotationBootID] != n.Status.NodeInfo.BootID {
				continue
			}
			reboots[n.Name]++
			n.Status.NodeInfo.BootID = fmt.Sprintf("boot-%s-%d", n.Name, reboots[n.Name])
			n.Status.Conditions[0].LastTransitionTime = metav1.Now()
			if err := c.Status().Update(ctx, n); err != nil {
				reboots[n.Name]--
			}
		}
	}
	// progress counts the nodes done (verified, asking no more) and those
	// holding a slot.
	progress := func() (done, holding int) {
		list := &corev1.NodeList{}
		if err := c.List(ctx, list, client.MatchingLabels{"pool": "resume"}); err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			pn := rebootplan.NodeFrom(&list.Items[i])
			if pn.HoldsSlot() {
				holding++
			}
			if pn.Annotations[rebootv1.AnnotationRebootedAt] != "" && !pn.Needs() && !pn.HoldsSlot() {
				done++
			}
		}
		return done, holding
	}
	// run reconciles with r, letting the agents act after each pass,
	// until cond holds after a pass.
	run := func(what string, r *Reconciler, cond func() bool) {
		t.Helper()
		for ctx.Err() == nil {
			if _, err := r.Reconcile(ctx, rollout); err != nil {
				t.Logf("reconcile: %v", err)
			}
			if cond() {
				return
			}
			agents()
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("waiting for %s: %v", what, ctx.Err())
	}
	rolloutOf := func() (*rebootv1.RolloutStatus, string) {
		got := &rebootv1.RebootGroup{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(group), got); err != nil {
			t.Fatal(err)
		}
		return got.Status.Rollout, got.ResourceVersion
	}

	recorded := &notes{}
	a := rival(t, env, c)
	a.Now, a.Recorder = clk.Now, recorded
	run("two reboots done and the third approved", a, func() bool {
		done, holding := progress()
		return done == 2 && holding == 1
	})
	closes := opens.Add(10*time.Minute + 30*time.Second)
	clk.Set(closes)
	run("the third reboot done after the window closed", a, func() bool {
		done, holding := progress()
		return done == 3 && holding == 0
	})
	if _, err := a.Reconcile(ctx, rollout); err != nil {
		t.Fatal(err)
	}
	ro, _ := rolloutOf()
	nextWindow := opens.Add(24 * time.Hour)
	if ro == nil || ro.Number != 1 || ro.State != rebootv1.RolloutWaitingForWindow || ro.Done != 3 || ro.Total != nodes ||
		ro.Remaining != 2 || ro.Failed != 0 || len(ro.RemainingNodes) != 2 || ro.RemainingNodes[0] != "resume-3" ||
		ro.ResumeAt == nil || !ro.ResumeAt.Time.Equal(nextWindow) || ro.WaitingSince == nil || !ro.WaitingSince.Time.Equal(closes) {
		t.Fatalf("rollout after the window closed: %+v", ro)
	}
	started := ro.StartTime
	if want := "Normal RolloutWaiting Rollout 1 waits for the next maintenance window at 2026-11-24T02:00:00Z: 3 of 5 reboots done, 2 remaining, 0 failed"; !recorded.has(want) {
		t.Fatalf("no Event %q among %q", want, recorded.all)
	}

	// A new controller: nothing approved, nothing written while the
	// window is closed.
	b := rival(t, env, c)
	b.Now, b.Recorder = clk.Now, recorded
	_, version := rolloutOf()
	for range 20 {
		if _, err := b.Reconcile(ctx, rollout); err != nil {
			t.Fatal(err)
		}
		agents()
	}
	if done, holding := progress(); done != 3 || holding != 0 {
		t.Fatalf("outside the window: %d done, %d holding a slot", done, holding)
	}
	if _, v := rolloutOf(); v != version {
		t.Fatal("the new controller rewrote the group's status with nothing to change")
	}

	clk.Set(nextWindow)
	run("the remaining two rebooted at the next window", b, func() bool {
		done, holding := progress()
		return done == nodes && holding == 0
	})
	if _, err := b.Reconcile(ctx, rollout); err != nil {
		t.Fatal(err)
	}
	ro, _ = rolloutOf()
	if ro == nil || ro.Number != 1 || !ro.StartTime.Equal(&started) || ro.State != rebootv1.RolloutComplete ||
		ro.Done != nodes || ro.Total != nodes || ro.Remaining != 0 || ro.CompletionTime == nil || ro.WaitingSince != nil {
		t.Fatalf("rollout after the next window: %+v", ro)
	}
	for _, want := range []string{"Normal RolloutRunning Rollout 1 resumed: 3 of 5 reboots done, 2 remaining",
		"Normal RolloutComplete Rollout 1 complete: 5 of 5 reboots done, 0 remaining, 0 failed"} {
		if !recorded.has(want) {
			t.Fatalf("no Event %q among %q", want, recorded.all)
		}
	}
	for i := range nodes {
		if name := fmt.Sprintf("resume-%d", i); reboots[name] != 1 {
			t.Fatalf("reboots per node %v, want one each", reboots)
		}
	}

	// A node that asks again starts the next rollout and is rebooted again.
	n := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: "resume-0"}, n); err != nil {
		t.Fatal(err)
	}
	orig := n.DeepCopy()
	n.Annotations[rebootv1.AnnotationNeeded] = "true"
	if err := c.Patch(ctx, n, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	run("the second rollout", b, func() bool {
		ro, _ := rolloutOf()
		return ro != nil && ro.Number == 2 && ro.State == rebootv1.RolloutComplete && ro.Done == 1 && ro.Total == 1
	})
	if reboots["resume-0"] != 2 || reboots["resume-1"] != 1 {
		t.Fatalf("reboots per node %v after resume-0 asked again", reboots)
	}
}
