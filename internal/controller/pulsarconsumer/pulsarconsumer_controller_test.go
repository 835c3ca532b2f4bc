package pulsarconsumer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	pulsarv1 "github.com/kubext/kubext/api/pulsar/v1"
	"github.com/kubext/kubext/test/testenv"
)

const ns = "default"

// fixture adds to testenv.Fixture what the tests of PulsarConsumers look
// at.
type fixture struct{ *testenv.Fixture }

func newFixture(t *testing.T) *fixture { return &fixture{testenv.NewFixture(t, k8s)} }

// consumer creates a PulsarConsumer and returns its key.
func (f *fixture) consumer(name string, spec pulsarv1.PulsarConsumerSpec) client.ObjectKey {
	f.T.Helper()
	return f.Create(&pulsarv1.PulsarConsumer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-" + f.ID}, Spec: spec})
}

// deployment waits until the PulsarConsumer's Deployment satisfies match
// and returns it.
func (f *fixture) deployment(key client.ObjectKey, match func(g Gomega, d *appsv1.Deployment)) *appsv1.Deployment {
	f.T.Helper()
	return testenv.Eventually(f.Fixture, key, &appsv1.Deployment{}, func(g Gomega, d *appsv1.Deployment) {
		testenv.Applied(g, d)
		match(g, d)
	})
}

// condition waits until the PulsarConsumer's condition has the status and
// reason, for its current generation, and returns the PulsarConsumer.
func (f *fixture) condition(key client.ObjectKey, typ string, status metav1.ConditionStatus, reason string) *pulsarv1.PulsarConsumer {
	f.T.Helper()
	return testenv.Eventually(f.Fixture, key, &pulsarv1.PulsarConsumer{}, func(g Gomega, pc *pulsarv1.PulsarConsumer) {
		testenv.HasCondition(g, pc.Status.Conditions, typ, status, reason, pc.Generation)
	})
}

// event waits for an Event with the reason about the PulsarConsumer.
func (f *fixture) event(key client.ObjectKey, reason string) *eventsv1.Event {
	f.T.Helper()
	return f.Event("PulsarConsumer", key, reason)
}

// reportStatus writes the Deployment's status as the Deployment controller
// would; envtest runs none.
func (f *fixture) reportStatus(d *appsv1.Deployment, status appsv1.DeploymentStatus) {
	f.T.Helper()
	orig := d.DeepCopy()
	d.Status = status
	f.G.Expect(k8s.Status().Patch(f.Ctx, d, client.MergeFrom(orig))).To(Succeed())
}

func spec(topic string, replicas int32) pulsarv1.PulsarConsumerSpec {
	return pulsarv1.PulsarConsumerSpec{
		ServerAddress:    "pulsar://pulsar-broker.pulsar:6650",
		Topic:            topic,
		SubscriptionName: "audit",
		Replicas:         &replicas,
	}
}

// env is the container's environment as a map, and the fields of those
// set from the pod.
func env(d *appsv1.Deployment) (values, fields map[string]string) {
	values, fields = map[string]string{}, map[string]string{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		values[e.Name] = e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			fields[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	return values, fields
}

func TestCreatesDeployment(t *testing.T) {
	f := newFixture(t)
	key := f.consumer("orders", spec("persistent://shop/prod/orders", 2))

	d := f.deployment(key, func(Gomega, *appsv1.Deployment) {})
	f.G.Expect(d.Spec.Replicas).To(HaveValue(Equal(int32(2))))
	f.G.Expect(d.Spec.Selector.MatchLabels).To(Equal(map[string]string{pulsarv1.LabelConsumer: key.Name}))
	f.G.Expect(d.Spec.Strategy.Type).To(Equal(appsv1.RecreateDeploymentStrategyType))
	f.G.Expect(d.Labels).To(HaveKeyWithValue(pulsarv1.LabelConsumer, key.Name))
	f.G.Expect(d.Spec.Template.Labels).To(HaveKeyWithValue(pulsarv1.LabelConsumer, key.Name))
	pod := d.Spec.Template.Spec
	f.G.Expect(pod.AutomountServiceAccountToken).To(HaveValue(BeFalse()))
	f.G.Expect(pod.Containers).To(HaveLen(1))
	c := pod.Containers[0]
	f.G.Expect(c.Image).To(Equal(testImage), "the manager's image, spec.image being empty")
	f.G.Expect(c.Command).To(Equal([]string{"/pulsar-consumer"}))
	f.G.Expect(c.ReadinessProbe.HTTPGet.Path).To(Equal("/readyz"))
	f.G.Expect(c.SecurityContext.RunAsNonRoot).To(HaveValue(BeTrue()))
	values, fields := env(d)
	f.G.Expect(values).To(Equal(map[string]string{
		pulsarv1.EnvServerAddress:    "pulsar://pulsar-broker.pulsar:6650",
		pulsarv1.EnvTopic:            "persistent://shop/prod/orders",
		pulsarv1.EnvSubscription:     "audit",
		pulsarv1.EnvSubscriptionType: "Shared", // defaulted by the API server
		pulsarv1.EnvConsumerName:     "",
		pulsarv1.EnvHealthAddress:    ":8080",
	}))
	f.G.Expect(fields).To(Equal(map[string]string{pulsarv1.EnvConsumerName: "metadata.name"}))

	// envtest runs no garbage collector: the owner reference is what makes
	// the Deployment go with its PulsarConsumer in a cluster.
	pc := f.Get(key, &pulsarv1.PulsarConsumer{}).(*pulsarv1.PulsarConsumer)
	owner := metav1.GetControllerOf(d)
	f.G.Expect(owner).NotTo(BeNil())
	f.G.Expect(owner.UID).To(Equal(pc.UID))
	f.G.Expect(owner.Kind).To(Equal("PulsarConsumer"))
	f.G.Expect(owner.APIVersion).To(Equal("pulsar.kubext.io/v1"))
	f.G.Expect(owner.BlockOwnerDeletion).To(HaveValue(BeTrue()))

	// No Deployment controller has looked at it yet.
	f.condition(key, pulsarv1.ConditionAvailable, metav1.ConditionUnknown, pulsarv1.ReasonDeploymentPending)
	f.condition(key, pulsarv1.ConditionProgressing, metav1.ConditionTrue, pulsarv1.ReasonRolloutPending)
	pc = f.condition(key, pulsarv1.ConditionDegraded, metav1.ConditionFalse, pulsarv1.ReasonAsExpected)
	f.G.Expect(pc.Status.ObservedGeneration).To(Equal(pc.Generation))
	f.G.Expect(pc.Status.Selector).To(Equal(pulsarv1.LabelConsumer + "=" + key.Name))
	f.G.Expect(pc.Status.Replicas).To(BeZero(), "no pod exists yet: status is observed, not copied from spec")
	e := f.event(key, "Created")
	f.G.Expect(e.Related).NotTo(BeNil())
	f.G.Expect(e.Related.Kind).To(Equal("Deployment"))
	f.G.Expect(e.Note).To(ContainSubstring("persistent://shop/prod/orders"))
}

func TestSpecChangeAndScale(t *testing.T) {
	f := newFixture(t)
	key := f.consumer("change", spec("orders", 1))
	f.condition(key, pulsarv1.ConditionDegraded, metav1.ConditionFalse, pulsarv1.ReasonAsExpected)

	// What `kubectl patch pulsarconsumer change --type=merge -p ...` sends.
	pc := &pulsarv1.PulsarConsumer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}}
	f.G.Expect(k8s.Patch(f.Ctx, pc, testenv.MergePatch(`{"spec":{"serverAddress":"pulsar+ssl://b-1.example.com:6651,b-2.example.com:6651",`+
		`"topic":"shop/prod/payments","subscriptionName":"billing","subscriptionType":"KeyShared","image":"mirror.example.com/kubext:v0.1.0",`+
		`"resources":{"requests":{"cpu":"100m","memory":"64Mi"},"limits":{"memory":"128Mi"}}}}`))).To(Succeed())
	d := f.deployment(key, func(g Gomega, d *appsv1.Deployment) {
		values, _ := env(d)
		g.Expect(values).To(HaveKeyWithValue(pulsarv1.EnvServerAddress, "pulsar+ssl://b-1.example.com:6651,b-2.example.com:6651"))
		g.Expect(values).To(HaveKeyWithValue(pulsarv1.EnvTopic, "shop/prod/payments"))
		g.Expect(values).To(HaveKeyWithValue(pulsarv1.EnvSubscription, "billing"))
		g.Expect(values).To(HaveKeyWithValue(pulsarv1.EnvSubscriptionType, "KeyShared"))
	})
	c := d.Spec.Template.Spec.Containers[0]
	f.G.Expect(c.Image).To(Equal("mirror.example.com/kubext:v0.1.0"))
	f.G.Expect(c.Resources.Requests.Cpu().Equal(resource.MustParse("100m"))).To(BeTrue())
	f.G.Expect(c.Resources.Limits.Memory().Equal(resource.MustParse("128Mi"))).To(BeTrue())
	f.event(key, "Updated")

	// `kubectl scale pulsarconsumer change --replicas=3` goes through the
	// scale subresource.
	scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 3}}
	f.G.Expect(k8s.SubResource("scale").Update(f.Ctx, pc, client.WithSubResourceBody(scale))).To(Succeed())
	d = f.deployment(key, func(g Gomega, d *appsv1.Deployment) { g.Expect(d.Spec.Replicas).To(HaveValue(Equal(int32(3)))) })

	// The scale subresource reports the pods the Deployment reports, and
	// their selector, for autoscalers.
	f.reportStatus(d, appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 2, AvailableReplicas: 2})
	f.G.Eventually(func(g Gomega) {
		g.Expect(k8s.SubResource("scale").Get(f.Ctx, pc, scale)).To(Succeed())
		g.Expect(scale.Status.Replicas).To(Equal(int32(3)))
		g.Expect(scale.Status.Selector).To(Equal(pulsarv1.LabelConsumer + "=" + key.Name))
	}, testenv.WaitFor).Should(Succeed())

	// Down to zero: the consumers stop, the subscription keeps the messages.
	f.G.Expect(k8s.Patch(f.Ctx, pc, testenv.MergePatch(`{"spec":{"replicas":0}}`))).To(Succeed())
	f.deployment(key, func(g Gomega, d *appsv1.Deployment) { g.Expect(d.Spec.Replicas).To(HaveValue(BeZero())) })
}

