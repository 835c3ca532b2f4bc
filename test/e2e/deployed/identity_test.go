package deployed

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kubext/kubext/test/lab"
)

// The token the lab hands a pod is its ServiceAccount's, bound to the pod
// and so to its node, as a kubelet's: the ip-agent of one node, with the
// very token its program reads, may renew its own heartbeat but is refused
// another node's by the admission policy, which knows the node only from
// the token's claims.
func TestDeployedAgentTokenIsBoundToItsNode(t *testing.T) {
	needRoot(t)
	agentsOnDuty(t)
	g := NewWithT(t)
	ctx := context.Background()
	node, other := theLab.Nodes[0], theLab.Nodes[1]
	pod := podOf("ip-agent", node)
	g.Expect(pod).NotTo(BeEmpty())
	_, name, _ := strings.Cut(pod, "/")
	tokens, err := filepath.Glob(filepath.Join(theLab.Dir, "pods", lab.SystemNamespace+"_"+name, "volumes", "*", "token"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tokens).To(HaveLen(1), "the pod's kube-api-access token")
	token, err := os.ReadFile(tokens[0])
	g.Expect(err).NotTo(HaveOccurred())

	admin, err := theLab.RESTConfig()
	g.Expect(err).NotTo(HaveOccurred())
	cfg := &rest.Config{Host: admin.Host, BearerToken: string(token), TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData}}
	cs, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(review.Status.UserInfo.Username).To(Equal("system:serviceaccount:kubext-system:kubext-ip-agent"))
	g.Expect(review.Status.UserInfo.Extra["authentication.kubernetes.io/node-name"]).To(ConsistOf(node))

	leases := cs.CoordinationV1().Leases(lab.SystemNamespace)
	// A dry-run update of a Lease as read: the agents renew their Leases
	// meanwhile, and the API server checks the version before admission,
	// so a conflict means read again.
	update := func(name string, change func(*coordinationv1.Lease)) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			l, err := leases.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			change(l)
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		})
	}
	g.Expect(update("ip-agent-"+node, func(*coordinationv1.Lease) {})).To(Succeed(), "its own heartbeat")

	err = update("ip-agent-"+other, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To(other) })
	g.Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("may write only its own heartbeat Lease"))
}
