package redis

import (
	"context"
	"fmt"
	"regexp"
	"sync"
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
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
	"github.com/kubext/kubext/internal/redisrepl"
	"github.com/kubext/kubext/test/testenv"
)

const ns = "default"

// nextIP hands out pod IPs, unique across the tests sharing servers.
var nextIP atomic.Int32

// fixture adds to testenv.Fixture what the tests of Redis objects look at.
type fixture struct{ *testenv.Fixture }

func newFixture(t *testing.T) *fixture { return &fixture{testenv.NewFixture(t, k8s)} }

// redis creates a Redis and returns its key.
func (f *fixture) redis(name string, spec cachev1.RedisSpec) client.ObjectKey {
	f.T.Helper()
	return f.Create(&cachev1.Redis{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-" + f.ID}, Spec: spec})
}

// condition waits until the Redis's condition has the status and reason,
// for its current generation, and returns the Redis.
func (f *fixture) condition(key client.ObjectKey, typ string, status metav1.ConditionStatus, reason string) *cachev1.Redis {
	f.T.Helper()
	return testenv.Eventually(f.Fixture, key, &cachev1.Redis{}, func(g Gomega, rd *cachev1.Redis) {
		testenv.HasCondition(g, rd.Status.Conditions, typ, status, reason, rd.Generation)
		g.Expect(rd.Status.ObservedGeneration).To(Equal(rd.Generation))
	})
}

// event waits for an Event with the reason about the Redis.
func (f *fixture) event(key client.ObjectKey, reason string) *eventsv1.Event {
	f.T.Helper()
	return f.Event("Redis", key, reason)
}

// members plays the StatefulSet controller and the kubelet, which envtest
// does not run: it creates the Redis's pods 0 to n-1, running, each with
// an IP address where a fake Redis server answers, with the password the
// pod template's REDIS_PASSWORD comes from (none without it), as the
// kubelet would give it. It returns the addresses. Pod i is on nodes[i]
// when given.
func (f *fixture) members(key client.ObjectKey, n int, nodes ...string) []string {
	f.T.Helper()
	sts := testenv.Eventually(f.Fixture, key, &appsv1.StatefulSet{}, func(g Gomega, sts *appsv1.StatefulSet) { testenv.Applied(g, sts) })
	password := f.podPassword(sts)
	var addrs []string
	for i := range n {
		ip := nextIP.Add(1)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: key.Namespace, Name: fmt.Sprintf("%s-%d", key.Name, i), Labels: sts.Spec.Template.Labels,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))},
			},
			Spec: sts.Spec.Template.Spec,
		}
		if i < len(nodes) {
			pod.Spec.NodeName = nodes[i]
		}
		for _, claim := range sts.Spec.VolumeClaimTemplates {
			pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: claim.Name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim.Name + "-" + pod.Name}}})
		}
		f.Create(pod)
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.%d.%d.%d", ip>>16&255, ip>>8&255, ip&255)}
		addr := pod.Status.PodIP + ":6379"
		servers.start(addr, password)
		f.G.Expect(k8s.Status().Update(f.Ctx, pod)).To(Succeed())
		addrs = append(addrs, addr)
	}
	return addrs
}

// podPassword is the password the kubelet would give the members'
// redis-server: REDIS_PASSWORD of the pod template, from its Secret.
func (f *fixture) podPassword(sts *appsv1.StatefulSet) string {
	f.T.Helper()
	for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
		if e.Name != "REDIS_PASSWORD" {
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		secret := f.Get(client.ObjectKey{Namespace: sts.Namespace, Name: ref.Name}, &corev1.Secret{}).(*corev1.Secret)
		pw, ok := secret.Data[ref.Key]
		f.G.Expect(ok).To(BeTrue(), "Secret %s has no key %s", ref.Name, ref.Key)
		return string(pw)
	}
	return ""
}

