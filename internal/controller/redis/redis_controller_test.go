package redis

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
	"github.com/kubext/kubext/internal/redisrepl"
)

const ns = "default"

// nextIP hands out pod IPs, unique across the tests sharing servers.
var nextIP atomic.Int32

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

// redis creates a Redis and returns its key.
func (f *fixture) redis(name string, spec cachev1.RedisSpec) client.ObjectKey {
	f.t.Helper()
	rd := &cachev1.Redis{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-" + f.id}, Spec: spec}
	f.g.Expect(k8s.Create(f.ctx, rd)).To(Succeed())
	f.t.Cleanup(func() { _ = k8s.Delete(context.Background(), rd) })
	return client.ObjectKeyFromObject(rd)
}

func (f *fixture) get(key client.ObjectKey, o client.Object) client.Object {
	f.t.Helper()
	f.g.Expect(k8s.Get(f.ctx, key, o)).To(Succeed())
	return o
}

// eventually waits until the object of key satisfies match.
func eventually[O client.Object](f *fixture, key client.ObjectKey, o O, match func(g Gomega, o O)) O {
	f.t.Helper()
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(f.ctx, key, o)).To(Succeed())
		match(g, o)
	}, waitFor, 50*time.Millisecond).Should(Succeed())
	return o
}

// condition waits until the Redis's condition has the status and reason,
// for its current generation, and returns the Redis.
func (f *fixture) condition(key client.ObjectKey, typ string, status metav1.ConditionStatus, reason string) *cachev1.Redis {
	f.t.Helper()
	return eventually(f, key, &cachev1.Redis{}, func(g Gomega, rd *cachev1.Redis) {
		c := meta.FindStatusCondition(rd.Status.Conditions, typ)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(status), c.Message)
		g.Expect(c.Reason).To(Equal(reason), c.Message)
		g.Expect(c.ObservedGeneration).To(Equal(rd.Generation))
		g.Expect(rd.Status.ObservedGeneration).To(Equal(rd.Generation))
	})
}

// event waits for an Event with the reason about the Redis.
func (f *fixture) event(key client.ObjectKey, reason string) *eventsv1.Event {
	f.t.Helper()
	var found *eventsv1.Event
	f.g.Eventually(func(g Gomega) {
		events := &eventsv1.EventList{}
		g.Expect(k8s.List(f.ctx, events, client.InNamespace(ns))).To(Succeed())
		for i, e := range events.Items {
			if e.Regarding.Kind == "Redis" && e.Regarding.Name == key.Name && e.Reason == reason {
				found = &events.Items[i]
			}
		}
		g.Expect(found).NotTo(BeNil(), "no %s event for %s", reason, key.Name)
	}, waitFor, 100*time.Millisecond).Should(Succeed())
	return found
}

// members plays the StatefulSet controller and the kubelet, which envtest
// does not run: it creates the Redis's pods 0 to n-1, running, each with
// an IP address where a fake Redis server answers. It returns the
// addresses.
func (f *fixture) members(key client.ObjectKey, n int, password string) []string {
	f.t.Helper()
	sts := eventually(f, key, &appsv1.StatefulSet{}, func(Gomega, *appsv1.StatefulSet) {})
	var addrs []string
	for i := range n {
		ip := nextIP.Add(1)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: ns, Name: fmt.Sprintf("%s-%d", key.Name, i), Labels: sts.Spec.Template.Labels,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))},
			},
			Spec: sts.Spec.Template.Spec,
		}
		for _, claim := range sts.Spec.VolumeClaimTemplates {
			pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: claim.Name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim.Name + "-" + pod.Name}}})
		}
		f.g.Expect(k8s.Create(f.ctx, pod)).To(Succeed())
		f.t.Cleanup(func() { _ = k8s.Delete(context.Background(), pod) })
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.%d.%d.%d", ip>>16&255, ip>>8&255, ip&255)}
		addr := pod.Status.PodIP + ":6379"
		servers.start(addr, password)
		f.g.Expect(k8s.Status().Update(f.ctx, pod)).To(Succeed())
		addrs = append(addrs, addr)
	}
	return addrs
}