func TestManualEditIsHealed(t *testing.T) {
	f := newFixture(t)
	key := f.consumer("heal", spec("orders", 2))
	d := f.deployment(key, func(Gomega, *appsv1.Deployment) {})
	f.condition(key, pulsarv1.ConditionDegraded, metav1.ConditionFalse, pulsarv1.ReasonAsExpected)

	// What `kubectl scale deployment` and `kubectl set image` send: patches
	// under another field manager.
	f.G.Expect(k8s.Patch(f.Ctx, d, testenv.MergePatch(`{"spec":{"replicas":7}}`), client.FieldOwner("kubectl-scale"))).To(Succeed())
	f.G.Expect(k8s.Patch(f.Ctx, d, client.RawPatch(types.StrategicMergePatchType, []byte(
		`{"spec":{"template":{"spec":{"containers":[{"name":"consumer","image":"evil:latest",`+
			`"env":[{"name":"PULSAR_TOPIC","value":"someone-elses-topic"}]}]}}}}`)),
		client.FieldOwner("kubectl-set"))).To(Succeed())
	f.deployment(key, func(g Gomega, d *appsv1.Deployment) {
		g.Expect(d.Spec.Replicas).To(HaveValue(Equal(int32(2))))
		g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal(testImage))
		values, _ := env(d)
		g.Expect(values).To(HaveKeyWithValue(pulsarv1.EnvTopic, "orders"))
	})
	f.event(key, "Healed")

	// A field kubext does not manage is left as the user set it.
	f.G.Expect(k8s.Patch(f.Ctx, d, testenv.MergePatch(`{"spec":{"minReadySeconds":5}}`), client.FieldOwner("kubectl-edit"))).To(Succeed())
	f.G.Consistently(func(g Gomega) {
		g.Expect(k8s.Get(f.Ctx, key, d)).To(Succeed())
		g.Expect(d.Spec.MinReadySeconds).To(Equal(int32(5)))
	}, time.Second).Should(Succeed())

	// A deleted Deployment comes back.
	uid := d.UID
	f.G.Expect(k8s.Delete(f.Ctx, d)).To(Succeed())
	f.deployment(key, func(g Gomega, d *appsv1.Deployment) { g.Expect(d.UID).NotTo(Equal(uid)) })
}