func (f *fixture) podRole(key client.ObjectKey, i int) string {
	pod := &corev1.Pod{}
	f.Get(client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("%s-%d", key.Name, i)}, pod)
	return pod.Labels[cachev1.LabelRole]
}

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
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "auth-" + f.ID}, Data: map[string][]byte{"pw": []byte("s3cret")}}
	f.Create(secret)
	key := f.redis("cache", cachev1.RedisSpec{Size: 3,
		PasswordSecretKeyRef: &cachev1.SecretKeyRef{Name: secret.Name, Key: "pw"},
		Persistence:          &cachev1.Persistence{Size: resource.MustParse("1Gi"), StorageClassName: ptr.To("fast")},
		Resources:            corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}},
	})

	// No pods yet (envtest runs no StatefulSet controller): members pending.
	rd := f.condition(key, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonSyncing)
	f.G.Expect(rd.Spec.Image).To(Equal("redis:7.2.5"), "defaulted by the API server")
	f.G.Expect(rd.Status.Members).To(HaveLen(3))
	f.G.Expect(rd.Status.Members[2]).To(Equal(cachev1.RedisMember{Name: key.Name + "-2", State: cachev1.MemberPending}))
	f.G.Expect(rd.Status.Primary).To(BeEmpty())
	f.G.Expect(meta.FindStatusCondition(rd.Status.Conditions, cachev1.ConditionReady).Message).To(
		Equal(fmt.Sprintf("Waiting for %[1]s-0 (pending), %[1]s-1 (pending), %[1]s-2 (pending); no primary", key.Name)))

	sts := f.Get(key, &appsv1.StatefulSet{}).(*appsv1.StatefulSet)
	isControlledBy(f.G, sts, rd)
	f.G.Expect(sts.Spec.Replicas).To(HaveValue(Equal(int32(3))))
	f.G.Expect(sts.Spec.ServiceName).To(Equal(key.Name + "-headless"))
	f.G.Expect(sts.Spec.Selector.MatchLabels).To(Equal(map[string]string{cachev1.LabelRedis: key.Name}))
	c := sts.Spec.Template.Spec.Containers[0]
	f.G.Expect(c.Image).To(Equal("redis:7.2.5"))
	f.G.Expect(c.Args).To(ContainElements("--appendonly", "yes", "--requirepass", "$(REDIS_PASSWORD)", "--masterauth", "$(REDIS_PASSWORD)"))
	f.G.Expect(c.Env).To(HaveLen(2))
	f.G.Expect(c.Env[0].ValueFrom.SecretKeyRef.Name).To(Equal(secret.Name))
	f.G.Expect(c.Env[0].ValueFrom.SecretKeyRef.Key).To(Equal("pw"))
	f.G.Expect(c.Resources.Requests.Memory().String()).To(Equal("256Mi"))
	f.G.Expect(sts.Spec.VolumeClaimTemplates).To(HaveLen(1))
	claim := sts.Spec.VolumeClaimTemplates[0].Spec
	f.G.Expect(claim.StorageClassName).To(HaveValue(Equal("fast")))
	f.G.Expect(claim.Resources.Requests.Storage().String()).To(Equal("1Gi"))

	for name, role := range map[string]string{"-headless": "", "-primary": cachev1.RolePrimary, "-replicas": cachev1.RoleReplica} {
		svc := f.Get(client.ObjectKey{Namespace: ns, Name: key.Name + name}, &corev1.Service{}).(*corev1.Service)
		isControlledBy(f.G, svc, rd)
		f.G.Expect(svc.Spec.Ports).To(HaveLen(1))
		f.G.Expect(svc.Spec.Ports[0].Port).To(Equal(int32(6379)))
		f.G.Expect(svc.Spec.Selector).To(HaveKeyWithValue(cachev1.LabelRedis, key.Name))
		if role == "" {
			f.G.Expect(svc.Spec.ClusterIP).To(Equal(corev1.ClusterIPNone))
			f.G.Expect(svc.Spec.Selector).NotTo(HaveKey(cachev1.LabelRole))
		} else {
			f.G.Expect(svc.Spec.Selector).To(HaveKeyWithValue(cachev1.LabelRole, role))
		}
	}
	// Two budgets over disjoint pods (the Eviction API refuses a pod that
	// two cover): the primary, which no drain may take while it has
	// replicas, and the others, one at a time.
	for name, want := range map[string]struct {
		min int
		op  metav1.LabelSelectorOperator
	}{key.Name: {1, metav1.LabelSelectorOpNotIn}, key.Name + "-primary": {1, metav1.LabelSelectorOpIn}} {
		pdb := f.Get(client.ObjectKey{Namespace: ns, Name: name}, &policyv1.PodDisruptionBudget{}).(*policyv1.PodDisruptionBudget)
		isControlledBy(f.G, pdb, rd)
		f.G.Expect(pdb.Spec.MaxUnavailable).To(BeNil(), name)
		f.G.Expect(pdb.Spec.MinAvailable.IntValue()).To(Equal(want.min), name)
		f.G.Expect(*pdb.Spec.UnhealthyPodEvictionPolicy).To(Equal(policyv1.AlwaysAllow), name)
		f.G.Expect(pdb.Spec.Selector.MatchLabels).To(Equal(map[string]string{cachev1.LabelRedis: key.Name}), name)
		f.G.Expect(pdb.Spec.Selector.MatchExpressions).To(Equal([]metav1.LabelSelectorRequirement{
			{Key: cachev1.LabelRole, Operator: want.op, Values: []string{cachev1.RolePrimary}}}), name)
	}
	f.event(key, "Created")
}

