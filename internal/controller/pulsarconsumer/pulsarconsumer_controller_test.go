package pulsarconsumer

import (
	"context"
	"net/http"
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
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	pulsarv1 "github.com/kubext/kubext/api/pulsar/v1"
)

const ns = "default"

// fixture names objects uniquely per test so tests share one API server.
type fixture struct {
	t   *testing.T
	g   *WithT
	ctx context.Context
	id  string
}

func newFixture(t *testing.T) *fixture {
	return &fixture{t: t, g: NewWithT(t), ctx: context.Background(), id: rand.String(5)}
}

// consumer creates a PulsarConsumer and returns its key.
func (f *fixture) consumer(name string, spec pulsarv1.PulsarConsumerSpec) client.ObjectKey {
	f.t.Helper()
	pc := &pulsarv1.PulsarConsumer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-" + f.id}, Spec: spec}
	f.g.Expect(k8s.Create(f.ctx, pc)).To(Succeed())
	f.t.Cleanup(func() { _ = k8s.Delete(context.Background(), pc) })
	return client.ObjectKeyFromObject(pc)
}

func (f *fixture) get(key client.ObjectKey, o client.Object) client.Object {
	f.t.Helper()
	f.g.Expect(k8s.Get(f.ctx, key, o)).To(Succeed())
	return o
}

// deployment waits until the PulsarConsumer's Deployment satisfies match
// and returns it.
func (f *fixture) deployment(key client.ObjectKey, match func(g Gomega, d *appsv1.Deployment)) *appsv1.Deployment {
	f.t.Helper()
	d := &appsv1.Deployment{}
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(f.ctx, key, d)).To(Succeed())
		match(g, d)
	}, waitFor, 50*time.Millisecond).Should(Succeed())
	return d
}

// condition waits until the PulsarConsumer's condition has the status and
// reason, for its current generation, and returns the PulsarConsumer.
func (f *fixture) condition(key client.ObjectKey, typ string, status metav1.ConditionStatus, reason string) *pulsarv1.PulsarConsumer {
	f.t.Helper()
	pc := &pulsarv1.PulsarConsumer{}
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(f.ctx, key, pc)).To(Succeed())
		c := meta.FindStatusCondition(pc.Status.Conditions, typ)
		g.Expect(c).NotTo(BeNil(), "no %s condition", typ)
		g.Expect(c.Status).To(Equal(status), c.Message)
		g.Expect(c.Reason).To(Equal(reason), c.Message)
		g.Expect(c.ObservedGeneration).To(Equal(pc.Generation))
	}, waitFor, 50*time.Millisecond).Should(Succeed())
	return pc
}

// event waits for an Event with the reason about the PulsarConsumer.
func (f *fixture) event(key client.ObjectKey, reason string) *eventsv1.Event {
	f.t.Helper()
	var found *eventsv1.Event
	f.g.Eventually(func(g Gomega) {
		events := &eventsv1.EventList{}
		g.Expect(k8s.List(f.ctx, events, client.InNamespace(ns))).To(Succeed())
		for i, e := range events.Items {
			if e.Regarding.Kind == "PulsarConsumer" && e.Regarding.Name == key.Name && e.Reason == reason {
				found = &events.Items[i]
			}
		}
		g.Expect(found).NotTo(BeNil(), "no %s event for %s", reason, key.Name)
	}, waitFor, 100*time.Millisecond).Should(Succeed())
	return found
}

// reportStatus writes the Deployment's status as the Deployment controller
// would; envtest runs none.
func (f *fixture) reportStatus(d *appsv1.Deployment, status appsv1.DeploymentStatus) {
	f.t.Helper()
	orig := d.DeepCopy()
	d.Status = status
	f.g.Expect(k8s.Status().Patch(f.ctx, d, client.MergeFrom(orig))).To(Succeed())
}

