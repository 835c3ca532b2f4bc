// Package ipcond builds an IP's conditions. The manager writes them; the
// agent of the node that holds an IP writes Attached and Ready when it
// confirms the hold (Confirm), with the very values the manager would
// compute, so that the manager's next reconcile finds nothing to change:
// one status write per IP fewer through the manager's client, whose QPS
// bounds how fast thousands of IPs converge (docs/benchmarks.md, "Static
// IP at scale"). The ip-agent's admission policy (config/policy/ip-agent.yaml)
// admits exactly these two conditions, with these messages, and only for a
// confirmation of its own node's hold: keep the two in step.
package ipcond

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

// Set sets c on ip, for ip's current generation.
func Set(ip *ipv1.IP, c metav1.Condition) {
	c.ObservedGeneration = ip.Generation
	meta.SetStatusCondition(&ip.Status.Conditions, c)
}

// Summarize sets Ready from Allocated and Attached.
func Summarize(ip *ipv1.IP) {
	ready := metav1.Condition{Type: ipv1.ConditionReady, Status: metav1.ConditionTrue, Reason: ipv1.ReasonReady,
		Message: fmt.Sprintf("%s answers on node %s for pod %s", ip.Status.Address, ip.Status.Node, ip.Status.Pod)}
	for _, t := range []string{ipv1.ConditionAllocated, ipv1.ConditionAttached} {
		c := meta.FindStatusCondition(ip.Status.Conditions, t)
		if c == nil {
			ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, ipv1.ReasonReconciling, t+" not evaluated yet"
			break
		}
		if c.Status != metav1.ConditionTrue {
			ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, c.Reason, c.Message
			break
		}
	}
	Set(ip, ready)
}

// Confirm sets Attached to what the agent on status.node confirms: it
// answers for the address and forwards it to status.pod; and Ready from it.
func Confirm(ip *ipv1.IP) {
	Set(ip, metav1.Condition{Type: ipv1.ConditionAttached, Status: metav1.ConditionTrue, Reason: ipv1.ReasonAgentConfirmed,
		Message: fmt.Sprintf("the agent on %s answers for %s and forwards it to %s", ip.Status.Node, ip.Status.Address, ip.Status.Pod)})
	Summarize(ip)
}

// AgentMayConfirm reports whether node's agent, confirming that it answers
// for ip and forwards it to status.pod, may also write Attached and Ready
// (Confirm): the IP is placed on node and allocated for its current
// generation, so that Ready follows from the confirmation alone. An IP of
// an aws pool is not: it is Attached only once EC2 routes it to the node,
// which the manager verifies.
func AgentMayConfirm(ip *ipv1.IP, node string) bool {
	allocated := meta.FindStatusCondition(ip.Status.Conditions, ipv1.ConditionAllocated)
	return ip.Status.Node == node && ip.Status.Pod != "" && ip.Status.AWS == nil && ip.DeletionTimestamp == nil &&
		allocated != nil && allocated.Status == metav1.ConditionTrue && allocated.ObservedGeneration == ip.Generation
}