func (f *fixture) podRole(key client.ObjectKey, i int) string {
	pod := &corev1.Pod{}
	f.get(client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("%s-%d", key.Name, i)}, pod)
	return pod.Labels[cachev1.LabelRole]
}

func mergePatch(s string) client.Patch { return client.RawPatch(types.MergePatchType, []byte(s)) }

func size(n int32) cachev1.RedisSpec { return cachev1.RedisSpec{Size: n} }

func isControlledBy(g Gomega, o client.Object, rd *cachev1.Redis) {
	owner := metav1.GetControllerOf(o)
	g.Expect(owner).NotTo(BeNil(), "%s has no controller", o.GetName())
	g.Expect(owner.UID).To(Equal(rd.UID))
	g.Expect(owner.Kind).To(Equal("Redis"))
	g.Expect(owner.APIVersion).To(Equal("cache.kubext.io/v1alpha1"))
	g.Expect(owner.BlockOwnerDeletion).To(HaveValue(BeTrue()))
}

func TestCreatesOwnedObjects(t *testing.T) {
	f := newFixture(t)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "auth-" + f.id}, Data: map[string][]byte{"pw": []byte("s3cret")}}
	f.g.Expect(k8s.Create(f.ctx, secret)).To(Succeed())
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), secret) })
	key := f.redis("cache", cachev1.RedisSpec{Size: 3,
		PasswordSecretKeyRef: &cachev1.SecretKeyRef{Name: secret.Name, Key: "pw"},
		Persistence:          &cachev1.Persistence{Size: resource.MustParse("1Gi"), StorageClassName: ptr.To("fast")},
		Resources:            corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}},
	})

	// No pods yet (envtest runs no StatefulSet controller): members pending.
	rd := f.condition(key, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonSyncing)
	f.g.Expect(rd.Spec.Image).To(Equal("redis:7.2.5"), "defaulted by the API server")
	f.g.Expect(rd.Status.Members).To(HaveLen(3))
	f.g.Expect(rd.Status.Members[2]).To(Equal(cachev1.RedisMember{Name: key.Name + "-2", State: cachev1.MemberPending}))
	f.g.Expect(rd.Status.Primary).To(BeEmpty())
	f.g.Expect(meta.FindStatusCondition(rd.Status.Conditions, cachev1.ConditionReady).Message).To(
		Equal(fmt.Sprintf("Waiting for %[1]s-0 (pending), %[1]s-1 (pending), %[1]s-2 (pending); no primary", key.Name)))

	sts := f.get(key, &appsv1.StatefulSet{}).(*appsv1.StatefulSet)
	isControlledBy(f.g, sts, rd)
	f.g.Expect(sts.Spec.Replicas).To(HaveValue(Equal(int32(3))))
	f.g.Expect(sts.Spec.ServiceName).To(Equal(key.Name + "-headless"))
	f.g.Expect(sts.Spec.Selector.MatchLabels).To(Equal(map[string]string{cachev1.LabelRedis: key.Name}))
	c := sts.Spec.Template.Spec.Containers[0]
	f.g.Expect(c.Image).To(Equal("redis:7.2.5"))
	f.g.Expect(c.Args).To(ContainElements("--appendonly", "yes", "--requirepass", "$(REDIS_PASSWORD)", "--masterauth", "$(REDIS_PASSWORD)"))
	f.g.Expect(c.Env).To(HaveLen(2))
	f.g.Expect(c.Env[0].ValueFrom.SecretKeyRef.Name).To(Equal(secret.Name))
	f.g.Expect(c.Env[0].ValueFrom.SecretKeyRef.Key).To(Equal("pw"))
	f.g.Expect(c.Resources.Requests.Memory().String()).To(Equal("256Mi"))
	f.g.Expect(sts.Spec.VolumeClaimTemplates).To(HaveLen(1))
	claim := sts.Spec.VolumeClaimTemplates[0].Spec
	f.g.Expect(claim.StorageClassName).To(HaveValue(Equal("fast")))
	f.g.Expect(claim.Resources.Requests.Storage().String()).To(Equal("1Gi"))

	for name, role := range map[string]string{"-headless": "", "-primary": cachev1.RolePrimary, "-replicas": cachev1.RoleReplica} {
		svc := f.get(client.ObjectKey{Namespace: ns, Name: key.Name + name}, &corev1.Service{}).(*corev1.Service)
		isControlledBy(f.g, svc, rd)
		f.g.Expect(svc.Spec.Ports).To(HaveLen(1))
		f.g.Expect(svc.Spec.Ports[0].Port).To(Equal(int32(6379)))
		f.g.Expect(svc.Spec.Selector).To(HaveKeyWithValue(cachev1.LabelRedis, key.Name))
		if role == "" {
			f.g.Expect(svc.Spec.ClusterIP).To(Equal(corev1.ClusterIPNone))
			f.g.Expect(svc.Spec.Selector).NotTo(HaveKey(cachev1.LabelRole))
		} else {
			f.g.Expect(svc.Spec.Selector).To(HaveKeyWithValue(cachev1.LabelRole, role))
		}
	}
	pdb := f.get(key, &policyv1.PodDisruptionBudget{}).(*policyv1.PodDisruptionBudget)
	isControlledBy(f.g, pdb, rd)
	f.g.Expect(pdb.Spec.MaxUnavailable.IntValue()).To(Equal(1))
	f.g.Expect(pdb.Spec.Selector.MatchLabels).To(Equal(map[string]string{cachev1.LabelRedis: key.Name}))
	f.event(key, "Created")
}