func TestSizePatchScalesTheStatefulSet(t *testing.T) {
	f := newFixture(t)
	key := f.redis("scale", size(3))
	f.condition(key, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonSyncing)

	// The seed's `kubectl patch redis redis-cache -p '{"spec":{"size": 4}}' --type=merge`.
	rd := &cachev1.Redis{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}}
	f.G.Expect(k8s.Patch(f.Ctx, rd, testenv.MergePatch(`{"spec":{"size": 4}}`))).To(Succeed())
	testenv.Eventually(f.Fixture, key, &appsv1.StatefulSet{}, func(g Gomega, sts *appsv1.StatefulSet) {
		g.Expect(sts.Spec.Replicas).To(HaveValue(Equal(int32(4))))
	})
	rd = f.condition(key, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonSyncing)
	f.G.Expect(rd.Status.Members).To(HaveLen(4))
	f.event(key, "Updated")

	// `kubectl scale redis scale --replicas=2` goes through the scale subresource.
	scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 2}}
	f.G.Expect(k8s.SubResource("scale").Update(f.Ctx, rd, client.WithSubResourceBody(scale))).To(Succeed())
	testenv.Eventually(f.Fixture, key, &appsv1.StatefulSet{}, func(g Gomega, sts *appsv1.StatefulSet) {
		g.Expect(sts.Spec.Replicas).To(HaveValue(Equal(int32(2))))
	})
}

