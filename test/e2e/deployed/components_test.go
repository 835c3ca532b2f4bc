package deployed

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubext/kubext/test/lab"
)

// Every pod of the install runs: two manager replicas, one of which leads,
// and an ip-agent and a reboot-agent per node, each renewing what shows it
// is alive.
func TestDeployedComponentsRun(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cs, err := theLab.Clientset()
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		g.Expect(deployed.Errors()).To(BeEmpty())
		g.Expect(deployed.Running()).To(HaveLen(2 + 2*len(theLab.Nodes)))
		lease, err := cs.CoordinationV1().Leases(lab.SystemNamespace).Get(ctx, "manager.kubext.io", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(lease.Spec.HolderIdentity).NotTo(BeNil())
		for _, n := range theLab.Nodes {
			hb, err := cs.CoordinationV1().Leases(lab.SystemNamespace).Get(ctx, "ip-agent-"+n, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(hb.Spec.RenewTime.Time).To(BeTemporally(">", time.Now().Add(-5*time.Second)))
		}
	}, 2*time.Minute, time.Second).Should(Succeed())
}
