package reboot

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

// The soak of a rebooted node counts from the moment the node watch
// delivered it Ready in its new boot, not from the reconcile that next
// looks (on a large cluster the single worker is often busy then, and the
// wait would be added to every soak); a node that goes NotReady again
// counts from its next return.
func TestSoakCountsFromTheWatchSighting(t *testing.T) {
	r := &Reconciler{}
	r.init(func() {})
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 300e6, time.UTC)
	node := func(ready bool, since time.Time, boot string) *corev1.Node {
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{
				rebootv1.AnnotationInProgress: stamp(t0.Add(-time.Minute)), rebootv1.AnnotationBootID: "old",
				rebootv1.AnnotationNow: stamp(t0.Add(-30 * time.Second))}},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: boot},
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status,
					LastTransitionTime: metav1.NewTime(since.Truncate(time.Second))}}},
		}
	}
	ms := time.Millisecond

	// Ready in the old boot (the reboot has not happened yet): not back.
	r.sightings.note(node(true, t0.Add(-time.Hour), "old"), t0)
	back := node(true, t0, "new")
	r.sightings.note(back, t0.Add(10*ms))
	if got := r.backSince(back, readySince(back), t0.Add(400*ms)); !got.Equal(t0.Add(10 * ms)) {
		t.Fatalf("back since %s, want the watch's sighting %s", got, t0.Add(10*ms))
	}
	// Later events of the same return do not move it.
	r.sightings.note(back, t0.Add(500*ms))
	if got := r.backSince(back, readySince(back), t0.Add(600*ms)); !got.Equal(t0.Add(10 * ms)) {
		t.Fatalf("back since %s after a later event, want %s", got, t0.Add(10*ms))
	}

	// NotReady again, and back three seconds later: the soak starts over.
	r.sightings.note(node(false, t0.Add(time.Second), "new"), t0.Add(time.Second))
	again := node(true, t0.Add(3*time.Second), "new")
	r.sightings.note(again, t0.Add(3200*ms))
	if got := r.backSince(again, readySince(again), t0.Add(3500*ms)); !got.Equal(t0.Add(3200 * ms)) {
		t.Fatalf("back since %s after going NotReady and coming back, want %s", got, t0.Add(3200*ms))
	}

	// A node not ordered to reboot is never noted.
	plain := node(true, t0, "new")
	delete(plain.Annotations, rebootv1.AnnotationNow)
	plain.Name = "plain"
	r.sightings.note(plain, t0)
	if _, ok := r.sightings.get(backKey(plain)); ok {
		t.Fatal("a node with no reboot ordered was noted as back")
	}
}