func TestManualEditIsHealed(t *testing.T) {
	f := newFixture(t)
	key := f.redis("heal", size(3))
	f.condition(key, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonSyncing)
	sts := f.Get(key, &appsv1.StatefulSet{}).(*appsv1.StatefulSet)

	// What `kubectl edit statefulset` sends: a patch under another field manager.
	f.G.Expect(k8s.Patch(f.Ctx, sts, testenv.MergePatch(`{"spec":{"replicas":9,"template":{"spec":{"containers":[{"name":"redis","image":"redis:latest"}]}}}}`),
		client.FieldOwner("kubectl-edit"))).To(Succeed())
	testenv.Eventually(f.Fixture, key, &appsv1.StatefulSet{}, func(g Gomega, sts *appsv1.StatefulSet) {
		g.Expect(sts.Spec.Replicas).To(HaveValue(Equal(int32(3))))
		g.Expect(sts.Spec.Template.Spec.Containers[0].Image).To(Equal("redis:7.2.5"))
	})
	f.event(key, "Healed")

	// A field kubext does not manage is left as the user set it.
	f.G.Expect(k8s.Patch(f.Ctx, sts, testenv.MergePatch(`{"spec":{"minReadySeconds":5}}`), client.FieldOwner("kubectl-edit"))).To(Succeed())
	f.G.Consistently(func(g Gomega) {
		g.Expect(k8s.Get(f.Ctx, key, sts)).To(Succeed())
		g.Expect(sts.Spec.MinReadySeconds).To(Equal(int32(5)))
	}, time.Second).Should(Succeed())

	// The primary Service's selector edited, the PDB deleted: both come back.
	primary := client.ObjectKey{Namespace: ns, Name: key.Name + "-primary"}
	svc := f.Get(primary, &corev1.Service{}).(*corev1.Service)
	f.G.Expect(k8s.Patch(f.Ctx, svc, testenv.MergePatch(`{"spec":{"selector":{"cache.kubext.io/role":"replica"}}}`), client.FieldOwner("kubectl-edit"))).To(Succeed())
	pdb := f.Get(key, &policyv1.PodDisruptionBudget{}).(*policyv1.PodDisruptionBudget)
	f.G.Expect(k8s.Delete(f.Ctx, pdb)).To(Succeed())
	testenv.Eventually(f.Fixture, primary, &corev1.Service{}, func(g Gomega, svc *corev1.Service) {
		g.Expect(svc.Spec.Selector).To(HaveKeyWithValue(cachev1.LabelRole, cachev1.RolePrimary))
	})
	testenv.Eventually(f.Fixture, key, &policyv1.PodDisruptionBudget{}, func(g Gomega, got *policyv1.PodDisruptionBudget) {
		g.Expect(got.UID).NotTo(Equal(pdb.UID))
	})
}