func TestSizePatchScalesTheStatefulSet(t *testing.T) {
	f := newFixture(t)
	key := f.redis("scale", size(3))
	f.condition(key, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonSyncing)

	// The seed's `kubectl patch redis redis-cache -p '{"spec":{"size": 4}}' --type=merge`.
	rd := &cachev1.Redis{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}}
	f.g.Expect(k8s.Patch(f.ctx, rd, mergePatch(`{"spec":{"size": 4}}`))).To(Succeed())
	eventually(f, key, &appsv1.StatefulSet{}, func(g Gomega, sts *appsv1.StatefulSet) {
		g.Expect(sts.Spec.Replicas).To(HaveValue(Equal(int32(4))))
	})
	rd = f.condition(key, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonSyncing)
	f.g.Expect(rd.Status.Members).To(HaveLen(4))
	f.event(key, "Updated")

	// `kubectl scale redis scale --replicas=2` goes through the scale subresource.
	scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 2}}
	f.g.Expect(k8s.SubResource("scale").Update(f.ctx, rd, client.WithSubResourceBody(scale))).To(Succeed())
	eventually(f, key, &appsv1.StatefulSet{}, func(g Gomega, sts *appsv1.StatefulSet) {
		g.Expect(sts.Spec.Replicas).To(HaveValue(Equal(int32(2))))
	})
}

func TestManualEditIsHealed(t *testing.T) {
	f := newFixture(t)
	key := f.redis("heal", size(3))
	f.condition(key, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonSyncing)
	sts := f.get(key, &appsv1.StatefulSet{}).(*appsv1.StatefulSet)

	// What `kubectl edit statefulset` sends: a patch under another field manager.
	f.g.Expect(k8s.Patch(f.ctx, sts, mergePatch(`{"spec":{"replicas":9,"template":{"spec":{"containers":[{"name":"redis","image":"redis:latest"}]}}}}`),
		client.FieldOwner("kubectl-edit"))).To(Succeed())
	eventually(f, key, &appsv1.StatefulSet{}, func(g Gomega, sts *appsv1.StatefulSet) {
		g.Expect(sts.Spec.Replicas).To(HaveValue(Equal(int32(3))))
		g.Expect(sts.Spec.Template.Spec.Containers[0].Image).To(Equal("redis:7.2.5"))
	})
	f.event(key, "Healed")

	// A field kubext does not manage is left as the user set it.
	f.g.Expect(k8s.Patch(f.ctx, sts, mergePatch(`{"spec":{"minReadySeconds":5}}`), client.FieldOwner("kubectl-edit"))).To(Succeed())
	f.g.Consistently(func(g Gomega) {
		g.Expect(k8s.Get(f.ctx, key, sts)).To(Succeed())
		g.Expect(sts.Spec.MinReadySeconds).To(Equal(int32(5)))
	}, time.Second).Should(Succeed())

	// The primary Service's selector edited, the PDB deleted: both come back.
	primary := client.ObjectKey{Namespace: ns, Name: key.Name + "-primary"}
	svc := f.get(primary, &corev1.Service{}).(*corev1.Service)
	f.g.Expect(k8s.Patch(f.ctx, svc, mergePatch(`{"spec":{"selector":{"cache.kubext.io/role":"replica"}}}`), client.FieldOwner("kubectl-edit"))).To(Succeed())
	pdb := f.get(key, &policyv1.PodDisruptionBudget{}).(*policyv1.PodDisruptionBudget)
	f.g.Expect(k8s.Delete(f.ctx, pdb)).To(Succeed())
	eventually(f, primary, &corev1.Service{}, func(g Gomega, svc *corev1.Service) {
		g.Expect(svc.Spec.Selector).To(HaveKeyWithValue(cachev1.LabelRole, cachev1.RolePrimary))
	})
	eventually(f, key, &policyv1.PodDisruptionBudget{}, func(g Gomega, got *policyv1.PodDisruptionBudget) {
		g.Expect(got.UID).NotTo(Equal(pdb.UID))
	})
}

