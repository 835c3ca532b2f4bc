package ippool

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

// onLeaseInstead reports whether ip is held on its node's Lease although it
// names witnesses: its witnesses did not vouch in time (the agent's
// fallback, docs/design/failover.md).
func onLeaseInstead(ip *ipv1.IP) bool {
	return len(ip.Status.Witnesses) > 0 && ip.Status.AttachedNode != "" && ip.Status.AttachedGeneration == 0
}

// witnessCondition says, for a pool with Witness failover, whether its
// holds are on their witnesses' word, naming the IPs that fell back to the
// Lease; a Lease pool has no such condition.
func (r *Reconciler) witnessCondition(ctx context.Context, pool *ipv1.IPPool) error {
	if pool.Spec.Failover != ipv1.FailoverWitness {
		meta.RemoveStatusCondition(&pool.Status.Conditions, ipv1.ConditionWitnesses)
		return nil
	}
	ips := &ipv1.IPList{}
	// Read only: the cache's own objects, not a copy of every IP.
	if err := r.List(ctx, ips, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing the IPs of pool %s: %w", pool.Name, err)
	}
	var fellBack []string
	held := 0
	for i := range ips.Items {
		ip := &ips.Items[i]
		if ip.Status.Pool != pool.Name || ip.Status.AttachedNode == "" {
			continue
		}
		held++
		if onLeaseInstead(ip) {
			fellBack = append(fellBack, ip.Name)
		}
	}
	c := metav1.Condition{Type: ipv1.ConditionWitnesses, Status: metav1.ConditionTrue, Reason: ipv1.ReasonWitnessesHeard,
		Message: fmt.Sprintf("%d held IPs, none on a Lease for want of witnesses", held)}
	if len(fellBack) > 0 {
		slices.Sort(fellBack)
		names := fellBack
		if len(names) > 5 {
			names = append(names[:5:5], "...")
		}
		c.Status, c.Reason = metav1.ConditionFalse, ipv1.ReasonWitnessesUnreachable
		c.Message = fmt.Sprintf("%d of %d held IPs are held on their node's Lease because their witnesses did not vouch in time (UDP port of the ip-agents' --witness-port filtered between the nodes or outside their witness-allow-from, or the witnesses' agents down): %s; they fail over as in Lease failover and go dark while the API server stalls",
			len(fellBack), held, strings.Join(names, ", "))
	}
	setCondition(pool, c)
	return nil
}

// fallbackChanged passes IP events that change whether the IP is held on
// its Lease for want of witnesses, or whether it is held at all (the
// count): not every status write of every IP.
var fallbackChanged = predicate.Funcs{
	CreateFunc:  func(e event.CreateEvent) bool { return e.Object.(*ipv1.IP).Status.AttachedNode != "" },
	DeleteFunc:  func(event.DeleteEvent) bool { return true },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*ipv1.IP), e.ObjectNew.(*ipv1.IP)
		return onLeaseInstead(o) != onLeaseInstead(n) || (o.Status.AttachedNode == "") != (n.Status.AttachedNode == "")
	},
}

// ipToPool maps an IP to the pool it was allocated from.
func ipToPool(_ context.Context, o client.Object) []reconcile.Request {
	if pool := o.(*ipv1.IP).Status.Pool; pool != "" {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: pool}}}
	}
	return nil
}