func TestReplicationFollowsObservations(t *testing.T) {
	f := newFixture(t)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "auth-" + f.ID}, Data: map[string][]byte{"password": []byte("pw")}}
	f.Create(secret)
	key := f.redis("repl", cachev1.RedisSpec{Size: 3, PasswordSecretKeyRef: &cachev1.SecretKeyRef{Name: secret.Name}})
	addrs := f.members(key, 3)

	// Three fresh servers: the first becomes primary, the others follow it.
	rd := f.condition(key, cachev1.ConditionReady, metav1.ConditionTrue, cachev1.ReasonReplicating)
	f.G.Expect(rd.Status.Primary).To(Equal(key.Name + "-0"))
	f.G.Expect(rd.Status.ReadyReplicas).To(Equal(int32(3)))
	f.G.Expect(rd.Status.Members).To(Equal([]cachev1.RedisMember{
		{Name: key.Name + "-0", State: cachev1.MemberPrimary},
		{Name: key.Name + "-1", State: cachev1.MemberReplica},
		{Name: key.Name + "-2", State: cachev1.MemberReplica},
	}))
	f.G.Expect(meta.FindStatusCondition(rd.Status.Conditions, cachev1.ConditionReady).Message).To(Equal("Primary " + key.Name + "-0 and 2 replica(s) in service"))
	f.condition(key, cachev1.ConditionDegraded, metav1.ConditionFalse, cachev1.ReasonAsExpected)
	f.G.Expect(servers.state(addrs[1]).PrimaryAddr).To(Equal(addrs[0]))
	f.G.Expect(servers.state(addrs[2]).PrimaryAddr).To(Equal(addrs[0]))
	f.G.Eventually(func() []string {
		return []string{f.podRole(key, 0), f.podRole(key, 1), f.podRole(key, 2)}
	}, testenv.WaitFor).Should(Equal([]string{cachev1.RolePrimary, cachev1.RoleReplica, cachev1.RoleReplica}))
	f.event(key, "Elected")
	f.event(key, "Repointed")

	// The StatefulSet's own status (envtest runs no StatefulSet controller).
	sts := f.Get(key, &appsv1.StatefulSet{}).(*appsv1.StatefulSet)
	orig := sts.DeepCopy()
	sts.Status.Replicas = 3
	f.G.Expect(k8s.Status().Patch(f.Ctx, sts, client.MergeFrom(orig))).To(Succeed())
	testenv.Eventually(f.Fixture, key, &cachev1.Redis{}, func(g Gomega, rd *cachev1.Redis) { g.Expect(rd.Status.Replicas).To(Equal(int32(3))) })

	// Someone makes a replica primary by hand: it is pointed back.
	servers.update(addrs[2], func(s *fakeServer) { s.state = redisrepl.State{Role: redisrepl.RolePrimary, Offset: 5} })
	rd = f.Get(key, &cachev1.Redis{}).(*cachev1.Redis)
	f.G.Expect(k8s.Patch(f.Ctx, rd, testenv.MergePatch(`{"metadata":{"annotations":{"poke":"1"}}}`))).To(Succeed())
	f.G.Eventually(func() string { return servers.state(addrs[2]).PrimaryAddr }, testenv.WaitFor).Should(Equal(addrs[0]))

	// A replica cannot be reached: reported, not waited for.
	servers.update(addrs[1], func(s *fakeServer) { s.down = true })
	f.G.Expect(k8s.Patch(f.Ctx, rd, testenv.MergePatch(`{"metadata":{"annotations":{"poke":"2"}}}`))).To(Succeed())
	rd = f.condition(key, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonMembersUnreachable)
	f.G.Expect(meta.FindStatusCondition(rd.Status.Conditions, cachev1.ConditionReady).Message).To(
		Equal(fmt.Sprintf("kubext could not connect to the Redis of %[1]s-1 (connection refused); primary %[1]s-0", key.Name)))
	f.condition(key, cachev1.ConditionDegraded, metav1.ConditionTrue, cachev1.ReasonMembersUnreachable)
	f.G.Expect(rd.Status.ReadyReplicas).To(Equal(int32(2)))
	f.G.Eventually(func() string { return f.podRole(key, 1) }, testenv.WaitFor).Should(BeEmpty())

	// The primary's pod is deleted: the replica with the most data is promoted.
	servers.update(addrs[1], func(s *fakeServer) { s.down = false; s.state.Offset = 10 })
	servers.update(addrs[2], func(s *fakeServer) { s.state.Offset = 40 })
	servers.update(addrs[0], func(s *fakeServer) { s.down = true })
	f.G.Expect(k8s.Delete(f.Ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name + "-0"}})).To(Succeed())
	testenv.Eventually(f.Fixture, key, &cachev1.Redis{}, func(g Gomega, rd *cachev1.Redis) {
		g.Expect(rd.Status.Primary).To(Equal(key.Name + "-2"))
		g.Expect(rd.Status.Members[0].State).To(Equal(cachev1.MemberPending))
	})
	e := f.event(key, "Promoted")
	f.G.Expect(e.Type).To(Equal(corev1.EventTypeWarning))
	// The primary is seen down (connection refused) before or after its
	// pod goes (no address), depending on when the once-a-second
	// observation comes: either is the loss.
	f.G.Expect(e.Note).To(MatchRegexp(`^Primary %[1]s-0 is gone \((no address|connection refused)\) and no replica is connected to it; `+
		`promoting %[1]s-2, the replica with the most data \(replication offset 40\)$`, regexp.QuoteMeta(key.Name)))
	f.G.Eventually(func() string { return servers.state(addrs[1]).PrimaryAddr }, testenv.WaitFor).Should(Equal(addrs[2]))
	f.G.Eventually(func() []string { return []string{f.podRole(key, 1), f.podRole(key, 2)} }, testenv.WaitFor).
		Should(Equal([]string{cachev1.RoleReplica, cachev1.RolePrimary}))
	// Until the StatefulSet recreates pod 0, two members are in service.
	testenv.Eventually(f.Fixture, key, &cachev1.Redis{}, func(g Gomega, rd *cachev1.Redis) {
		g.Expect(rd.Status.ReadyReplicas).To(Equal(int32(2)))
		c := meta.FindStatusCondition(rd.Status.Conditions, cachev1.ConditionReady)
		g.Expect(c.Reason).To(Equal(cachev1.ReasonSyncing))
		g.Expect(c.Message).To(Equal(fmt.Sprintf("Waiting for %[1]s-0 (pending); primary %[1]s-2", key.Name)))
	})
}