func TestReplicationFollowsObservations(t *testing.T) {
	f := newFixture(t)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "auth-" + f.id}, Data: map[string][]byte{"password": []byte("pw")}}
	f.g.Expect(k8s.Create(f.ctx, secret)).To(Succeed())
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), secret) })
	key := f.redis("repl", cachev1.RedisSpec{Size: 3, PasswordSecretKeyRef: &cachev1.SecretKeyRef{Name: secret.Name}})
	addrs := f.members(key, 3, "pw")

	// Three fresh servers: the first becomes primary, the others follow it.
	rd := f.condition(key, cachev1.ConditionReady, metav1.ConditionTrue, cachev1.ReasonReplicating)
	f.g.Expect(rd.Status.Primary).To(Equal(key.Name + "-0"))
	f.g.Expect(rd.Status.ReadyReplicas).To(Equal(int32(3)))
	f.g.Expect(rd.Status.Members).To(Equal([]cachev1.RedisMember{
		{Name: key.Name + "-0", State: cachev1.MemberPrimary},
		{Name: key.Name + "-1", State: cachev1.MemberReplica},
		{Name: key.Name + "-2", State: cachev1.MemberReplica},
	}))
	f.g.Expect(meta.FindStatusCondition(rd.Status.Conditions, cachev1.ConditionReady).Message).To(Equal("Primary " + key.Name + "-0 and 2 replica(s) in service"))
	f.condition(key, cachev1.ConditionDegraded, metav1.ConditionFalse, cachev1.ReasonAsExpected)
	f.g.Expect(servers.state(addrs[1]).PrimaryAddr).To(Equal(addrs[0]))
	f.g.Expect(servers.state(addrs[2]).PrimaryAddr).To(Equal(addrs[0]))
	f.g.Eventually(func() []string {
		return []string{f.podRole(key, 0), f.podRole(key, 1), f.podRole(key, 2)}
	}, waitFor).Should(Equal([]string{cachev1.RolePrimary, cachev1.RoleReplica, cachev1.RoleReplica}))
	f.event(key, "Elected")
	f.event(key, "Repointed")

	// The StatefulSet's own status (envtest runs no StatefulSet controller).
	sts := f.get(key, &appsv1.StatefulSet{}).(*appsv1.StatefulSet)
	orig := sts.DeepCopy()
	sts.Status.Replicas = 3
	f.g.Expect(k8s.Status().Patch(f.ctx, sts, client.MergeFrom(orig))).To(Succeed())
	eventually(f, key, &cachev1.Redis{}, func(g Gomega, rd *cachev1.Redis) { g.Expect(rd.Status.Replicas).To(Equal(int32(3))) })

	// Someone makes a replica primary by hand: it is pointed back.
	servers.update(addrs[2], func(s *fakeServer) { s.state = redisrepl.State{Role: redisrepl.RolePrimary, Offset: 5} })
	rd = f.get(key, &cachev1.Redis{}).(*cachev1.Redis)
	f.g.Expect(k8s.Patch(f.ctx, rd, mergePatch(`{"metadata":{"annotations":{"poke":"1"}}}`))).To(Succeed())
	f.g.Eventually(func() string { return servers.state(addrs[2]).PrimaryAddr }, waitFor).Should(Equal(addrs[0]))

	// A replica cannot be reached: reported, not waited for.
	servers.update(addrs[1], func(s *fakeServer) { s.down = true })
	f.g.Expect(k8s.Patch(f.ctx, rd, mergePatch(`{"metadata":{"annotations":{"poke":"2"}}}`))).To(Succeed())
	rd = f.condition(key, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonMembersUnreachable)
	f.g.Expect(meta.FindStatusCondition(rd.Status.Conditions, cachev1.ConditionReady).Message).To(
		Equal(fmt.Sprintf("kubext could not connect to the Redis of %[1]s-1 (connection refused); primary %[1]s-0", key.Name)))
	f.condition(key, cachev1.ConditionDegraded, metav1.ConditionTrue, cachev1.ReasonMembersUnreachable)
	f.g.Expect(rd.Status.ReadyReplicas).To(Equal(int32(2)))
	f.g.Eventually(func() string { return f.podRole(key, 1) }, waitFor).Should(BeEmpty())

	// The primary's pod is deleted: the replica with the most data is promoted.
	servers.update(addrs[1], func(s *fakeServer) { s.down = false; s.state.Offset = 10 })
	servers.update(addrs[2], func(s *fakeServer) { s.state.Offset = 40 })
	servers.update(addrs[0], func(s *fakeServer) { s.down = true })
	f.g.Expect(k8s.Delete(f.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name + "-0"}})).To(Succeed())
	eventually(f, key, &cachev1.Redis{}, func(g Gomega, rd *cachev1.Redis) {
		g.Expect(rd.Status.Primary).To(Equal(key.Name + "-2"))
		g.Expect(rd.Status.Members[0].State).To(Equal(cachev1.MemberPending))
	})
	e := f.event(key, "Promoted")
	f.g.Expect(e.Type).To(Equal(corev1.EventTypeWarning))
	f.g.Expect(e.Note).To(Equal(fmt.Sprintf("Primary %[1]s-0 is gone (no address) and no replica is connected to it; "+
		"promoting %[1]s-2, the replica with the most data (replication offset 40)", key.Name)))
	f.g.Eventually(func() string { return servers.state(addrs[1]).PrimaryAddr }, waitFor).Should(Equal(addrs[2]))
	f.g.Eventually(func() []string { return []string{f.podRole(key, 1), f.podRole(key, 2)} }, waitFor).
		Should(Equal([]string{cachev1.RoleReplica, cachev1.RolePrimary}))
	// Until the StatefulSet recreates pod 0, two members are in service.
	eventually(f, key, &cachev1.Redis{}, func(g Gomega, rd *cachev1.Redis) {
		g.Expect(rd.Status.ReadyReplicas).To(Equal(int32(2)))
		c := meta.FindStatusCondition(rd.Status.Conditions, cachev1.ConditionReady)
		g.Expect(c.Reason).To(Equal(cachev1.ReasonSyncing))
		g.Expect(c.Message).To(Equal(fmt.Sprintf("Waiting for %[1]s-0 (pending); primary %[1]s-2", key.Name)))
	})
}

