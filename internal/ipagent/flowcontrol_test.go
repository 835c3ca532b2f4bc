package ipagent

import (
	"context"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubext/kubext/test/testenv"
)

// As config/default installs kubext, the API server puts the ip-agents'
// heartbeat requests in their own priority level (config/flowcontrol), so
// that a saturated API server neither refuses them for the manager's bulk
// writes nor lets them crowd those out; the agent's other requests stay
// where every service account's go. The API server says which level
// served a request in a response header.
func TestAgentHeartbeatsHaveAPriorityLevelOfTheirOwn(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	in := install{namespace: "kubext-system", namePrefix: "kubext-", dir: "config/default"}
	installAgentAccess(t, in)
	level := &unstructured.Unstructured{}
	level.SetGroupVersionKind(schema.GroupVersionKind{Group: "flowcontrol.apiserver.k8s.io", Version: "v1", Kind: "PriorityLevelConfiguration"})
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "kubext-agent-heartbeats"}, level)).To(Succeed())

	servedBy := func(g Gomega, path string) string {
		var header http.Header
		cfg := agentConfig(in, node1)
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := rt.RoundTrip(r)
				if resp != nil {
					header = resp.Header
				}
				return resp, err
			})
		}
		rc, err := rest.RESTClientFor(withCodec(cfg))
		g.Expect(err).NotTo(HaveOccurred())
		// A 404 or 403 is classified and answered like any other request.
		_ = rc.Get().AbsPath(path).Do(ctx).Error()
		g.Expect(header).NotTo(BeNil())
		return header.Get("X-Kubernetes-PF-PriorityLevel-UID")
	}
	// The API server's flow-control configuration catches up in a moment.
	g.Eventually(func(g Gomega) {
		g.Expect(servedBy(g, "/apis/coordination.k8s.io/v1/namespaces/kubext-system/leases/ip-agent-"+node1)).
			To(Equal(string(level.GetUID())), "the agent's heartbeat Lease")
	}, testenv.WaitFor, 200*time.Millisecond).Should(Succeed())
	g.Expect(servedBy(g, "/apis/ip.kubext.io/v1alpha1/ips")).NotTo(Or(BeEmpty(), Equal(string(level.GetUID()))), "the agent's IP list")
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// withCodec makes cfg usable by rest.RESTClientFor for raw requests.
func withCodec(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(k8s.Scheme()).WithoutConversion()
	cfg.GroupVersion = &schema.GroupVersion{}
	return cfg
}