func TestMissingSecretIsReported(t *testing.T) {
	f := newFixture(t)
	name := "later-" + f.ID
	key := f.redis("nosecret", cachev1.RedisSpec{Size: 1, PasswordSecretKeyRef: &cachev1.SecretKeyRef{Name: name}})
	rd := f.condition(key, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonSecretNotFound)
	f.G.Expect(meta.FindStatusCondition(rd.Status.Conditions, cachev1.ConditionReady).Message).To(ContainSubstring("Secret " + name + " (spec.passwordSecretKeyRef) does not exist"))
	f.Get(key, &appsv1.StatefulSet{})

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{"password": []byte("pw")}}
	f.Create(secret)
	f.condition(key, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonSyncing)
}

func TestObjectOfSameNameIsLeftAlone(t *testing.T) {
	f := newFixture(t)
	theirs := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken-" + f.ID + "-primary"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}
	f.Create(theirs)

	key := f.redis("taken", size(1))
	rd := f.condition(key, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonObjectExists)
	f.G.Expect(meta.FindStatusCondition(rd.Status.Conditions, cachev1.ConditionReady).Message).To(
		Equal("Service " + theirs.Name + " exists and is not controlled by this Redis; delete or rename it, or rename the Redis"))
	got := f.Get(client.ObjectKeyFromObject(theirs), &corev1.Service{})
	f.G.Expect(got.GetResourceVersion()).To(Equal(theirs.ResourceVersion))
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
	f.members(key, 3)
	f.condition(key, cachev1.ConditionReady, metav1.ConditionTrue, cachev1.ReasonReplicating)
	f.G.Eventually(func() string { return f.podRole(key, 2) }, testenv.WaitFor).Should(Equal(cachev1.RoleReplica))

	// Wait for the cache the controller reads to have caught up with the
	// last writes, so that it computes from the same state as the server.
	sts := f.Get(key, &appsv1.StatefulSet{})
	rd := f.Get(key, &cachev1.Redis{}).(*cachev1.Redis)
	f.WaitForCache(mgr.GetClient(), rd, sts)
	f.G.Eventually(func(g Gomega) {
		pods := &corev1.PodList{}
		g.Expect(mgr.GetClient().List(f.Ctx, pods, client.MatchingLabels{cachev1.LabelRedis: key.Name})).To(Succeed())
		for _, p := range pods.Items {
			g.Expect(p.Labels).To(HaveKey(cachev1.LabelRole))
		}
	}, testenv.WaitFor).Should(Succeed())

	var writes atomic.Int64
	r := newReconciler(mgr, testenv.CountWrites(mgr.GetClient(), &writes), "redis-test")
	for range 3 {
		res, err := r.Reconcile(f.Ctx, reconcile.Request{NamespacedName: key})
		f.G.Expect(err).NotTo(HaveOccurred())
		f.G.Expect(res.RequeueAfter).To(Equal(observeEvery))
	}
	f.G.Expect(writes.Load()).To(BeZero(), "a reconcile with nothing to change must not write")
	f.G.Expect(f.Get(key, &appsv1.StatefulSet{}).GetResourceVersion()).To(Equal(sts.GetResourceVersion()))
	f.G.Expect(f.Get(key, &cachev1.Redis{}).GetResourceVersion()).To(Equal(rd.ResourceVersion))

	// The counter counts: a write through the same client is seen.
	counting := testenv.CountWrites(mgr.GetClient(), &writes)
	f.G.Expect(counting.Patch(f.Ctx, sts, testenv.MergePatch(`{"metadata":{"annotations":{"test":"x"}}}`))).To(Succeed())
	f.G.Expect(writes.Load()).To(BeEquivalentTo(1))
}