func mergePatch(s string) client.Patch { return client.RawPatch(types.MergePatchType, []byte(s)) }

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
	f.g.Expect(d.Spec.Replicas).To(HaveValue(Equal(int32(2))))
	f.g.Expect(d.Spec.Selector.MatchLabels).To(Equal(map[string]string{pulsarv1.LabelConsumer: key.Name}))
	f.g.Expect(d.Spec.Strategy.Type).To(Equal(appsv1.RecreateDeploymentStrategyType))
	f.g.Expect(d.Labels).To(HaveKeyWithValue(pulsarv1.LabelConsumer, key.Name))
	f.g.Expect(d.Spec.Template.Labels).To(HaveKeyWithValue(pulsarv1.LabelConsumer, key.Name))
	pod := d.Spec.Template.Spec
	f.g.Expect(pod.AutomountServiceAccountToken).To(HaveValue(BeFalse()))
	f.g.Expect(pod.Containers).To(HaveLen(1))
	c := pod.Containers[0]
	f.g.Expect(c.Image).To(Equal(testImage), "the manager's image, spec.image being empty")
	f.g.Expect(c.Command).To(Equal([]string{"/pulsar-consumer"}))
	f.g.Expect(c.ReadinessProbe.HTTPGet.Path).To(Equal("/readyz"))
	f.g.Expect(c.SecurityContext.RunAsNonRoot).To(HaveValue(BeTrue()))
	values, fields := env(d)
	f.g.Expect(values).To(Equal(map[string]string{
		pulsarv1.EnvServerAddress:    "pulsar://pulsar-broker.pulsar:6650",
		pulsarv1.EnvTopic:            "persistent://shop/prod/orders",
		pulsarv1.EnvSubscription:     "audit",
		pulsarv1.EnvSubscriptionType: "Shared", // defaulted by the API server
		pulsarv1.EnvConsumerName:     "",
		pulsarv1.EnvHealthAddress:    ":8080",
	}))
	f.g.Expect(fields).To(Equal(map[string]string{pulsarv1.EnvConsumerName: "metadata.name"}))

	// envtest runs no garbage collector: the owner reference is what makes
	// the Deployment go with its PulsarConsumer in a cluster.
	pc := f.get(key, &pulsarv1.PulsarConsumer{}).(*pulsarv1.PulsarConsumer)
	owner := metav1.GetControllerOf(d)
	f.g.Expect(owner).NotTo(BeNil())
	f.g.Expect(owner.UID).To(Equal(pc.UID))
	f.g.Expect(owner.Kind).To(Equal("PulsarConsumer"))
	f.g.Expect(owner.APIVersion).To(Equal("pulsar.kubext.io/v1"))
	f.g.Expect(owner.BlockOwnerDeletion).To(HaveValue(BeTrue()))

	// No Deployment controller has looked at it yet.
	f.condition(key, pulsarv1.ConditionAvailable, metav1.ConditionUnknown, pulsarv1.ReasonDeploymentPending)
	f.condition(key, pulsarv1.ConditionProgressing, metav1.ConditionTrue, pulsarv1.ReasonRolloutPending)
	pc = f.condition(key, pulsarv1.ConditionDegraded, metav1.ConditionFalse, pulsarv1.ReasonAsExpected)
	f.g.Expect(pc.Status.ObservedGeneration).To(Equal(pc.Generation))
	f.g.Expect(pc.Status.Selector).To(Equal(pulsarv1.LabelConsumer + "=" + key.Name))
	f.g.Expect(pc.Status.Replicas).To(BeZero(), "no pod exists yet: status is observed, not copied from spec")
	e := f.event(key, "Created")
	f.g.Expect(e.Related).NotTo(BeNil())
	f.g.Expect(e.Related.Kind).To(Equal("Deployment"))
	f.g.Expect(e.Note).To(ContainSubstring("persistent://shop/prod/orders"))
}

