package redis

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
	"github.com/kubext/kubext/test/testenv"
)

// A Redis that opts out of the password (authentication None) gets none:
// no Secret, no requirepass, protected mode off (it would refuse every
// client from another pod), and the controller talks to its members
// without one.
func TestAuthenticationNoneGeneratesNothing(t *testing.T) {
	f := newFixture(t)
	key := f.redis("open", cachev1.RedisSpec{Size: 2, Authentication: cachev1.AuthenticationNone})
	sts := testenv.Eventually(f.Fixture, key, &appsv1.StatefulSet{}, func(g Gomega, sts *appsv1.StatefulSet) { testenv.Applied(g, sts) })
	c := sts.Spec.Template.Spec.Containers[0]
	f.G.Expect(c.Env).To(BeEmpty())
	f.G.Expect(c.Args).NotTo(ContainElement("--requirepass"))
	f.G.Expect(argValue(c.Args, "--protected-mode")).To(Equal("no"))
	f.members(key, 2)
	rd := f.condition(key, cachev1.ConditionReady, metav1.ConditionTrue, cachev1.ReasonReplicating)
	f.G.Expect(rd.Status.PasswordSecretKeyRef).To(BeNil())
	err := k8s.Get(f.Ctx, client.ObjectKey{Namespace: ns, Name: key.Name + "-auth"}, &corev1.Secret{})
	f.G.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a Secret was generated: %v", err)
}

// A Secret that has the generated one's name and is not the Redis's is
// never used nor changed: its password may be known to whoever made it.
func TestGeneratedSecretNameTaken(t *testing.T) {
	f := newFixture(t)
	name := "taken-" + f.ID
	theirs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-auth"}, Data: map[string][]byte{"password": []byte("known")}}
	f.Create(theirs)
	key := f.redis("taken", size(1))
	f.G.Expect(key.Name).To(Equal(name))
	rd := f.condition(key, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonObjectExists)
	f.G.Expect(meta.FindStatusCondition(rd.Status.Conditions, cachev1.ConditionReady).Message).To(Equal(
		"Secret " + theirs.Name + " exists and is not controlled by this Redis; delete or rename it, or name it in spec.passwordSecretKeyRef"))
	got := f.Get(client.ObjectKeyFromObject(theirs), &corev1.Secret{})
	f.G.Expect(got.GetResourceVersion()).To(Equal(theirs.ResourceVersion))
	f.G.Expect(k8s.Get(f.Ctx, key, &appsv1.StatefulSet{})).NotTo(Succeed(), "members started with a password kubext did not make")

	// Deleted, it is replaced by a generated one: at the next look (within
	// a minute, Secrets are not watched) or, here, at once on a change of
	// the Redis.
	f.G.Expect(k8s.Delete(f.Ctx, theirs)).To(Succeed())
	f.G.Expect(k8s.Patch(f.Ctx, rd, testenv.MergePatch(`{"metadata":{"annotations":{"example.com/touched":"yes"}}}`))).To(Succeed())
	secret := testenv.Eventually(f.Fixture, client.ObjectKeyFromObject(theirs), &corev1.Secret{}, func(g Gomega, s *corev1.Secret) {
		g.Expect(metav1.IsControlledBy(s, rd)).To(BeTrue())
	})
	f.G.Expect(string(secret.Data["password"])).NotTo(Equal("known"))
	// The members start once the Secret is there: the same reconcile
	// creates them just after, so they may not be there yet.
	f.G.Eventually(func() error { return k8s.Get(f.Ctx, key, &appsv1.StatefulSet{}) }, testenv.WaitFor).Should(Succeed())
}

// A Redis that names its Secret keeps it: nothing is generated, and the
// status names the Secret in use.
func TestReferencedSecretIsUsed(t *testing.T) {
	f := newFixture(t)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine-" + f.ID}, Data: map[string][]byte{"pw": []byte("s3cret")}}
	f.Create(secret)
	ref := &cachev1.SecretKeyRef{Name: secret.Name, Key: "pw"}
	key := f.redis("mine", cachev1.RedisSpec{Size: 2, PasswordSecretKeyRef: ref})
	f.members(key, 2)
	rd := f.condition(key, cachev1.ConditionReady, metav1.ConditionTrue, cachev1.ReasonReplicating)
	f.G.Expect(rd.Status.PasswordSecretKeyRef).To(Equal(ref))
	sts := f.Get(key, &appsv1.StatefulSet{}).(*appsv1.StatefulSet)
	f.G.Expect(argValue(sts.Spec.Template.Spec.Containers[0].Args, "--protected-mode")).To(Equal("yes"))
	f.G.Consistently(func() bool {
		return apierrors.IsNotFound(k8s.Get(f.Ctx, client.ObjectKey{Namespace: ns, Name: key.Name + "-auth"}, &corev1.Secret{}))
	}, time.Second).Should(BeTrue(), "a password was generated for a Redis that names its own")
}