// A drain cordons the node first: a primary there hands over (FAILOVER,
// which waits for the replica to catch up) to a replica on a node that
// stays, and its role label moves, so that its budget no longer holds the
// eviction back. A replica on a cordoned node is not made primary, and
// the cordon lifted changes nothing back.
func TestCordonedPrimaryHandsOver(t *testing.T) {
	f := newFixture(t)
	var nodes []string
	for _, n := range []string{"a", "b", "c"} {
		nodes = append(nodes, f.Create(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "redis-" + n + "-" + f.ID}}).Name)
	}
	key := f.redis("drain", size(3))
	addrs := f.members(key, 3, nodes...)
	rd := f.condition(key, cachev1.ConditionReady, metav1.ConditionTrue, cachev1.ReasonReplicating)
	f.G.Expect(rd.Status.Primary).To(Equal(key.Name + "-0"))
	servers.update(addrs[1], func(s *fakeServer) { s.state.Offset = 7 })
	servers.update(addrs[0], func(s *fakeServer) { s.state.Offset = 9 })

	cordon := func(i int, on bool) {
		node := &corev1.Node{}
		f.Get(client.ObjectKey{Name: nodes[i]}, node)
		f.G.Expect(k8s.Patch(f.Ctx, node, testenv.MergePatch(fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)))).To(Succeed())
	}
	// The replica with the most data is on a cordoned node too: the
	// handover goes to the staying one.
	cordon(1, true)
	cordon(0, true)
	testenv.Eventually(f.Fixture, key, &cachev1.Redis{}, func(g Gomega, rd *cachev1.Redis) {
		g.Expect(rd.Status.Primary).To(Equal(key.Name + "-2"))
	})
	e := f.event(key, "HandingOver")
	f.G.Expect(e.Note).To(Equal(fmt.Sprintf("Primary %[1]s-0 is about to be evicted (node %[2]s is cordoned); handing over to %[1]s-2 once it has caught up", key.Name, nodes[0])))
	f.G.Expect(servers.state(addrs[2]).Role).To(Equal(redisrepl.RolePrimary))
	f.G.Expect(servers.state(addrs[2]).Offset).To(Equal(int64(9)), "the handover target has caught up")
	f.G.Eventually(func() string { return servers.state(addrs[1]).PrimaryAddr }, testenv.WaitFor).Should(Equal(addrs[2]))
	f.G.Eventually(func() []string {
		return []string{f.podRole(key, 0), f.podRole(key, 1), f.podRole(key, 2)}
	}, testenv.WaitFor).Should(Equal([]string{cachev1.RoleReplica, cachev1.RoleReplica, cachev1.RolePrimary}))
	f.condition(key, cachev1.ConditionReady, metav1.ConditionTrue, cachev1.ReasonReplicating)

	cordon(0, false)
	cordon(1, false)
	rd = f.Get(key, &cachev1.Redis{}).(*cachev1.Redis)
	f.G.Expect(k8s.Patch(f.Ctx, rd, testenv.MergePatch(`{"metadata":{"annotations":{"poke":"1"}}}`))).To(Succeed())
	f.G.Consistently(func() string {
		got := &cachev1.Redis{}
		f.G.Expect(k8s.Get(f.Ctx, key, got)).To(Succeed())
		return got.Status.Primary
	}, 2*time.Second, 200*time.Millisecond).Should(Equal(key.Name + "-2"))
}