func TestSpecChangeAndScale(t *testing.T) {
	f := newFixture(t)
	key := f.consumer("change", spec("orders", 1))
	f.condition(key, pulsarv1.ConditionDegraded, metav1.ConditionFalse, pulsarv1.ReasonAsExpected)

	// What `kubectl patch pulsarconsumer change --type=merge -p ...` sends.
	pc := &pulsarv1.PulsarConsumer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}}
	f.g.Expect(k8s.Patch(f.ctx, pc, mergePatch(`{"spec":{"serverAddress":"pulsar+ssl://b-1.example.com:6651,b-2.example.com:6651",`+
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
	f.g.Expect(c.Image).To(Equal("mirror.example.com/kubext:v0.1.0"))
	f.g.Expect(c.Resources.Requests.Cpu().Equal(resource.MustParse("100m"))).To(BeTrue())
	f.g.Expect(c.Resources.Limits.Memory().Equal(resource.MustParse("128Mi"))).To(BeTrue())
	f.event(key, "Updated")

	// `kubectl scale pulsarconsumer change --replicas=3` goes through the
	// scale subresource.
	scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 3}}
	f.g.Expect(k8s.SubResource("scale").Update(f.ctx, pc, client.WithSubResourceBody(scale))).To(Succeed())
	d = f.deployment(key, func(g Gomega, d *appsv1.Deployment) { g.Expect(d.Spec.Replicas).To(HaveValue(Equal(int32(3)))) })

	// The scale subresource reports the pods the Deployment reports, and
	// their selector, for autoscalers.
	f.reportStatus(d, appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 2, AvailableReplicas: 2})
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8s.SubResource("scale").Get(f.ctx, pc, scale)).To(Succeed())
		g.Expect(scale.Status.Replicas).To(Equal(int32(3)))
		g.Expect(scale.Status.Selector).To(Equal(pulsarv1.LabelConsumer + "=" + key.Name))
	}, waitFor).Should(Succeed())

	// Down to zero: the consumers stop, the subscription keeps the messages.
	f.g.Expect(k8s.Patch(f.ctx, pc, mergePatch(`{"spec":{"replicas":0}}`))).To(Succeed())
	f.deployment(key, func(g Gomega, d *appsv1.Deployment) { g.Expect(d.Spec.Replicas).To(HaveValue(BeZero())) })
}