func TestStatusFollowsDeployment(t *testing.T) {
	f := newFixture(t)
	key := f.consumer("status", spec("orders", 3))
	d := f.deployment(key, func(Gomega, *appsv1.Deployment) {})
	f.condition(key, pulsarv1.ConditionProgressing, metav1.ConditionTrue, pulsarv1.ReasonRolloutPending)

	now := metav1.Now()
	cond := func(t appsv1.DeploymentConditionType, s corev1.ConditionStatus, reason, message string) appsv1.DeploymentCondition {
		return appsv1.DeploymentCondition{Type: t, Status: s, Reason: reason, Message: message, LastUpdateTime: now, LastTransitionTime: now}
	}

	// Rolling out: one of three consumers subscribed so far.
	f.reportStatus(d, appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 1, AvailableReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{
			cond(appsv1.DeploymentAvailable, corev1.ConditionFalse, "MinimumReplicasUnavailable", "Deployment does not have minimum availability."),
			cond(appsv1.DeploymentProgressing, corev1.ConditionTrue, "ReplicaSetUpdated", `ReplicaSet "status-abc" is progressing.`),
		}})
	pc := f.condition(key, pulsarv1.ConditionAvailable, metav1.ConditionFalse, "MinimumReplicasUnavailable")
	f.G.Expect(pc.Status.Replicas).To(Equal(int32(3)))
	f.G.Expect(pc.Status.ReadyReplicas).To(Equal(int32(1)))
	f.G.Expect(pc.Status.AvailableReplicas).To(Equal(int32(1)))
	f.condition(key, pulsarv1.ConditionProgressing, metav1.ConditionTrue, "ReplicaSetUpdated")
	f.condition(key, pulsarv1.ConditionDegraded, metav1.ConditionFalse, pulsarv1.ReasonAsExpected)

	// Done.
	f.reportStatus(d, appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 3, AvailableReplicas: 3,
		Conditions: []appsv1.DeploymentCondition{
			cond(appsv1.DeploymentAvailable, corev1.ConditionTrue, "MinimumReplicasAvailable", "Deployment has minimum availability."),
			cond(appsv1.DeploymentProgressing, corev1.ConditionTrue, "NewReplicaSetAvailable", `ReplicaSet "status-abc" has successfully progressed.`),
		}})
	pc = f.condition(key, pulsarv1.ConditionAvailable, metav1.ConditionTrue, "MinimumReplicasAvailable")
	f.G.Expect(pc.Status.ReadyReplicas).To(Equal(int32(3)))
	f.G.Expect(meta.FindStatusCondition(pc.Status.Conditions, pulsarv1.ConditionAvailable).Message).To(ContainSubstring("minimum availability"))
	f.condition(key, pulsarv1.ConditionProgressing, metav1.ConditionFalse, pulsarv1.ReasonRolloutComplete)

	// Pods cannot be created, and the rollout gave up.
	f.reportStatus(d, appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{
			cond(appsv1.DeploymentAvailable, corev1.ConditionFalse, "MinimumReplicasUnavailable", "Deployment does not have minimum availability."),
			cond(appsv1.DeploymentProgressing, corev1.ConditionFalse, "ProgressDeadlineExceeded", `ReplicaSet "status-abc" has timed out progressing.`),
		}})
	f.condition(key, pulsarv1.ConditionDegraded, metav1.ConditionTrue, "ProgressDeadlineExceeded")
	f.condition(key, pulsarv1.ConditionProgressing, metav1.ConditionFalse, "ProgressDeadlineExceeded")
	f.reportStatus(d, appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{
			cond(appsv1.DeploymentReplicaFailure, corev1.ConditionTrue, "FailedCreate", `pods "status-abc-x" is forbidden: exceeded quota`),
		}})
	pc = f.condition(key, pulsarv1.ConditionDegraded, metav1.ConditionTrue, "FailedCreate")
	f.G.Expect(meta.FindStatusCondition(pc.Status.Conditions, pulsarv1.ConditionDegraded).Message).To(ContainSubstring("exceeded quota"))
	f.condition(key, pulsarv1.ConditionProgressing, metav1.ConditionTrue, pulsarv1.ReasonScaling)

	// A new spec the Deployment controller has not acted on yet.
	pc = f.Get(key, &pulsarv1.PulsarConsumer{}).(*pulsarv1.PulsarConsumer)
	f.G.Expect(k8s.Patch(f.Ctx, pc, testenv.MergePatch(`{"spec":{"topic":"payments"}}`))).To(Succeed())
	f.condition(key, pulsarv1.ConditionProgressing, metav1.ConditionTrue, pulsarv1.ReasonRolloutPending)
}

