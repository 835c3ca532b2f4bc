package deployed

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

// TestDeployedWebhookRefusesOverlappingPools: as installed, the manager
// provisions its own serving certificate, the API server calls its webhook
// through the Service at the pod's address, and the webhooks fail closed
// once the certificate is served. An IPPool overlapping another is then
// refused at the API with the webhook's message, which only a webhook can
// say (it needs to read the other pools).
func TestDeployedWebhookRefusesOverlappingPools(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	c := adminClient(t)
	g.Eventually(func(g Gomega) {
		hooks := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		g.Expect(c.Get(ctxBG, client.ObjectKey{Name: "kubext-validating-webhook-configuration"}, hooks)).To(Succeed())
		g.Expect(hooks.Webhooks).NotTo(BeEmpty())
		for _, h := range hooks.Webhooks {
			g.Expect(h.ClientConfig.CABundle).NotTo(BeEmpty(), "caBundle of %s", h.Name)
			g.Expect(h.FailurePolicy).To(HaveValue(Equal(admissionregistrationv1.Fail)), "failurePolicy of %s", h.Name)
		}
	}, 2*time.Minute, time.Second).Should(Succeed())

	first := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "webhook-a"}, Spec: ipv1.IPPoolSpec{Addresses: []string{"192.0.2.64/28"}}}
	g.Expect(c.Create(ctxBG, first)).To(Succeed())
	t.Cleanup(func() { _ = c.Delete(ctxBG, first) })
	second := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "webhook-b"}, Spec: ipv1.IPPoolSpec{Addresses: []string{"192.0.2.70/31"}}}
	err := c.Create(ctxBG, second)
	if err == nil {
		_ = c.Delete(ctxBG, second)
	}
	g.Expect(err).To(MatchError(SatisfyAll(
		ContainSubstring("vippool.ip.kubext.io"), ContainSubstring(`overlaps IPPool "webhook-a"`))))
}
