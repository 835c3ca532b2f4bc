package deployed

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubext/kubext/test/lab"
)

// Every pod of the install runs: two manager replicas, one of which leads,
// and an ip-agent and a reboot-agent per node, each renewing what shows it
// is alive.
func TestDeployedComponentsRun(t *testing.T) {
	needRoot(t)
	agentsOnDuty(t)
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
	// The manifests' probes reach what the programs serve, where they
	// serve it.
	g.Eventually(func(g Gomega) {
		failed, err := deployed.Probe(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(failed).To(BeEmpty())
	}, 30*time.Second, time.Second).Should(Succeed())
}

var (
	ctxBG   = context.Background()
	getOpts = metav1.GetOptions{}
)

// Each program runs as its pod's securityContext says, as a container
// runtime would run it: the manager as the image's non-root user with no
// capability, the ip-agent as root with only NET_ADMIN and NET_RAW, the
// reboot-agent as root with only KILL; none may gain privileges.
func TestDeployedProgramsRunConfined(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	want := map[string]struct{ uid, gid, capEff string }{
		"controller-manager": {"65532", "65532", "0000000000000000"},
		"ip-agent":           {"0", "0", "0000000000003000"},
		// Root, but not root's group (docs/reboot-security.md).
		"reboot-agent": {"0", "65532", "0000000000000020"},
	}
	g.Eventually(func(g Gomega) {
		running := deployed.Running()
		g.Expect(running).To(HaveLen(2 + 2*len(theLab.Nodes)))
		for _, key := range running {
			container := "agent"
			if strings.Contains(key, "controller-manager") {
				container = "manager"
			}
			p := deployed.Process(key, container)
			g.Expect(p).NotTo(BeNil(), key)
			st, err := programStatus(p.PID())
			g.Expect(err).NotTo(HaveOccurred(), key)
			for component, w := range want {
				if !strings.Contains(key, "-"+component+"-") {
					continue
				}
				g.Expect(strings.Fields(st["Uid"])).To(HaveEach(w.uid), key)
				g.Expect(strings.Fields(st["Gid"])).To(HaveEach(w.gid), key)
				g.Expect(st["CapEff"]).To(Equal(w.capEff), key)
				g.Expect(st["NoNewPrivs"]).To(Equal("1"), key)
			}
		}
	}, time.Minute, time.Second).Should(Succeed())
}

// The API server reaches the manager's pod through its Service, at the
// pod's own IP (the lab's API server runs with --enable-aggregator-routing,
// as a webhook call needs without kube-proxy): the metrics endpoint answers
// the proxied request itself, refusing it for want of a token the manager
// can review, instead of the API server failing to reach it.
func TestDeployedAPIServerReachesTheManagerPod(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	cs, err := theLab.Clientset()
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		_, err := cs.CoreV1().Services(lab.SystemNamespace).
			ProxyGet("https", "kubext-controller-manager-metrics-service", "8443", "/metrics", nil).DoRaw(ctxBG)
		g.Expect(err).To(HaveOccurred())
		g.Expect(apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		g.Expect(err.Error()).NotTo(ContainSubstring("error trying to reach service"))
	}, time.Minute, time.Second).Should(Succeed())
}