func TestManualEditIsHealed(t *testing.T) {
	f := newFixture(t)
	key := f.consumer("heal", spec("orders", 2))
	d := f.deployment(key, func(Gomega, *appsv1.Deployment) {})
	f.condition(key, pulsarv1.ConditionDegraded, metav1.ConditionFalse, pulsarv1.ReasonAsExpected)

	// What `kubectl scale deployment` and `kubectl set image` send: patches
	// under another field manager.
	f.g.Expect(k8s.Patch(f.ctx, d, mergePatch(`{"spec":{"replicas":7}}`), client.FieldOwner("kubectl-scale"))).To(Succeed())
	f.g.Expect(k8s.Patch(f.ctx, d, client.RawPatch(types.StrategicMergePatchType, []byte(
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
	f.g.Expect(k8s.Patch(f.ctx, d, mergePatch(`{"spec":{"minReadySeconds":5}}`), client.FieldOwner("kubectl-edit"))).To(Succeed())
	f.g.Consistently(func(g Gomega) {
		g.Expect(k8s.Get(f.ctx, key, d)).To(Succeed())
		g.Expect(d.Spec.MinReadySeconds).To(Equal(int32(5)))
	}, time.Second).Should(Succeed())

	// A deleted Deployment comes back.
	uid := d.UID
	f.g.Expect(k8s.Delete(f.ctx, d)).To(Succeed())
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
	f.g.Expect(pc.Status.Replicas).To(Equal(int32(3)))
	f.g.Expect(pc.Status.ReadyReplicas).To(Equal(int32(1)))
	f.g.Expect(pc.Status.AvailableReplicas).To(Equal(int32(1)))
	f.condition(key, pulsarv1.ConditionProgressing, metav1.ConditionTrue, "ReplicaSetUpdated")
	f.condition(key, pulsarv1.ConditionDegraded, metav1.ConditionFalse, pulsarv1.ReasonAsExpected)

	// Done.
	f.reportStatus(d, appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 3, AvailableReplicas: 3,
		Conditions: []appsv1.DeploymentCondition{
			cond(appsv1.DeploymentAvailable, corev1.ConditionTrue, "MinimumReplicasAvailable", "Deployment has minimum availability."),
			cond(appsv1.DeploymentProgressing, corev1.ConditionTrue, "NewReplicaSetAvailable", `ReplicaSet "status-abc" has successfully progressed.`),
		}})
	pc = f.condition(key, pulsarv1.ConditionAvailable, metav1.ConditionTrue, "MinimumReplicasAvailable")
	f.g.Expect(pc.Status.ReadyReplicas).To(Equal(int32(3)))
	f.g.Expect(meta.FindStatusCondition(pc.Status.Conditions, pulsarv1.ConditionAvailable).Message).To(ContainSubstring("minimum availability"))
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
	f.g.Expect(meta.FindStatusCondition(pc.Status.Conditions, pulsarv1.ConditionDegraded).Message).To(ContainSubstring("exceeded quota"))
	f.condition(key, pulsarv1.ConditionProgressing, metav1.ConditionTrue, pulsarv1.ReasonScaling)

	// A new spec the Deployment controller has not acted on yet.
	pc = f.get(key, &pulsarv1.PulsarConsumer{}).(*pulsarv1.PulsarConsumer)
	f.g.Expect(k8s.Patch(f.ctx, pc, mergePatch(`{"spec":{"topic":"payments"}}`))).To(Succeed())
	f.condition(key, pulsarv1.ConditionProgressing, metav1.ConditionTrue, pulsarv1.ReasonRolloutPending)
}

// countingClient reads from the manager's cache, as the controller does,
// and counts every request it sends that is not a read.
func countingClient(writes *atomic.Int64) client.Client {
	cfg := rest.CopyConfig(restConfig)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodGet {
				writes.Add(1)
			}
			return rt.RoundTrip(req)
		})
	})
	c, err := client.New(cfg, client.Options{Scheme: scheme, Cache: &client.CacheOptions{Reader: mgr.GetCache()}})
	if err != nil {
		panic(err)
	}
	return c
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func TestSteadyStateMakesNoWrites(t *testing.T) {
	f := newFixture(t)
	s := spec("persistent://shop/prod/orders", 2)
	s.SubscriptionType = pulsarv1.SubscriptionFailover
	key := f.consumer("steady", s)
	// 1000m and 0.5Gi are stored as written and come back from the
	// Deployment as 1 and 512Mi: equal, not a difference.
	f.g.Expect(k8s.Patch(f.ctx, &pulsarv1.PulsarConsumer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}},
		mergePatch(`{"spec":{"resources":{"requests":{"cpu":"1000m","memory":"0.5Gi"},"limits":{"memory":"1Gi"}}}}`))).To(Succeed())
	d := f.deployment(key, func(g Gomega, d *appsv1.Deployment) {
		g.Expect(d.Spec.Template.Spec.Containers[0].Resources.Requests.Memory().String()).To(Equal("512Mi"))
	})
	f.reportStatus(d, appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2})
	pc := f.condition(key, pulsarv1.ConditionProgressing, metav1.ConditionFalse, pulsarv1.ReasonRolloutComplete)
	d = f.get(key, &appsv1.Deployment{}).(*appsv1.Deployment)

	// Wait for the cache the controller reads to have caught up with the
	// last writes, so that it computes from the same state as the server.
	f.g.Eventually(func(g Gomega) {
		cached := &pulsarv1.PulsarConsumer{}
		g.Expect(mgr.GetClient().Get(f.ctx, key, cached)).To(Succeed())
		g.Expect(cached.ResourceVersion).To(Equal(pc.ResourceVersion))
		cachedDep := &appsv1.Deployment{}
		g.Expect(mgr.GetClient().Get(f.ctx, key, cachedDep)).To(Succeed())
		g.Expect(cachedDep.ResourceVersion).To(Equal(d.ResourceVersion))
	}, waitFor).Should(Succeed())

	var writes atomic.Int64
	r := &Reconciler{Client: countingClient(&writes), Recorder: mgr.GetEventRecorder("pulsarconsumer-test"), Image: testImage}
	for range 3 {
		_, err := r.Reconcile(f.ctx, reconcile.Request{NamespacedName: key})
		f.g.Expect(err).NotTo(HaveOccurred())
	}
	f.g.Expect(writes.Load()).To(BeZero(), "a reconcile with nothing to change must not write")
	f.g.Expect(f.get(key, &appsv1.Deployment{}).GetResourceVersion()).To(Equal(d.ResourceVersion))
	f.g.Expect(f.get(key, &pulsarv1.PulsarConsumer{}).GetResourceVersion()).To(Equal(pc.ResourceVersion))

	// The counter counts: a change of spec makes this reconciler write.
	f.g.Expect(k8s.Patch(f.ctx, pc, mergePatch(`{"spec":{"replicas":1}}`))).To(Succeed())
	f.g.Eventually(func(g Gomega) {
		_, err := r.Reconcile(f.ctx, reconcile.Request{NamespacedName: key})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(writes.Load()).NotTo(BeZero())
	}, waitFor).Should(Succeed())
}

