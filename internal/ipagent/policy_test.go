package ipagent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gstruct"
	"github.com/onsi/gomega/types"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/agentkube"
	"github.com/kubext/kubext/internal/ipcond"
	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/testenv"
)

// install is where and under what names a user installs kubext: the
// namespace and namePrefix of their kustomize overlay.
type install struct {
	namespace, namePrefix string
	// dir is the kustomization that renders it, relative to the repository
	// root ("" = an overlay of config/ip-agent and config/policy with
	// namespace and namePrefix).
	dir string
}

// The admission policy in config/policy/ip-agent.yaml lets an ip-agent
// speak for its own node only, whatever namespace and name prefix kubext is
// installed with: as config/default installs it, and as an overlay with
// other names would.
func TestAgentMaySpeakOnlyForItsOwnNode(t *testing.T) {
	for _, in := range []install{
		{namespace: "kubext-system", namePrefix: "kubext-", dir: "config/default"},
		{namespace: "acme-system", namePrefix: "acme-"},
	} {
		t.Run(in.namePrefix+"ip-agent", func(t *testing.T) { testAgentPolicy(t, in) })
	}
}

// Nodes of their own: the agent the suite runs (for thisNode) must not act
// on these tests' IPs.
const node1, node2 = "node-1", "node-2"