func TestMissingSecretIsReported(t *testing.T) {
	f := newFixture(t)
	name := "later-" + f.id
	key := f.redis("nosecret", cachev1.RedisSpec{Size: 1, PasswordSecretKeyRef: &cachev1.SecretKeyRef{Name: name}})
	rd := f.condition(key, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonSecretNotFound)
	f.g.Expect(meta.FindStatusCondition(rd.Status.Conditions, cachev1.ConditionReady).Message).To(ContainSubstring("Secret " + name + " (spec.passwordSecretKeyRef) does not exist"))
	f.get(key, &appsv1.StatefulSet{})

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{"password": []byte("pw")}}
	f.g.Expect(k8s.Create(f.ctx, secret)).To(Succeed())
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), secret) })
	f.condition(key, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonSyncing)
}

func TestObjectOfSameNameIsLeftAlone(t *testing.T) {
	f := newFixture(t)
	theirs := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken-" + f.id + "-primary"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}
	f.g.Expect(k8s.Create(f.ctx, theirs)).To(Succeed())
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), theirs) })

	key := f.redis("taken", size(1))
	rd := f.condition(key, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonObjectExists)
	f.g.Expect(meta.FindStatusCondition(rd.Status.Conditions, cachev1.ConditionReady).Message).To(
		Equal("Service " + theirs.Name + " exists and is not controlled by this Redis; delete or rename it, or rename the Redis"))
	got := f.get(client.ObjectKeyFromObject(theirs), &corev1.Service{})
	f.g.Expect(got.GetResourceVersion()).To(Equal(theirs.ResourceVersion))
}