func TestDeploymentOfSameNameIsLeftAlone(t *testing.T) {
	f := newFixture(t)
	labels := map[string]string{"app": "theirs"}
	theirs := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken-" + f.id},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "theirs", Image: "theirs:1"}}}},
		},
	}
	f.g.Expect(k8s.Create(f.ctx, theirs)).To(Succeed())
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), theirs) })

	key := f.consumer("taken", spec("orders", 1))
	pc := f.condition(key, pulsarv1.ConditionDegraded, metav1.ConditionTrue, pulsarv1.ReasonDeploymentExists)
	f.g.Expect(meta.FindStatusCondition(pc.Status.Conditions, pulsarv1.ConditionDegraded).Message).To(ContainSubstring("not controlled by this PulsarConsumer"))
	f.condition(key, pulsarv1.ConditionAvailable, metav1.ConditionFalse, pulsarv1.ReasonDeploymentExists)
	got := f.get(key, &appsv1.Deployment{}).(*appsv1.Deployment)
	f.g.Expect(got.ResourceVersion).To(Equal(theirs.ResourceVersion))
}

func TestRejectedDeploymentIsReported(t *testing.T) {
	f := newFixture(t)
	key := f.consumer("rejected", spec("orders", 1))
	f.deployment(key, func(Gomega, *appsv1.Deployment) {})
	f.condition(key, pulsarv1.ConditionDegraded, metav1.ConditionFalse, pulsarv1.ReasonAsExpected)

	// Extended resources cannot be overcommitted: the API server wants
	// their requests equal to their limits, which this API does not check.
	pc := f.get(key, &pulsarv1.PulsarConsumer{}).(*pulsarv1.PulsarConsumer)
	f.g.Expect(k8s.Patch(f.ctx, pc, mergePatch(`{"spec":{"resources":{"requests":{"example.com/gpu":"1"}}}}`))).To(Succeed())
	pc = f.condition(key, pulsarv1.ConditionDegraded, metav1.ConditionTrue, pulsarv1.ReasonDeploymentRejected)
	f.g.Expect(meta.FindStatusCondition(pc.Status.Conditions, pulsarv1.ConditionDegraded).Message).To(ContainSubstring("non overcommitable resources"))
	f.g.Expect(pc.Status.ObservedGeneration).To(Equal(pc.Generation), "the spec was refused for good")
	f.event(key, pulsarv1.ReasonDeploymentRejected)
	// The consumers of the previous spec go on: the Deployment is as it was.
	f.g.Expect(f.get(key, &appsv1.Deployment{}).(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Resources.Requests).To(BeEmpty())

	// Fixing the spec fixes the PulsarConsumer.
	f.g.Expect(k8s.Patch(f.ctx, pc, mergePatch(`{"spec":{"resources":{"limits":{"example.com/gpu":"1"}}}}`))).To(Succeed())
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
	pc := f.get(key, &pulsarv1.PulsarConsumer{}).(*pulsarv1.PulsarConsumer)

	f.g.Expect(k8s.Delete(f.ctx, pc)).To(Succeed())
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(f.ctx, key, &pulsarv1.PulsarConsumer{})).To(MatchError(ContainSubstring("not found")))
	}, waitFor).Should(Succeed())

	// envtest runs no garbage collector. In a cluster it deletes the
	// Deployment, which points to the deleted PulsarConsumer as its
	// controller, blocking the owner's foreground deletion until it is
	// gone; the controller neither recreates nor orphans anything.
	f.g.Consistently(func(g Gomega) {
		got := &appsv1.Deployment{}
		g.Expect(k8s.Get(f.ctx, key, got)).To(Succeed())
		g.Expect(got.UID).To(Equal(d.UID))
		g.Expect(got.ResourceVersion).To(Equal(d.ResourceVersion))
		g.Expect(got.OwnerReferences).To(ConsistOf(metav1.OwnerReference{APIVersion: "pulsar.kubext.io/v1", Kind: "PulsarConsumer",
			Name: key.Name, UID: pc.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}))
	}, time.Second).Should(Succeed())
}
