package rebootcmd

import (
	"bytes"
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/rebootplan"
)

// `reboot status` and `reboot plan` name the health gate that holds a
// group, as the controller finds it, and stop naming it once it passes.
func TestStatusAndPlanNameTheHeldGate(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := rebootv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	worker := map[string]string{"pool": "w"}
	g := group("workers", worker, intstr.FromInt32(1))
	g.Spec.HealthGates = &rebootv1.HealthGates{ReadyPods: &rebootv1.PodsGate{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "data", Name: "db-0", Labels: map[string]string{"app": "db"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(&g, pod, node("w1", worker, rebootv1.AnnotationNeeded, "true")).Build()

	cl, err := read(context.Background(), c, now)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := writeStatus(&out, cl, false); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"GateHeld: SelectedPodsNotReady: 1 of 1 selected pods are not Ready: data/db-0",
		"Waits (HealthGate): Health gate holds the group (SelectedPodsNotReady)"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("status lacks %q:\n%s", s, out.String())
		}
	}
	plan := newPlanReport(cl.snapshot)
	if gr := plan.Groups[1]; gr.Name != "workers" || len(gr.Blocked) != 1 || gr.Blocked[0].Reason != string(rebootplan.ReasonHealthGate) ||
		!strings.Contains(gr.Blocked[0].Message, "data/db-0") || gr.State != "GateHeld" || len(gr.Batches) != 0 {
		t.Errorf("plan: %+v", gr)
	}

	pod.Status.Conditions[0].Status = corev1.ConditionTrue
	if err := c.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if cl, err = read(context.Background(), c, now); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := writeStatus(&out, cl, false); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "GateHeld") || strings.Contains(out.String(), "HealthGate") {
		t.Errorf("status still names the gate once the pod is Ready:\n%s", out.String())
	}
}
