package rebootagent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

// An order is carried out only when the reboot controller's approvals
// ledger records it: a complete, well-formed order written by someone else
// (here with the admin's rights, as if the admission policy that keeps
// orders to the controller were missing) is ignored and reported, as is
// one whose approval the ledger records differently, one on a node the
// ledger approved but has not ordered (still draining) and one the ledger
// records for another time or boot; the same order reboots the node once
// the ledger records it.
// The agent runs as deployed: its service account, a token bound to its
// node, and the RBAC of config/reboot-agent/rbac.yaml (the ledger by name,
// read only), so the read of the ledger itself is proven allowed.
func TestOnlyOrdersInTheLedgerReboot(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	const node, ns, bootID = "ledger-node", "ledger-test", "boot-L1"
	grantAgentRBAC(t, g)
	createAll(t, g,
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "test-reboot-agent-ledger", Namespace: ns},
		Rules: agentRules(g, "Role", "reboot-agent-ledger")}
	createAll(t, g, role, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "kubext-system", Name: "kubext-reboot-agent"}}})
	g.Expect(setBootID(ctx, node, bootID)).To(Succeed())

	machine := t.TempDir()
	rebooted := func() int {
		data, _ := os.ReadFile(filepath.Join(machine, "rebooted"))
		return strings.Count(string(data), "rebooted\n")
	}
	rec, err := startAgent(ctx, agentConfig(node), node, testCommand(machine), func(a *Agent) {
		a.SentinelFile = ""
		a.Ledger = &Ledger{Reader: a.Client, Namespace: ns, Name: rebootv1.DefaultLedgerName}
	})
	g.Expect(err).NotTo(HaveOccurred())

	// A forged order, no ledger at all: nothing, reported once.
	forged := order(bootID)
	g.Expect(annotate(ctx, node, forged)).To(Succeed())
	g.Eventually(func() ([]string, error) { return nodeEvents(ctx, node, ReasonUntracedOrder) }, waitFor).Should(
		ContainElement(And(ContainSubstring("Not rebooting"), ContainSubstring("there is no ledger"))))
	g.Consistently(rebooted, 2*time.Second, 100*time.Millisecond).Should(BeZero())

	// A ledger that holds the node with another approval: still nothing.
	slots := map[string]rebootv1.LedgerSlot{node: {Group: "g", Approval: "2026-03-01T02:00:00Z", NodeResourceVersion: "1", Confirmed: true}}
	ledger := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: rebootv1.DefaultLedgerName, Namespace: ns},
		Data: map[string]string{rebootv1.LedgerKey: ledgerJSON(g, slots)}}
	createAll(t, g, ledger)
	g.Consistently(rebooted, untracedRetry+2*time.Second, 200*time.Millisecond).Should(BeZero())
	g.Expect(rec.count(ReasonUntracedOrder)).To(Equal(2), "one order, reported once for each reason (no ledger, another approval)")

	// The ledger holds the approval the node shows but no order: the node
	// is draining as far as the controller knows, and an order written by
	// hand meanwhile (here one that even copies the boot ID) reboots
	// nothing. This is the order of someone past the admission policy
	// (break glass, or no policy) on an approved node.
	slots[node] = rebootv1.LedgerSlot{Group: "g", Approval: *forged[rebootv1.AnnotationInProgress], NodeResourceVersion: "1", Confirmed: true}
	writeLedger(g, ledger, slots)
	g.Eventually(func() ([]string, error) { return nodeEvents(ctx, node, ReasonUntracedOrder) }, waitFor).Should(
		ContainElement(ContainSubstring("records no order")))
	g.Consistently(rebooted, 2*time.Second, 100*time.Millisecond).Should(BeZero())

	// The ledger records another order (another time, or another boot):
	// still nothing.
	sl := slots[node]
	sl.Order, sl.BootID = *forged[rebootv1.AnnotationNow], "boot-L0"
	slots[node] = sl
	writeLedger(g, ledger, slots)
	g.Eventually(func() ([]string, error) { return nodeEvents(ctx, node, ReasonUntracedOrder) }, waitFor).Should(
		ContainElement(ContainSubstring("records the order of")))
	g.Consistently(rebooted, 2*time.Second, 100*time.Millisecond).Should(BeZero())

	// The ledger records the order the node shows: the node reboots, once.
	sl.BootID = bootID
	slots[node] = sl
	writeLedger(g, ledger, slots)
	g.Eventually(rebooted, waitFor, 100*time.Millisecond).Should(Equal(1))
	g.Consistently(rebooted, time.Second, 100*time.Millisecond).Should(Equal(1))
}

// writeLedger replaces the ledger's slots, as an admin.
func writeLedger(g Gomega, ledger *corev1.ConfigMap, slots map[string]rebootv1.LedgerSlot) {
	patch := client.MergeFrom(ledger.DeepCopy())
	ledger.Data[rebootv1.LedgerKey] = ledgerJSON(g, slots)
	g.Expect(k8s.Patch(context.Background(), ledger, patch)).To(Succeed())
}

func ledgerJSON(g Gomega, slots map[string]rebootv1.LedgerSlot) string {
	data, err := json.Marshal(slots)
	g.Expect(err).NotTo(HaveOccurred())
	return string(data)
}
