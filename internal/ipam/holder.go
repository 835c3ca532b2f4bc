package ipam

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

// Claimant is a pod that claims an IP with the ip.kubext.io/ip annotation.
type Claimant struct {
	// Key is the pod's namespace/name.
	Key string
	// UID is the pod's UID: a pod created again under the same name is
	// another claimant.
	UID string
	// Node is the node the pod is scheduled to; empty while unscheduled.
	Node string
	// Ready is the pod's Ready condition.
	Ready bool
	// Created is the pod's creation time; the oldest claimant is preferred.
	Created time.Time
	// Deleting is true once the pod has a deletion timestamp.
	Deleting bool
	// Refused says why the pod may never hold the IP, whatever its state:
	// it is not allowed to claim it (ClaimPolicy), it runs in the host
	// network, or it has no address of the IP's family. Empty when it may.
	Refused string
	// NotAllowed is true when Refused comes from the ClaimPolicy.
	NotAllowed bool
}

// Holding is the outcome of ChooseHolder.
type Holding struct {
	// Holder is the claimant the address is attached for; zero when none is
	// eligible.
	Holder Claimant
	// Standbys are the other eligible claimants, in the order they would
	// take over.
	Standbys []Claimant
	// Reason says why there is no holder: ipv1.ReasonNoClaimant,
	// ipv1.ReasonNoEligibleNode, or ipv1.ReasonNodeLost when the current
	// holder's node is unhealthy and no standby can take over. Empty when
	// there is a holder.
	Reason string
	// Message explains Reason for the IP's Attached condition.
	Message string
}

// ChooseHolder picks which claimant holds an IP. A claimant is eligible when
// it is not refused, Ready, not being deleted, scheduled, and on a node that
// is healthy and allowed by the pool. The current holder (by pod key) keeps the IP while it
// stays eligible, so the address never flaps between pods; otherwise the
// eligible claimant created first (then by key) takes it. The other eligible
// claimants are the standbys, in the same order.
func ChooseHolder(current string, claimants []Claimant, nodeHealthy, nodeAllowed func(node string) bool) Holding {
	if len(claimants) == 0 {
		return Holding{Reason: ipv1.ReasonNoClaimant, Message: "no pod claims this IP"}
	}
	var eligible []Claimant
	var why []string
	for _, c := range claimants {
		if reason := ineligible(c, nodeHealthy, nodeAllowed); reason != "" {
			why = append(why, c.Key+" "+reason)
			continue
		}
		eligible = append(eligible, c)
	}
	if len(eligible) == 0 {
		slices.Sort(why)
		if !slices.ContainsFunc(claimants, func(c Claimant) bool { return !c.NotAllowed }) {
			return Holding{Reason: ipv1.ReasonNoAllowedClaimant, Message: "no claiming pod is allowed to claim this IP: " + summarize(why)}
		}
		if i := slices.IndexFunc(claimants, func(c Claimant) bool { return c.Key == current }); i >= 0 {
			if node := claimants[i].Node; node != "" && !nodeHealthy(node) {
				return Holding{Reason: ipv1.ReasonNodeLost, Message: fmt.Sprintf(
					"node %s of holder %s stopped renewing its heartbeat and no standby can take over: %s", node, current, summarize(why))}
			}
		}
		return Holding{Reason: ipv1.ReasonNoEligibleNode, Message: "no claiming pod can hold the address: " + summarize(why)}
	}
	slices.SortFunc(eligible, func(a, b Claimant) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.Key, b.Key))
	})
	holder := 0
	if i := slices.IndexFunc(eligible, func(c Claimant) bool { return c.Key == current }); i >= 0 {
		holder = i
	}
	standbys := slices.Delete(slices.Clone(eligible), holder, holder+1)
	return Holding{Holder: eligible[holder], Standbys: standbys}
}

// ineligible says why c cannot hold the IP, or "" when it can.
func ineligible(c Claimant, nodeHealthy, nodeAllowed func(string) bool) string {
	switch {
	case c.Refused != "":
		return "is refused: " + c.Refused
	case c.Deleting:
		return "is being deleted"
	case c.Node == "":
		return "is not scheduled"
	case !nodeAllowed(c.Node):
		return fmt.Sprintf("is on node %s, which the pool's nodeSelector excludes", c.Node)
	case !nodeHealthy(c.Node):
		return fmt.Sprintf("is on node %s, whose agent is not renewing its heartbeat", c.Node)
	case !c.Ready:
		return "is not Ready"
	}
	return ""
}

// summarize joins reasons, keeping the message short for a condition.
func summarize(reasons []string) string {
	const shown = 3
	if len(reasons) <= shown {
		return strings.Join(reasons, "; ")
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(reasons[:shown], "; "), len(reasons)-shown)
}