func testAgentPolicy(t *testing.T, in install) {
	g := NewWithT(t)
	ctx := context.Background()
	policy := in.namePrefix + "ip-agent-own-node.ip.kubext.io"
	sa := in.namePrefix + "ip-agent"
	installAgentAccess(t, in)
	agent := func(node string) client.Client { return agentClient(t, in, node) }
	own, other := agent(node1), agent(node2)
	// refused expects err to be the policy's refusal, saying msg.
	refused := func(g Gomega, err error, msg string) {
		g.Expect(err).To(MatchError(And(ContainSubstring("ValidatingAdmissionPolicy '"+policy+"'"), ContainSubstring(msg))))
	}

	// An IP placed on node-1, as the manager writes it.
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	placed := ipv1.IPStatus{
		Address: "192.0.2.99", Pool: "pool-a", Assigned: true, Claimed: true,
		Node: node1, Pod: "default/app", Standbys: []string{"default/app-2"},
		Original:           &ipv1.IPSpec{Address: "192.0.2.99", Pool: "pool-a"},
		LastMoveTime:       &now,
		ObservedGeneration: 1,
		Conditions: []metav1.Condition{{Type: ipv1.ConditionReady, Status: metav1.ConditionFalse,
			Reason: ipv1.ReasonWaitingForAgent, Message: "waiting for the agent", LastTransitionTime: now, ObservedGeneration: 1}},
	}
	ip := newPolicyIP(t, in.namePrefix+"policy-ip", "192.0.2.99")
	elsewhere := newPolicyIP(t, in.namePrefix+"policy-ip-elsewhere", "192.0.2.98")
	// set writes status as the manager would (attachedNode and attachedPod
	// as a test needs them).
	set := func(name string, s ipv1.IPStatus) {
		t.Helper()
		cur := &ipv1.IP{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, cur)).To(Succeed())
		cur.Status = *s.DeepCopy()
		g.Expect(k8s.Status().Update(ctx, cur)).To(Succeed())
	}
	// patch changes the status as c, with a merge patch of the change.
	patch := func(c client.Client, name string, change func(*ipv1.IPStatus)) error {
		cur := &ipv1.IP{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, cur); err != nil {
			return err
		}
		orig := cur.DeepCopy()
		change(&cur.Status)
		return c.Status().Patch(ctx, cur, client.MergeFrom(orig))
	}
	status := func(name string) ipv1.IPStatus {
		cur := &ipv1.IP{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, cur)).To(Succeed())
		return cur.Status
	}
	// same matches a status equal to want as the API server stores it.
	same := func(want ipv1.IPStatus) types.GomegaMatcher {
		return WithTransform(func(s ipv1.IPStatus) ([]byte, error) { return json.Marshal(s) }, MatchJSON(must(json.Marshal(want))))
	}
	attached := func(s ipv1.IPStatus, node, pod string) ipv1.IPStatus {
		s.AttachedNode, s.AttachedPod = node, pod
		return s
	}

	// Objects the subtests share are deleted when the whole test ends.
	outer := t
	t.Run("every step of the agent protocol", func(t *testing.T) {
		g := NewWithT(t)
		set(ip.Name, placed)
		g.Expect(patch(own, ip.Name, func(s *ipv1.IPStatus) { s.AttachedNode = node1 })).To(Succeed(), "attach before programming")
		g.Expect(patch(own, ip.Name, func(s *ipv1.IPStatus) { s.AttachedPod = "default/app" })).To(Succeed(), "confirm the holder")
		g.Expect(status(ip.Name)).To(same(attached(placed, node1, "default/app")))

		moved := attached(placed, node1, "default/app")
		moved.Pod = "default/app-2"
		set(ip.Name, moved)
		g.Expect(patch(own, ip.Name, func(s *ipv1.IPStatus) { s.AttachedPod = "" })).To(Succeed(), "reprogramming for a new holder")
		g.Expect(patch(own, ip.Name, func(s *ipv1.IPStatus) { s.AttachedPod = "default/app-2" })).To(Succeed(), "confirm the new holder")

		away := attached(placed, node1, "default/app-2")
		away.Node, away.Pod = node2, "default/app-3"
		set(ip.Name, away)
		g.Expect(patch(own, ip.Name, func(s *ipv1.IPStatus) { s.AttachedNode, s.AttachedPod = "", "" })).To(Succeed(), "release")
		g.Expect(patch(other, ip.Name, func(s *ipv1.IPStatus) { s.AttachedNode = node2 })).To(Succeed(), "the new node attaches")
		g.Expect(patch(other, ip.Name, func(s *ipv1.IPStatus) { s.AttachedPod = "default/app-3" })).To(Succeed())
		away.AttachedNode, away.AttachedPod = node2, "default/app-3"
		g.Expect(status(ip.Name)).To(same(away))

		// Its own heartbeat: created, renewed.
		hb := testLease(in.namespace, "ip-agent-"+node1, node1)
		g.Expect(own.Create(ctx, hb)).To(Succeed())
		outer.Cleanup(func() { _ = k8s.Delete(context.Background(), hb) })
		hb.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		g.Expect(own.Update(ctx, hb)).To(Succeed())
	})

	t.Run("status fields other than attachedNode and attachedPod", func(t *testing.T) {
		for field, change := range map[string]func(*ipv1.IPStatus){
			// assigned=false would switch off the rule that keeps spec.address fixed.
			"assigned":           func(s *ipv1.IPStatus) { s.Assigned = false },
			"pool":               func(s *ipv1.IPStatus) { s.Pool = "pool-b" },
			"standbys":           func(s *ipv1.IPStatus) { s.Standbys = append(s.Standbys, "default/mine") },
			"original":           func(s *ipv1.IPStatus) { s.Original.Address = "192.0.2.1" },
			"address":            func(s *ipv1.IPStatus) { s.Address = "192.0.2.1" },
			"node":               func(s *ipv1.IPStatus) { s.Node = node2 },
			"pod":                func(s *ipv1.IPStatus) { s.Pod = "default/mine" },
			"claimed":            func(s *ipv1.IPStatus) { s.Claimed = false },
			"lastMoveTime":       func(s *ipv1.IPStatus) { s.LastMoveTime = &metav1.Time{Time: now.Add(time.Hour)} },
			"observedGeneration": func(s *ipv1.IPStatus) { s.ObservedGeneration = 7 },
			"witnesses":          func(s *ipv1.IPStatus) { s.Witnesses = []string{node1} },
		} {
			t.Run(field, func(t *testing.T) {
				g := NewWithT(t)
				set(ip.Name, attached(placed, node1, "default/app"))
				refused(g, patch(own, ip.Name, change), "may change only status.attachedNode, status.attachedPod and status.attachedGeneration of an IP, not status."+field)
				// Removed rather than changed.
				refused(g, patch(own, ip.Name, func(s *ipv1.IPStatus) {
					switch field {
					case "original":
						s.Original = nil
					case "standbys":
						s.Standbys = nil
					case "lastMoveTime":
						s.LastMoveTime = nil
					default:
						change(s)
					}
				}), "not status."+field)
				g.Expect(status(ip.Name)).To(same(attached(placed, node1, "default/app")))
			})
		}
	})

	t.Run("conditions: Attached and Ready, only with its confirmation", func(t *testing.T) {
		g := NewWithT(t)
		const conditionsRefused = "may change status.conditions only when it confirms its own hold of an allocated IP"
		allocated := *placed.DeepCopy()
		allocated.Conditions = append(allocated.Conditions, metav1.Condition{Type: ipv1.ConditionAllocated, Status: metav1.ConditionTrue,
			Reason: ipv1.ReasonAddressAllocated, Message: "192.0.2.99 is reserved from pool pool-a", LastTransitionTime: now, ObservedGeneration: 1})
		// confirmed sets attachedPod and the conditions as the agent does,
		// then lets edit tamper with the result.
		confirmed := func(edit func(*ipv1.IPStatus)) func(*ipv1.IPStatus) {
			return func(s *ipv1.IPStatus) {
				x := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: *s}
				x.Status.AttachedPod = x.Status.Pod
				ipcond.Confirm(x)
				*s = x.Status
				edit(s)
			}
		}
		unchanged := func(*ipv1.IPStatus) {}
		setCond := func(t, status, reason, msg string) func(*ipv1.IPStatus) {
			return func(s *ipv1.IPStatus) {
				meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: t, Status: metav1.ConditionStatus(status), Reason: reason, Message: msg, ObservedGeneration: 1})
			}
		}
		for what, change := range map[string]func(*ipv1.IPStatus){
			"a Ready message of its own": confirmed(setCond(ipv1.ConditionReady, "True", ipv1.ReasonReady, "all good")),
			"Attached for another pod":   confirmed(setCond(ipv1.ConditionAttached, "True", ipv1.ReasonAgentConfirmed, "the agent on node-1 answers for 192.0.2.99 and forwards it to default/mine")),
			"Ready False":                confirmed(setCond(ipv1.ConditionReady, "False", ipv1.ReasonNodeLost, "192.0.2.99 answers on node node-1 for pod default/app")),
			"Allocated as well":          confirmed(setCond(ipv1.ConditionAllocated, "False", ipv1.ReasonPoolExhausted, "none left")),
			"the conditions alone": func(s *ipv1.IPStatus) {
				confirmed(unchanged)(s)
				s.AttachedPod = ""
			},
		} {
			set(ip.Name, attached(allocated, node1, ""))
			refused(g, patch(own, ip.Name, change), conditionsRefused)
			g.Expect(status(ip.Name)).To(same(attached(allocated, node1, "")), what)
		}
		// Not allocated (no Allocated=True): Ready does not follow.
		set(ip.Name, attached(placed, node1, ""))
		refused(g, patch(own, ip.Name, confirmed(unchanged)), conditionsRefused)
		// Once confirmed, the conditions stay as the manager writes them.
		set(ip.Name, attached(allocated, node1, "default/app"))
		refused(g, patch(own, ip.Name, confirmed(unchanged)), conditionsRefused)

		// The agent's own confirmation (confirm, as report calls it), under
		// its identity: admitted, with Attached and Ready True.
		set(ip.Name, attached(allocated, node1, ""))
		ownAgent, err := agentkube.New(agentConfig(in, node1), agentScheme)
		g.Expect(err).NotTo(HaveOccurred())
		r := &Reconciler{Client: ownAgent, Node: node1}
		cur := &ipv1.IP{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: ip.Name}, cur)).To(Succeed())
		g.Expect(r.confirm(ctx, cur, 0)).To(Succeed())
		g.Expect(r.conditionsRefused.Load()).To(BeZero(), "the policy admitted the conditions")
		got := status(ip.Name)
		g.Expect(got.AttachedPod).To(Equal("default/app"))
		g.Expect(meta.IsStatusConditionTrue(got.Conditions, ipv1.ConditionAttached)).To(BeTrue())
		g.Expect(meta.FindStatusCondition(got.Conditions, ipv1.ConditionReady)).To(gstruct.PointTo(gstruct.MatchFields(gstruct.IgnoreExtras, gstruct.Fields{
			"Status": Equal(metav1.ConditionTrue), "Message": Equal("192.0.2.99 answers on node node-1 for pod default/app")})))

		// A policy that refuses them (an older one) gets the bare report.
		set(ip.Name, attached(placed, node1, ""))
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: ip.Name}, cur)).To(Succeed())
		cur.Status.Conditions = allocated.Conditions // what the agent believes; the API server's copy says otherwise
		g.Expect(r.confirm(ctx, cur, 0)).To(Succeed())
		g.Expect(r.conditionsRefused.Load()).NotTo(BeZero())
		g.Expect(status(ip.Name)).To(same(attached(placed, node1, "default/app")))
	})

	t.Run("attachedPod only status.pod, only while attached", func(t *testing.T) {
		g := NewWithT(t)
		set(ip.Name, attached(placed, node1, ""))
		refused(g, patch(own, ip.Name, func(s *ipv1.IPStatus) { s.AttachedPod = "default/mine" }),
			"may set status.attachedPod only while its node is attached, and only to status.pod (default/app) while the IP is placed on its node, or empty; not to default/mine")
		set(ip.Name, placed)
		refused(g, patch(own, ip.Name, func(s *ipv1.IPStatus) { s.AttachedPod = "default/app" }),
			"may set status.attachedPod only while its node is attached")
		refused(g, patch(own, ip.Name, func(s *ipv1.IPStatus) { s.AttachedNode, s.AttachedPod = node1, "default/app" }),
			"may set status.attachedPod only while its node is attached")
		set(ip.Name, attached(placed, node1, "default/app"))
		refused(g, patch(own, ip.Name, func(s *ipv1.IPStatus) { s.AttachedNode = "" }),
			"must clear status.attachedPod together with status.attachedNode")
		// Moving away: the pod is on node-2 now, node-1 may only release.
		leaving := attached(placed, node1, "")
		leaving.Node, leaving.Pod = node2, "default/app-3"
		set(ip.Name, leaving)
		refused(g, patch(own, ip.Name, func(s *ipv1.IPStatus) { s.AttachedPod = "default/app-3" }),
			"may set status.attachedPod only while its node is attached")
		set(ip.Name, attached(placed, node1, "default/app"))
		g.Expect(status(ip.Name)).To(same(attached(placed, node1, "default/app")))
	})

	t.Run("attachedGeneration only for its own hold, on an IP with witnesses", func(t *testing.T) {
		g := NewWithT(t)
		set(ip.Name, placed)
		refused(g, patch(own, ip.Name, func(s *ipv1.IPStatus) { s.AttachedNode, s.AttachedGeneration = node1, 5 }),
			"may set status.attachedGeneration only for a hold of its own node on an IP that names witnesses")
		witnessed := placed
		witnessed.Witnesses = []string{node2}
		set(ip.Name, witnessed)
		g.Expect(patch(own, ip.Name, func(s *ipv1.IPStatus) { s.AttachedNode, s.AttachedGeneration = node1, 5 })).To(Succeed(), "attach in a generation")
		g.Expect(patch(own, ip.Name, func(s *ipv1.IPStatus) { s.AttachedGeneration = 6 })).To(Succeed(), "claim again in a new generation")
		refused(g, patch(own, ip.Name, func(s *ipv1.IPStatus) { s.AttachedNode = "" }),
			"must clear status.attachedGeneration together with status.attachedNode")
		// Another node's agent cannot touch the hold.
		refused(g, patch(other, ip.Name, func(s *ipv1.IPStatus) { s.AttachedGeneration = 7 }), "may not change IP "+ip.Name)
		g.Expect(patch(own, ip.Name, func(s *ipv1.IPStatus) { s.AttachedNode, s.AttachedGeneration = "", 0 })).To(Succeed(), "release")
		set(ip.Name, attached(placed, node1, "default/app"))
	})

	t.Run("attachedNode only its own, only where placed", func(t *testing.T) {
		g := NewWithT(t)
		set(ip.Name, placed)
		refused(g, patch(own, ip.Name, func(s *ipv1.IPStatus) { s.AttachedNode = node2 }),
			"may only attach an IP placed on its own node or release it from its own node (attachedNode <none> -> node-2)")
		// Placed on node-1, attached to node-2 (moving): node-1 must wait.
		set(ip.Name, attached(placed, node2, ""))
		refused(g, patch(own, ip.Name, func(s *ipv1.IPStatus) { s.AttachedNode = node1 }), "attachedNode node-2 -> node-1")
		g.Expect(status(ip.Name)).To(same(attached(placed, node2, "")))
	})

	t.Run("IPs placed elsewhere", func(t *testing.T) {
		g := NewWithT(t)
		there := placed
		there.Node, there.Pod = node2, "default/there"
		set(elsewhere.Name, there)
		refused(g, patch(own, elsewhere.Name, func(s *ipv1.IPStatus) { s.AttachedNode = node1 }),
			"may not change IP "+elsewhere.Name+": it is placed on node node-2 and attached to <none>")
		set(elsewhere.Name, attached(there, node2, "default/there"))
		refused(g, patch(own, elsewhere.Name, func(s *ipv1.IPStatus) { s.AttachedNode, s.AttachedPod = "", "" }),
			"may not change IP "+elsewhere.Name+": it is placed on node node-2 and attached to node-2")
		refused(g, patch(own, elsewhere.Name, func(s *ipv1.IPStatus) { s.Assigned = false }), "may not change IP "+elsewhere.Name)
		g.Expect(status(elsewhere.Name)).To(same(attached(there, node2, "default/there")))
	})

	t.Run("a token not bound to a node", func(t *testing.T) {
		g := NewWithT(t)
		set(ip.Name, placed)
		refused(g, patch(agent(""), ip.Name, func(s *ipv1.IPStatus) { s.AttachedNode = node1 }), "the ip-agent's token is not bound to a node")
		refused(g, agent("").Create(ctx, testLease(in.namespace, "ip-agent-"+node1, node1), client.DryRunAll), "not bound to a node")
	})

	// The leader-election Lease of cmd/manager, and another node's heartbeat.
	leader := testLease(in.namespace, "manager.kubext.io", "manager-0")
	otherHB := testLease(in.namespace, "ip-agent-"+node2, node2)
	t.Run("other Leases", func(t *testing.T) {
		g := NewWithT(t)
		refused(g, own.Create(ctx, leader.DeepCopy()), "may write only its own heartbeat Lease "+in.namespace+"/ip-agent-node-1, held by node-1, not CREATE Lease "+in.namespace+"/manager.kubext.io")
		refused(g, own.Create(ctx, otherHB.DeepCopy()), "not CREATE Lease "+in.namespace+"/ip-agent-node-2")
		refused(g, own.Create(ctx, testLease(in.namespace, "ip-agent-"+node1, node2), client.DryRunAll), "held by node-1")
		for _, l := range []*coordinationv1.Lease{leader, otherHB} {
			g.Expect(k8s.Create(ctx, l)).To(Succeed())
			outer.Cleanup(func() { _ = k8s.Delete(context.Background(), l) })
			stolen := l.DeepCopy()
			stolen.Spec.HolderIdentity = ptr.To(node1)
			refused(g, own.Update(ctx, stolen), "not UPDATE Lease "+in.namespace+"/"+l.Name)
			renewed := l.DeepCopy()
			renewed.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			refused(g, own.Update(ctx, renewed), "not UPDATE Lease "+in.namespace+"/"+l.Name)
		}
	})

	// What the policy refuses even where the agent's RBAC is wider than
	// config/ip-agent/rbac.yaml: deleting Leases, Leases in other
	// namespaces, writing IPs themselves.
	t.Run("beyond RBAC", func(t *testing.T) {
		g := NewWithT(t)
		wider := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-wider-" + sa}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"ip.kubext.io"}, Resources: []string{"ips"}, Verbs: []string{"create", "update", "patch", "delete"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create", "update", "delete", "deletecollection"}},
		}}
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-wider-" + sa},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: wider.Name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: in.namespace, Name: sa}}}
		for _, o := range []client.Object{wider, binding} {
			g.Expect(k8s.Create(ctx, o)).To(Succeed())
			t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
		}
		// Until the RBAC is loaded, RBAC refuses instead.
		g.Eventually(func(g Gomega) {
			refused(g, own.Delete(ctx, otherHB.DeepCopy()), "not DELETE Lease "+in.namespace+"/ip-agent-node-2")
		}, testenv.WaitFor, 100*time.Millisecond).Should(Succeed())
		refused(g, own.Delete(ctx, leader.DeepCopy()), "not DELETE Lease "+in.namespace+"/manager.kubext.io")
		refused(g, own.Create(ctx, testLease("default", "ip-agent-"+node1, node1)), "not CREATE Lease default/ip-agent-node-1")
		g.Expect(own.Delete(ctx, testLease(in.namespace, "ip-agent-"+node1, node1))).To(Succeed(), "its own heartbeat")
		refused(g, own.DeleteAllOf(ctx, &coordinationv1.Lease{}, client.InNamespace(in.namespace)), "not DELETE Lease "+in.namespace+"/")

		set(ip.Name, placed)
		cur := &ipv1.IP{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: ip.Name}, cur)).To(Succeed())
		orig := cur.DeepCopy()
		cur.Spec.Reassign = true
		refused(g, own.Patch(ctx, cur, client.MergeFrom(orig)), "may not create, change or delete IPs, only report in their status")
		refused(g, own.Delete(ctx, cur), "may not create, change or delete IPs")
		refused(g, own.Create(ctx, &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "mine"}, Spec: ipv1.IPSpec{Address: "192.0.2.97"}}),
			"may not create, change or delete IPs")
	})
}

