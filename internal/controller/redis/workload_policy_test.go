package redis

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubext/kubext/test/testenv"
)

// workloadPolicy is config/policy/manager-workloads.yaml's policy.
const workloadPolicy = "manager-workload-writes.kubext.io"

// The manager's create and patch rights on StatefulSets, Deployments,
// Services, PodDisruptionBudgets and CronJobs in every namespace (RBAC
// cannot say which) are narrowed by config/policy/manager-workloads.yaml
// to objects its own resources control, of the kind each controller makes:
// a holder of its identity can neither change anybody else's workload
// (an image in kube-system) nor make one of its own choosing.
func TestDeployedManagerWritesOnlyItsOwnWorkloads(t *testing.T) {
	f := newFixture(t)
	g := f.G
	ctx := t.Context()
	manager := deployedManager(t, g, "config/rbac/controllers/core/role.yaml", "config/rbac/controllers/redis/role.yaml",
		"config/rbac/controllers/pulsarconsumer/role.yaml", "config/rbac/controllers/crontab/role.yaml")

	owner := func(apiVersion, kind string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "o", Controller: ptr.To(true),
			UID: types.UID("7c0e2f4a-1d2b-4e6f-8a9b-" + f.ID + "0000000")[:36]}}
	}
	redis, pulsar, crontab := owner("cache.kubext.io/v1alpha1", "Redis"), owner("pulsar.kubext.io/v1", "PulsarConsumer"), owner("stable.example.com/v1", "CronTab")
	labels := map[string]string{"app": "w"}
	template := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1"}}}}
	meta := func(name string, owners []metav1.OwnerReference) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: deployedNS, Name: name + "-" + f.ID, OwnerReferences: owners}
	}
	deployment := func(owners []metav1.OwnerReference) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: meta("d", owners),
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}}
	}
	statefulSet := func(owners []metav1.OwnerReference) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{ObjectMeta: meta("s", owners),
			Spec: appsv1.StatefulSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}}
	}
	service := func(owners []metav1.OwnerReference) *corev1.Service {
		return &corev1.Service{ObjectMeta: meta("svc", owners),
			Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 6379}}}}
	}
	pdb := func(owners []metav1.OwnerReference) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{ObjectMeta: meta("pdb", owners),
			Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, MaxUnavailable: ptr.To(intstr.FromInt32(1))}}
	}
	cronJob := func(owners []metav1.OwnerReference) *batchv1.CronJob {
		return &batchv1.CronJob{ObjectMeta: meta("cj", owners), Spec: batchv1.CronJobSpec{Schedule: "* * * * *",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: template.Spec.Containers}}}}}}
	}
	forged := []struct {
		name string
		obj  client.Object
	}{
		{"a Deployment of nobody's", deployment(nil)},
		{"a Deployment a Redis controls", deployment(redis)},
		{"a StatefulSet a PulsarConsumer controls", statefulSet(pulsar)},
		{"a Service of nobody's", service(nil)},
		{"a CronJob a Redis controls", cronJob(redis)},
	}
	// Without the policy, its RBAC lets it.
	for _, tc := range forged {
		g.Expect(manager.Create(ctx, tc.obj.DeepCopyObject().(client.Object), client.DryRunAll)).To(Succeed(), "without the policy: %s", tc.name)
	}
	// Somebody else's Deployment, which the manager must not touch.
	theirs := deployment(nil)
	theirs.Name = "theirs-" + f.ID
	g.Expect(k8s.Create(ctx, theirs)).To(Succeed())
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), theirs) })

	g.Expect(testEnv().Apply(ctx, "config/policy/manager-workloads.yaml")).To(Succeed())
	refused := "the kubext manager may write a "
	probe := func() error { return manager.Create(context.Background(), deployment(nil), client.DryRunAll) }
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: workloadPolicy}})
		_ = k8s.Delete(context.Background(), &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: workloadPolicy}})
		g.Eventually(probe, testenv.WaitFor, 100*time.Millisecond).Should(Succeed(), "the policy still applies after its deletion")
	})
	g.Eventually(probe, testenv.WaitFor, 100*time.Millisecond).Should(MatchError(ContainSubstring(refused)))
	for _, tc := range forged {
		g.Expect(manager.Create(ctx, tc.obj.DeepCopyObject().(client.Object))).To(MatchError(ContainSubstring(refused)), tc.name)
	}
	// Nobody else's workload changes, not even by adopting it.
	image := `{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"evil:1"}]}}}}`
	g.Expect(manager.Patch(ctx, theirs, client.RawPatch(types.StrategicMergePatchType, []byte(image)))).To(
		MatchError(ContainSubstring(refused)), "their image")
	adopt := `{"metadata":{"ownerReferences":[{"apiVersion":"pulsar.kubext.io/v1","kind":"PulsarConsumer","name":"o","uid":"` +
		string(pulsar[0].UID) + `","controller":true}]}}`
	g.Expect(manager.Patch(ctx, theirs, client.RawPatch(types.MergePatchType, []byte(adopt)))).To(
		MatchError(ContainSubstring("already")), "adopting theirs")
	// What the controllers make.
	for name, obj := range map[string]client.Object{
		"a Redis's StatefulSet": statefulSet(redis), "a Redis's Service": service(redis), "a Redis's PDB": pdb(redis),
		"a PulsarConsumer's Deployment": deployment(pulsar), "a CronTab's CronJob": cronJob(crontab),
	} {
		g.Expect(manager.Create(ctx, obj, client.DryRunAll)).To(Succeed(), name)
	}
}