func TestSteadyStateMakesNoWrites(t *testing.T) {
	f := newFixture(t)
	s := spec("persistent://shop/prod/orders", 2)
	s.SubscriptionType = pulsarv1.SubscriptionFailover
	key := f.consumer("steady", s)
	// 1000m and 0.5Gi are stored as written and come back from the
	// Deployment as 1 and 512Mi: equal, not a difference.
	f.G.Expect(k8s.Patch(f.Ctx, &pulsarv1.PulsarConsumer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}},
		testenv.MergePatch(`{"spec":{"resources":{"requests":{"cpu":"1000m","memory":"0.5Gi"},"limits":{"memory":"1Gi"}}}}`))).To(Succeed())
	d := f.deployment(key, func(g Gomega, d *appsv1.Deployment) {
		g.Expect(d.Spec.Template.Spec.Containers[0].Resources.Requests.Memory().String()).To(Equal("512Mi"))
	})
	f.reportStatus(d, appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2})
	pc := f.condition(key, pulsarv1.ConditionProgressing, metav1.ConditionFalse, pulsarv1.ReasonRolloutComplete)
	d = f.Get(key, &appsv1.Deployment{}).(*appsv1.Deployment)

	// Wait for the cache the controller reads to have caught up with the
	// last writes, so that it computes from the same state as the server.
	f.WaitForCache(mgr.GetClient(), pc, d)

	var writes atomic.Int64
	r := &Reconciler{Client: testenv.CountWrites(mgr.GetClient(), &writes), Recorder: mgr.GetEventRecorder("pulsarconsumer-test"), Image: testImage}
	for range 3 {
		_, err := r.Reconcile(f.Ctx, reconcile.Request{NamespacedName: key})
		f.G.Expect(err).NotTo(HaveOccurred())
	}
	f.G.Expect(writes.Load()).To(BeZero(), "a reconcile with nothing to change must not write")
	f.G.Expect(f.Get(key, &appsv1.Deployment{}).GetResourceVersion()).To(Equal(d.ResourceVersion))
	f.G.Expect(f.Get(key, &pulsarv1.PulsarConsumer{}).GetResourceVersion()).To(Equal(pc.ResourceVersion))

	// The counter counts: a change of spec makes this reconciler write.
	f.G.Expect(k8s.Patch(f.Ctx, pc, testenv.MergePatch(`{"spec":{"replicas":1}}`))).To(Succeed())
	f.G.Eventually(func(g Gomega) {
		_, err := r.Reconcile(f.Ctx, reconcile.Request{NamespacedName: key})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(writes.Load()).NotTo(BeZero())
	}, testenv.WaitFor).Should(Succeed())
}