// installAgentAccess installs the ip-agent's RBAC and admission policy as
// in would, until the test ends, and waits until the policy is in force.
func installAgentAccess(t *testing.T, in install) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	policy := in.namePrefix + "ip-agent-own-node.ip.kubext.io"
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: in.namespace}}
	if err := k8s.Create(ctx, ns); err != nil {
		g.Expect(apierrors.IsAlreadyExists(err)).To(BeTrue(), err)
	}
	objs := renderIPAgentAccess(t, in)
	names := []string{}
	for _, o := range objs {
		g.Expect(k8s.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("test"), client.ForceOwnership)).To(Succeed())
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
		names = append(names, o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
	}
	t.Logf("installed %s", strings.Join(names, ", "))

	own := agentClient(t, in, node1)
	// refused expects err to be the policy's refusal, saying msg.
	refused := func(g Gomega, err error, msg string) {
		g.Expect(err).To(MatchError(And(ContainSubstring("ValidatingAdmissionPolicy '"+policy+"'"), ContainSubstring(msg))))
	}
	// The RBAC and the policy take a moment to load (and the previous
	// install's policy to go): wait, with dry runs that change nothing if
	// they pass, until this install's policy refuses.
	g.Eventually(func(g Gomega) {
		err := own.Create(ctx, testLease(in.namespace, "ip-agent-"+node2, node2), client.DryRunAll)
		refused(g, err, "may write only its own heartbeat Lease")
		g.Expect(strings.Count(err.Error(), "ValidatingAdmissionPolicy '")).To(Equal(1), "refused by this install's policy only")
	}, testenv.WaitFor, 100*time.Millisecond).Should(Succeed())
}