// observing wraps a client of the fake servers and records the members it
// is asked to observe.
type observing struct {
	redisrepl.Client
	record func(redisrepl.Member)
}

func (o observing) Observe(ctx context.Context, m redisrepl.Member) (redisrepl.State, error) {
	o.record(m)
	return o.Client.Observe(ctx, m)
}

// A primary that kubext cannot reach is observed again at once rather than
// a second later, and dialled briefly, until it answers: each round may be
// the one that finds its replicas' links down. While its replicas still
// hear it, nothing is promoted.
func TestUnansweredPrimaryIsObservedAtOnce(t *testing.T) {
	f := newFixture(t)
	key := f.redis("urgent", size(2))
	addrs := f.members(key, 2)
	rd := f.condition(key, cachev1.ConditionReady, metav1.ConditionTrue, cachev1.ReasonReplicating)
	f.G.Expect(rd.Status.Primary).To(Equal(key.Name + "-0"))
	f.G.Eventually(func() string { return f.podRole(key, 0) }, testenv.WaitFor).Should(Equal(cachev1.RolePrimary))

	// A reconciler of its own, called directly, whose observations of the
	// primary are recorded.
	var mu sync.Mutex
	var asked []redisrepl.Member
	r := newReconciler(mgr, mgr.GetClient(), "redis-test")
	r.Connect = func(password string) redisrepl.Client {
		return observing{servers.connect(password), func(m redisrepl.Member) {
			if m.Addr == addrs[0] {
				mu.Lock()
				defer mu.Unlock()
				asked = append(asked, m)
			}
		}}
	}
	// round reconciles once, after the cache has the status of the last
	// round, and returns when it asks to be called again and whether it
	// dialled the primary as one that did not answer last time.
	round := func() (time.Duration, bool) {
		t.Helper()
		f.WaitForCache(mgr.GetClient(), f.Get(key, &cachev1.Redis{}))
		res, err := r.Reconcile(f.Ctx, reconcile.Request{NamespacedName: key})
		f.G.Expect(err).NotTo(HaveOccurred())
		mu.Lock()
		defer mu.Unlock()
		f.G.Expect(asked).NotTo(BeEmpty())
		return res.RequeueAfter, asked[len(asked)-1].Unanswered
	}
	f.G.Expect(round()).To(Equal(observeEvery))

	servers.update(addrs[0], func(s *fakeServer) { s.cut = true })
	after, unanswered := round()
	f.G.Expect(after).To(Equal(urgentPoll), "the primary did not answer")
	f.G.Expect(unanswered).To(BeFalse(), "it answered the round before: the usual dial")
	for range 3 {
		after, unanswered = round()
		f.G.Expect(after).To(Equal(urgentPoll))
		f.G.Expect(unanswered).To(BeTrue(), "it did not answer last time: a brief dial")
	}
	// Its replicas still hear it: it stays primary, nobody is promoted.
	rd = f.condition(key, cachev1.ConditionReady, metav1.ConditionTrue, cachev1.ReasonReplicating)
	f.G.Expect(rd.Status.Primary).To(Equal(key.Name + "-0"))
	f.G.Expect(servers.state(addrs[1]).Role).To(Equal(redisrepl.RoleReplica))

	// It answers again: the usual pace, and the usual dial from the next
	// round on.
	servers.update(addrs[0], func(s *fakeServer) { s.cut = false })
	after, unanswered = round()
	f.G.Expect(after).To(Equal(observeEvery))
	f.G.Expect(unanswered).To(BeTrue())
	_, unanswered = round()
	f.G.Expect(unanswered).To(BeFalse())
	f.condition(key, cachev1.ConditionReady, metav1.ConditionTrue, cachev1.ReasonReplicating)
}