func TestDeploymentOfSameNameIsLeftAlone(t *testing.T) {
	f := newFixture(t)
	labels := map[string]string{"app": "theirs"}
	theirs := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken-" + f.ID},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "theirs", Image: "theirs:1"}}}},
		},
	}
	f.Create(theirs)

	key := f.consumer("taken", spec("orders", 1))
	pc := f.condition(key, pulsarv1.ConditionDegraded, metav1.ConditionTrue, pulsarv1.ReasonDeploymentExists)
	f.G.Expect(meta.FindStatusCondition(pc.Status.Conditions, pulsarv1.ConditionDegraded).Message).To(ContainSubstring("not controlled by this PulsarConsumer"))
	f.condition(key, pulsarv1.ConditionAvailable, metav1.ConditionFalse, pulsarv1.ReasonDeploymentExists)
	got := f.Get(key, &appsv1.Deployment{}).(*appsv1.Deployment)
	f.G.Expect(got.ResourceVersion).To(Equal(theirs.ResourceVersion))
}

func TestRejectedDeploymentIsReported(t *testing.T) {
	f := newFixture(t)
	key := f.consumer("rejected", spec("orders", 1))
	f.deployment(key, func(Gomega, *appsv1.Deployment) {})
	f.condition(key, pulsarv1.ConditionDegraded, metav1.ConditionFalse, pulsarv1.ReasonAsExpected)

	// Extended resources cannot be overcommitted: the API server wants
	// their requests equal to their limits, which this API does not check.
	pc := f.Get(key, &pulsarv1.PulsarConsumer{}).(*pulsarv1.PulsarConsumer)
	f.G.Expect(k8s.Patch(f.Ctx, pc, testenv.MergePatch(`{"spec":{"resources":{"requests":{"example.com/gpu":"1"}}}}`))).To(Succeed())
	pc = f.condition(key, pulsarv1.ConditionDegraded, metav1.ConditionTrue, pulsarv1.ReasonDeploymentRejected)
	f.G.Expect(meta.FindStatusCondition(pc.Status.Conditions, pulsarv1.ConditionDegraded).Message).To(ContainSubstring("non overcommitable resources"))
	f.G.Expect(pc.Status.ObservedGeneration).To(Equal(pc.Generation), "the spec was refused for good")
	f.event(key, pulsarv1.ReasonDeploymentRejected)
	// The consumers of the previous spec go on: the Deployment is as it was.
	f.G.Expect(f.Get(key, &appsv1.Deployment{}).(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Resources.Requests).To(BeEmpty())

	// Fixing the spec fixes the PulsarConsumer.
	f.G.Expect(k8s.Patch(f.Ctx, pc, testenv.MergePatch(`{"spec":{"resources":{"limits":{"example.com/gpu":"1"}}}}`))).To(Succeed())
	f.condition(key, pulsarv1.ConditionDegraded, metav1.ConditionFalse, pulsarv1.ReasonAsExpected)
	f.deployment(key, func(g Gomega, d *appsv1.Deployment) {
		g.Expect(d.Spec.Template.Spec.Containers[0].Resources.Limits).To(HaveKey(corev1.ResourceName("example.com/gpu")))
	})
}

func TestDeletedConsumerLeavesItToTheGarbageCollector(t *testing.T) {
	f := newFixture(t)
	key := f.consumer("deleted", spec("orders", 1))
	d := f.deployment(key, func(Gomega, *appsv1.Deployment) {})
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), d) })
	pc := f.Get(key, &pulsarv1.PulsarConsumer{}).(*pulsarv1.PulsarConsumer)

	f.G.Expect(k8s.Delete(f.Ctx, pc)).To(Succeed())
	f.G.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(f.Ctx, key, &pulsarv1.PulsarConsumer{})).To(MatchError(ContainSubstring("not found")))
	}, testenv.WaitFor).Should(Succeed())

	// envtest runs no garbage collector. In a cluster it deletes the
	// Deployment, which points to the deleted PulsarConsumer as its
	// controller, blocking the owner's foreground deletion until it is
	// gone; the controller neither recreates nor orphans anything.
	f.G.Consistently(func(g Gomega) {
		got := &appsv1.Deployment{}
		g.Expect(k8s.Get(f.Ctx, key, got)).To(Succeed())
		g.Expect(got.UID).To(Equal(d.UID))
		g.Expect(got.ResourceVersion).To(Equal(d.ResourceVersion))
		g.Expect(got.OwnerReferences).To(ConsistOf(metav1.OwnerReference{APIVersion: "pulsar.kubext.io/v1", Kind: "PulsarConsumer",
			Name: key.Name, UID: pc.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}))
	}, time.Second).Should(Succeed())
}
