package deployed

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	stablev1 "github.com/kubext/kubext/api/stable/v1"
)

// managerUser is the deployed manager's service account.
const managerUser = "system:serviceaccount:kubext-system:kubext-controller-manager"

func newCronTab(name string) *stablev1.CronTab {
	return &stablev1.CronTab{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec:       stablev1.CronTabSpec{CronSpec: "*/5 * * * *", Image: "registry.k8s.io/pause:3.10"},
	}
}

// waitScheduled waits until the deployed manager has made the CronTab's
// CronJob and says so.
func waitScheduled(g *WithT, c client.Client, ct *stablev1.CronTab) {
	g.Eventually(func(g Gomega) {
		cj := &batchv1.CronJob{}
		g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(ct), cj)).To(Succeed())
		g.Expect(metav1.IsControlledBy(cj, ct)).To(BeTrue())
		g.Expect(cj.Spec.Schedule).To(Equal(ct.Spec.CronSpec))
		got := &stablev1.CronTab{}
		g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(ct), got)).To(Succeed())
		ready := meta.FindStatusCondition(got.Status.Conditions, stablev1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(stablev1.ReasonScheduled), ready.Message)
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
}

// An application through the deployed manager: a CronTab gets its CronJob.
func TestDeployedCronTabGetsItsCronJob(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	c := adminClient(t)
	ct := newCronTab("deployed")
	g.Expect(c.Create(context.Background(), ct)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), ct) })
	g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(ct), ct)).To(Succeed())
	waitScheduled(g, c, ct)
}

// The installed RBAC is what the manager runs with: without the rule for
// CronJobs in its ClusterRole, a CronTab fails with the API server's
// forbidden error for the manager's service account; with the rule back,
// it is scheduled.
func TestDeployedManagerNeedsItsRBACRule(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	ctx := context.Background()
	c := adminClient(t)
	role := &rbacv1.ClusterRole{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: "kubext-manager-role"}, role)).To(Succeed())
	original := role.DeepCopy()
	var kept []rbacv1.PolicyRule
	removed := 0
	for _, r := range role.Rules {
		if len(r.APIGroups) == 1 && r.APIGroups[0] == "batch" && len(r.Resources) == 1 && r.Resources[0] == "cronjobs" {
			removed++
			continue
		}
		kept = append(kept, r)
	}
	g.Expect(removed).To(Equal(1), "the installed role has one rule for CronJobs")
	role.Rules = kept
	g.Expect(c.Update(ctx, role)).To(Succeed())
	restored := false
	restore := func() {
		if restored {
			return
		}
		cur := &rbacv1.ClusterRole{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: role.Name}, cur)).To(Succeed())
		cur.Rules = original.Rules
		g.Expect(c.Update(ctx, cur)).To(Succeed())
		restored = true
	}
	t.Cleanup(restore)

	ct := newCronTab("deployed-forbidden")
	g.Expect(c.Create(ctx, ct)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(context.Background(), ct) })
	g.Eventually(func(g Gomega) {
		got := &stablev1.CronTab{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(ct), got)).To(Succeed())
		ready := meta.FindStatusCondition(got.Status.Conditions, stablev1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Message).To(And(ContainSubstring("forbidden"), ContainSubstring(managerUser)))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(ct), &batchv1.CronJob{})).NotTo(Succeed())

	restore()
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(ct), ct)).To(Succeed())
	waitScheduled(g, c, ct)
}
