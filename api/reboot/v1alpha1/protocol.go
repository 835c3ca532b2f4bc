package v1alpha1

import "strings"

// Node annotations of the reboot protocol. Admins and agents only ever set
// AnnotationNeeded; every other annotation is written by the controller (and
// read by the agent on its own node), so the controller alone decides who may
// reboot. Timestamps are RFC 3339 in UTC, taken from the controller's clock.
//
// The life of a reboot:
//
//  1. needed is set (by `kubectl annotate node N reboot.kubext.io/needed=true`,
//     `kubectl kubext reboot N`, or the agent when the sentinel file appears);
//     the controller records needed-since.
//  2. The controller approves the node within its group's budget: it sets
//     in-progress (the node now holds a slot), boot-id, and cordons the node,
//     setting cordoned-by-us only if the node was schedulable.
//  3. Once drained, the controller sets now; the agent reboots only if the
//     node's current boot ID equals boot-id, so an approval reboots at most
//     once.
//  4. When the boot ID has changed and the node has stayed Ready for the
//     group's soakSeconds, the controller uncordons (only if cordoned-by-us),
//     sets rebooted-at and removes needed, needed-since, in-progress, now,
//     boot-id and cordoned-by-us, which frees the slot.
const (
	// AnnotationNeeded asks for a coordinated reboot of the node when its
	// value is "true" (in any case; see Needed). Any other value ("false",
	// "no", "") asks for nothing. The controller removes it once the reboot
	// is verified.
	AnnotationNeeded = "reboot.kubext.io/needed"

	// AnnotationNeededSince is the time the controller first saw
	// AnnotationNeeded; the longest-waiting node is approved first. Only the
	// controller writes it (the place in the queue is not the requester's
	// to choose): it removes it when the request is withdrawn before the
	// approval, so that asking again queues anew.
	AnnotationNeededSince = "reboot.kubext.io/needed-since"

	// AnnotationInProgress is the time the controller approved the node. While
	// it is set the node holds one slot of its group's maxUnavailable, even if
	// the node is Ready again, until the reboot is verified or the Node is
	// deleted.
	AnnotationInProgress = "reboot.kubext.io/in-progress"

	// AnnotationBootID is the node's boot ID (status.nodeInfo.bootID) when the
	// controller approved it. The agent reboots only while the boot ID is
	// still this one; the controller verifies the reboot by seeing it change.
	AnnotationBootID = "reboot.kubext.io/boot-id"

	// AnnotationNow orders the agent to reboot the node now; its value is the
	// time the controller ordered it (after the drain), from which the group's
	// rebootTimeoutSeconds is measured.
	AnnotationNow = "reboot.kubext.io/now"

	// AnnotationCordonedByUs marks a node the controller cordoned for a
	// reboot, so it uncordons only nodes it cordoned and leaves an admin's
	// cordon in place.
	AnnotationCordonedByUs = "reboot.kubext.io/cordoned-by-us"

	// AnnotationRetryAfter holds back a node whose drain timed out: the node
	// is not approved again before this time.
	AnnotationRetryAfter = "reboot.kubext.io/retry-after"

	// AnnotationFailed marks a node whose reboot failed (it did not come back
	// within rebootTimeoutSeconds, or its boot ID did not change); the value
	// says why. The node is not approved again, and it counts towards its
	// group's maxFailures, until an admin removes the annotation.
	AnnotationFailed = "reboot.kubext.io/failed"

	// AnnotationRebootedAt is the time of the node's last reboot that the
	// controller verified.
	AnnotationRebootedAt = "reboot.kubext.io/rebooted-at"
)

const (
	// DefaultGroupName names the default group, which holds every node that no
	// other RebootGroup selects. Without a RebootGroup of that name it reboots
	// one node at a time at any hour; create a RebootGroup named "default"
	// (without a nodeSelector) to give it other settings.
	DefaultGroupName = "default"

	// DefaultMaxUnavailable is the maxUnavailable of a group that does not set
	// one, including the implicit default group.
	DefaultMaxUnavailable = 1

	// LabelControlPlane marks control-plane nodes (kubeadm and most
	// distributions); LabelMaster is its older spelling. Either key as a
	// taint marks one too (kubeadm's node-role.kubernetes.io/control-plane:
	// NoSchedule, on nodes some installers leave unlabelled), and so does a
	// group's spec.controlPlaneSelector. Control-plane nodes reboot one at a
	// time cluster-wide and never together with workers.
	LabelControlPlane = "node-role.kubernetes.io/control-plane"

	// LabelMaster is the pre-1.20 spelling of LabelControlPlane, still set by
	// some distributions.
	LabelMaster = "node-role.kubernetes.io/master"
)

// Needed reports whether a node's annotations ask for a reboot: only
// AnnotationNeeded set to "true" (in any case: "True" and "TRUE" mean the
// same) does, so that a value written to mean the opposite ("false", "no",
// "0") never reboots a node. The reboot-agent itself writes "true" only
// (config/policy/reboot-agent.yaml).
func Needed(annotations map[string]string) bool {
	return strings.EqualFold(annotations[AnnotationNeeded], "true")
}

// Declined reports whether a node's annotations decline a reboot: a person
// (or `kubectl kubext reboot cancel`) set AnnotationNeeded to "false" or
// "no". The node's agent then does not ask again for its sentinel file
// until someone asks with "true" or removes the annotation.
func Declined(annotations map[string]string) bool {
	v, ok := annotations[AnnotationNeeded]
	return ok && (strings.EqualFold(v, "false") || strings.EqualFold(v, "no"))
}
