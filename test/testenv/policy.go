package testenv

import (
	"context"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

// WaitIPFinalizerPolicy waits until the API server applies the IP
// finalizer policy (config/policy/ip-finalizer.yaml; loading a policy
// takes a moment): until an IP created in a dry run comes back with the
// finalizer. c must know the IP types.
func WaitIPFinalizerPolicy(ctx context.Context, c client.Client) error {
	var got []string
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "finalizer-policy-probe"}, Spec: ipv1.IPSpec{Pool: "probe"}}
		// Refusals are retried: right after the CRDs are installed a
		// client may not map the IP kind yet.
		if last = c.Create(ctx, ip, client.DryRunAll); last != nil {
			return false, nil
		}
		got = ip.Finalizers
		return slices.Contains(got, ipv1.Finalizer), nil
	})
	if err != nil {
		return fmt.Errorf("the IP finalizer policy is not applied (a new IP has finalizers %v; last error %v): %w", got, last, err)
	}
	return nil
}