// newPolicyIP creates an IP (no controller runs in this suite, so its
// status is what the test writes).
func newPolicyIP(t *testing.T, name, address string) *ipv1.IP {
	t.Helper()
	ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: ipv1.IPSpec{Address: address}}
	if err := k8s.Create(context.Background(), ip); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ip) })
	return ip
}

// agentClient acts as the deployed ip-agent of a node: its service account,
// with a token bound to the node (impersonated here); node "" is a token
// bound to nothing.
func agentClient(t *testing.T, in install, node string) client.Client {
	t.Helper()
	c, err := client.New(agentConfig(in, node), client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testLease is a Lease as an agent would write it.
func testLease(namespace, name, holder string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
}

// agentConfig is the connection of the deployed ip-agent of node (see
// agentClient).
func agentConfig(in install, node string) *rest.Config {
	cfg := rest.CopyConfig(testEnv.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + in.namespace + ":" + in.namePrefix + "ip-agent",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + in.namespace, "system:authenticated"},
	}
	if node != "" {
		cfg.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
	}
	return cfg
}

// renderIPAgentAccess renders the ip-agent's RBAC and policy as in would
// install them, with kubectl kustomize.
func renderIPAgentAccess(t *testing.T, in install) []*unstructured.Unstructured {
	t.Helper()
	root, err := lab.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, in.dir)
	if in.dir == "" {
		dir = t.TempDir()
		config, err := filepath.Rel(dir, filepath.Join(root, "config"))
		if err != nil {
			t.Fatal(err)
		}
		overlay := "namespace: " + in.namespace + "\nnamePrefix: " + in.namePrefix + "\nresources:\n" +
			"  - " + filepath.Join(config, "ip-agent") + "\n  - " + filepath.Join(config, "policy") + "\n"
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := lab.RenderIPAgentAccess(context.Background(), filepath.Join(root, "bin", "k8s-"+lab.KubeVersion, "kubectl"), dir)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