// withoutWatch lets the manager's client, which reads from the cache, be
// wrapped by interceptor.NewClient.
type withoutWatch struct{ client.Client }

func (withoutWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("not supported")
}

// countWrites wraps the manager's client, counting every write it makes.
func countWrites(writes *atomic.Int64) client.Client {
	count := func() { writes.Add(1) }
	return interceptor.NewClient(withoutWatch{mgr.GetClient()}, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			count()
			return c.Create(ctx, o, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			count()
			return c.Update(ctx, o, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			count()
			return c.Patch(ctx, o, p, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, o runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			count()
			return c.Apply(ctx, o, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			count()
			return c.Delete(ctx, o, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, o client.Object, opts ...client.SubResourceUpdateOption) error {
			count()
			return c.SubResource(sub).Update(ctx, o, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			count()
			return c.SubResource(sub).Patch(ctx, o, p, opts...)
		},
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, o runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			count()
			return c.SubResource(sub).Apply(ctx, o, opts...)
		},
	})
}

func TestSteadyStateMakesNoWrites(t *testing.T) {
	f := newFixture(t)
	key := f.redis("steady", cachev1.RedisSpec{Size: 3,
		Persistence: &cachev1.Persistence{Size: resource.MustParse("2Gi")},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0.5"), corev1.ResourceMemory: resource.MustParse("1024Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
		},
	})
	f.members(key, 3, "")
	f.condition(key, cachev1.ConditionReady, metav1.ConditionTrue, cachev1.ReasonReplicating)
	f.g.Eventually(func() string { return f.podRole(key, 2) }, waitFor).Should(Equal(cachev1.RoleReplica))

	// Wait for the cache the controller reads to have caught up with the
	// last writes, so that it computes from the same state as the server.
	sts := f.get(key, &appsv1.StatefulSet{})
	rd := f.get(key, &cachev1.Redis{}).(*cachev1.Redis)
	f.g.Eventually(func(g Gomega) {
		for _, o := range []client.Object{rd, sts} {
			cached := o.DeepCopyObject().(client.Object)
			g.Expect(mgr.GetClient().Get(f.ctx, client.ObjectKeyFromObject(o), cached)).To(Succeed())
			g.Expect(cached.GetResourceVersion()).To(Equal(o.GetResourceVersion()))
		}
		pods := &corev1.PodList{}
		g.Expect(mgr.GetClient().List(f.ctx, pods, client.MatchingLabels{cachev1.LabelRedis: key.Name})).To(Succeed())
		for _, p := range pods.Items {
			g.Expect(p.Labels).To(HaveKey(cachev1.LabelRole))
		}
	}, waitFor).Should(Succeed())

	var writes atomic.Int64
	r := newReconciler(countWrites(&writes), "redis-test")
	for range 3 {
		res, err := r.Reconcile(f.ctx, reconcile.Request{NamespacedName: key})
		f.g.Expect(err).NotTo(HaveOccurred())
		f.g.Expect(res.RequeueAfter).To(Equal(resync))
	}
	f.g.Expect(writes.Load()).To(BeZero(), "a reconcile with nothing to change must not write")
	f.g.Expect(f.get(key, &appsv1.StatefulSet{}).GetResourceVersion()).To(Equal(sts.GetResourceVersion()))
	f.g.Expect(f.get(key, &cachev1.Redis{}).GetResourceVersion()).To(Equal(rd.ResourceVersion))

	// The counter counts: a write through the same client is seen.
	counting := countWrites(&writes)
	f.g.Expect(counting.Patch(f.ctx, sts, mergePatch(`{"metadata":{"annotations":{"test":"x"}}}`))).To(Succeed())
	f.g.Expect(writes.Load()).To(BeEquivalentTo(1))
}
