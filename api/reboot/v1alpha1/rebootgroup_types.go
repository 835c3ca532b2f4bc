package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Condition types of a RebootGroup.
const (
	// ConditionReady summarises the group: True while its rollout can make
	// progress (possibly waiting for a window or budget), False when it is
	// paused, halted, stuck or its spec cannot be used; the reason and
	// message then say which.
	ConditionReady = "Ready"

	// ConditionPaused is True while spec.paused is set.
	ConditionPaused = "Paused"

	// ConditionHalted is True when maxFailures reboots of the group have
	// failed; nothing more is approved until the failed annotations are
	// removed from the nodes or maxFailures is raised.
	ConditionHalted = "Halted"

	// ConditionOverlapping is True when some nodes the group selects are also
	// selected by another group; those nodes are handled by neither, and the
	// message names them and the other groups.
	ConditionOverlapping = "Overlapping"

	// ConditionStuck is True when a node of the group was ordered to reboot
	// more than rebootTimeoutSeconds ago and has not come back; it keeps its
	// slot of the budget.
	ConditionStuck = "Stuck"

	// ConditionDrainBlocked is True when the last drain of a node of the
	// group ran out of time; the message names the node and the
	// PodDisruptionBudget or pod that held it. The node was uncordoned (if
	// kubext cordoned it) and is retried later. It turns False when a drain
	// of the group completes.
	ConditionDrainBlocked = "DrainBlocked"

	// ConditionGateHeld is True while one of the group's healthGates fails,
	// so no node of the group is approved; the reason names the gate and
	// the message what it found. Set only on groups with healthGates.
	ConditionGateHeld = "GateHeld"
)

// Reasons of the conditions of a RebootGroup.
const (
	// ReasonRollingOut: nodes of the group are rebooting or waiting for a
	// slot.
	ReasonRollingOut = "RollingOut"

	// ReasonIdle: no node of the group needs a reboot.
	ReasonIdle = "Idle"

	// ReasonOutsideWindow: nodes need a reboot but no maintenance window is
	// open; the message says when the next one opens.
	ReasonOutsideWindow = "OutsideWindow"

	// ReasonPaused: spec.paused is set.
	ReasonPaused = "Paused"

	// ReasonTooManyFailures: maxFailures reboots failed.
	ReasonTooManyFailures = "TooManyFailures"

	// ReasonRebootTimedOut: a node did not come back within
	// rebootTimeoutSeconds.
	ReasonRebootTimedOut = "RebootTimedOut"

	// ReasonNodesOverlap: nodes are selected by this group and another one.
	ReasonNodesOverlap = "NodesOverlap"

	// ReasonInvalidSpec: the spec passed the API server's checks but cannot be
	// used, e.g. an unknown time zone; the message says which field and why.
	ReasonInvalidSpec = "InvalidSpec"

	// ReasonDrainTimedOut: a drain did not finish within
	// drain.timeoutSeconds.
	ReasonDrainTimedOut = "DrainTimedOut"

	// ReasonDrained: the group's last drain completed.
	ReasonDrained = "Drained"

	// ReasonEvictedPodsNotReady: healthGates.evictedPodsReady holds: a
	// workload that had pods evicted by the group's last drain has pods
	// that are not Ready.
	ReasonEvictedPodsNotReady = "EvictedPodsNotReady"

	// ReasonDisruptionsNotAllowed: healthGates.podDisruptionBudgets holds:
	// a PodDisruptionBudget in a selected namespace allows no disruption.
	ReasonDisruptionsNotAllowed = "DisruptionsNotAllowed"

	// ReasonSelectedPodsNotReady: healthGates.readyPods holds: a selected
	// pod is not Ready, or none is selected.
	ReasonSelectedPodsNotReady = "SelectedPodsNotReady"

	// ReasonGatesPass: every health gate of the group passes.
	ReasonGatesPass = "GatesPass"
)

// Weekday is a day of the week, in English.
// +kubebuilder:validation:Enum=Monday;Tuesday;Wednesday;Thursday;Friday;Saturday;Sunday
type Weekday string

// RebootGroupSpec says which nodes form the group and how they are rebooted.
type RebootGroupSpec struct {
	// nodeSelector selects the group's nodes by node label. Empty or unset
	// selects every node. A node selected by two or more groups is rebooted
	// by none of them until the overlap is resolved; each such group reports
	// it in its Overlapping condition. Nodes no group selects belong to the
	// group named "default". The group named "default" must not set a
	// nodeSelector.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="spec.nodeSelector.matchExpressions[].operator must be In, NotIn, Exists or DoesNotExist"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['In', 'NotIn']) || (has(e.values) && size(e.values) > 0))",message="spec.nodeSelector.matchExpressions[] with operator In or NotIn need at least one value"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['Exists', 'DoesNotExist']) || !has(e.values) || size(e.values) == 0)",message="spec.nodeSelector.matchExpressions[] with operator Exists or DoesNotExist must not have values"
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`

	// controlPlaneSelector selects, by node label, the group's nodes that
	// are control-plane nodes besides those kubext recognises by itself: a
	// node-role.kubernetes.io/control-plane (or .../master) label or taint.
	// Use it where a distribution marks its API server or etcd nodes
	// otherwise. Control-plane nodes reboot one at a time across the whole
	// cluster and never together with workers. Unset adds none.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="spec.controlPlaneSelector.matchExpressions[].operator must be In, NotIn, Exists or DoesNotExist"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['In', 'NotIn']) || (has(e.values) && size(e.values) > 0))",message="spec.controlPlaneSelector.matchExpressions[] with operator In or NotIn need at least one value"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['Exists', 'DoesNotExist']) || !has(e.values) || size(e.values) == 0)",message="spec.controlPlaneSelector.matchExpressions[] with operator Exists or DoesNotExist must not have values"
	// +kubebuilder:validation:XValidation:rule="(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",message="spec.controlPlaneSelector must not be empty: it would make every node of the group a control-plane node; leave it unset instead"
	ControlPlaneSelector *metav1.LabelSelector `json:"controlPlaneSelector,omitempty"`

	// maxUnavailable is how many of the group's nodes may be unavailable at
	// once: a number (at least 1) or a percentage of the group's nodes from
	// "1%" to "100%", rounded down but never below one node. A node counts as
	// unavailable while it is not Ready (False or Unknown), cordoned by anyone,
	// or rebooting, whatever the cause, so a node that is down for another
	// reason uses up budget. No node is approved while the group is at or over
	// its budget. Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) != int || self != 0",message="spec.maxUnavailable must be at least 1: 0 would never reboot a node (set spec.paused to stop reboots)"
	// +kubebuilder:validation:XValidation:rule="type(self) != int || self >= 0",message="spec.maxUnavailable must not be negative"
	// +kubebuilder:validation:XValidation:rule="type(self) != string || self.matches('^[0-9]+%$')",message="spec.maxUnavailable must be a number such as 2 or a percentage such as 25%"
	// +kubebuilder:validation:XValidation:rule="type(self) != string || !self.matches('^0+%$')",message="spec.maxUnavailable must be at least 1%: 0% would never reboot a node (set spec.paused to stop reboots)"
	// +kubebuilder:validation:XValidation:rule="type(self) != string || !self.matches('^[0-9]+%$') || self.matches('^0*([0-9]{1,2}|100)%$')",message="spec.maxUnavailable must be at most 100%"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// windows are the maintenance windows in which reboots may start. With
	// none, reboots may start at any time. A reboot that started inside a
	// window is allowed to finish after it closes.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Windows []MaintenanceWindow `json:"windows,omitempty"`

	// drain says how nodes are drained before they reboot.
	// +optional
	// +kubebuilder:default={}
	Drain DrainSpec `json:"drain,omitempty"`

	// soakSeconds is how long a node must stay Ready, with a new boot ID,
	// after its reboot before it is uncordoned and its slot is given to the
	// next node. Defaults to 60.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	SoakSeconds *int32 `json:"soakSeconds,omitempty"`

	// paused stops approving new reboots in this group. Reboots already
	// approved run to the end.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// maxFailures halts the group once this many of its nodes have a failed
	// reboot (one that did not come back within rebootTimeoutSeconds, or whose
	// boot ID did not change): no more reboots are approved until an admin
	// removes the reboot.kubext.io/failed annotation from the nodes or raises
	// maxFailures. 0 never halts. Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Maximum=10000
	// +kubebuilder:validation:XValidation:rule="self >= 0",message="spec.maxFailures must not be negative; 0 means never halt"
	MaxFailures *int32 `json:"maxFailures,omitempty"`

	// rebootTimeoutSeconds is how long a node may take, from the moment it is
	// told to reboot (after the drain) until it is Ready again with a new boot
	// ID. After that its reboot is Stuck: the node keeps counting as
	// unavailable, the group reports it in its Stuck condition, and it counts
	// as a failed reboot towards maxFailures. Defaults to 900 (15 minutes).
	// +optional
	// +kubebuilder:default=900
	// +kubebuilder:validation:Minimum=30
	// +kubebuilder:validation:Maximum=86400
	RebootTimeoutSeconds int32 `json:"rebootTimeoutSeconds,omitempty"`

	// healthGates are checks on the cluster's workloads that must all pass
	// before the next node of the group is approved (kured #277,
	// system-upgrade-controller #169): while one fails the group's nodes
	// wait (reason HealthGate), its GateHeld condition names the gate, and
	// reboots already under way go on. Unset checks nothing.
	// +optional
	HealthGates *HealthGates `json:"healthGates,omitempty"`
}

// HealthGates are the checks a group makes before it approves the next
// node. Each is off unless set.
// +kubebuilder:validation:XValidation:rule="self.evictedPodsReady || has(self.podDisruptionBudgets) || has(self.readyPods)",message="spec.healthGates must set at least one gate: evictedPodsReady, podDisruptionBudgets or readyPods"
type HealthGates struct {
	// evictedPodsReady holds the group until the pods evicted by its last
	// completed drain are Ready again somewhere: every pod of each workload
	// (the pod's controller: a ReplicaSet, StatefulSet, ...) that had a
	// pod evicted is Ready. A workload deleted since counts as ready.
	// +optional
	EvictedPodsReady bool `json:"evictedPodsReady,omitempty"`

	// podDisruptionBudgets holds the group while a PodDisruptionBudget in
	// one of the selected namespaces allows no disruption (its
	// status.disruptionsAllowed is 0): a workload already at its limit
	// would block the next drain, or the last drain's pods are not back.
	// +optional
	PodDisruptionBudgets *NamespacesGate `json:"podDisruptionBudgets,omitempty"`

	// readyPods holds the group while a selected pod is not Ready, or no
	// pod is selected at all (e.g. a database's members, a quorum).
	// +optional
	ReadyPods *PodsGate `json:"readyPods,omitempty"`
}

// NamespacesGate selects the namespaces a gate looks at.
type NamespacesGate struct {
	// namespaceSelector selects namespaces by label; empty ({}) selects
	// every namespace.
	// +required
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="spec.healthGates.podDisruptionBudgets.namespaceSelector.matchExpressions[].operator must be In, NotIn, Exists or DoesNotExist"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['In', 'NotIn']) || (has(e.values) && size(e.values) > 0))",message="spec.healthGates.podDisruptionBudgets.namespaceSelector.matchExpressions[] with operator In or NotIn need at least one value"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['Exists', 'DoesNotExist']) || !has(e.values) || size(e.values) == 0)",message="spec.healthGates.podDisruptionBudgets.namespaceSelector.matchExpressions[] with operator Exists or DoesNotExist must not have values"
	NamespaceSelector metav1.LabelSelector `json:"namespaceSelector"`
}

// PodsGate selects the pods a gate requires Ready.
type PodsGate struct {
	// namespaceSelector selects the namespaces, by label, the pods are
	// looked for in; unset or empty looks in every namespace.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="spec.healthGates.readyPods.namespaceSelector.matchExpressions[].operator must be In, NotIn, Exists or DoesNotExist"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['In', 'NotIn']) || (has(e.values) && size(e.values) > 0))",message="spec.healthGates.readyPods.namespaceSelector.matchExpressions[] with operator In or NotIn need at least one value"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['Exists', 'DoesNotExist']) || !has(e.values) || size(e.values) == 0)",message="spec.healthGates.readyPods.namespaceSelector.matchExpressions[] with operator Exists or DoesNotExist must not have values"
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// podSelector selects the pods by label; it must not be empty.
	// +required
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])",message="spec.healthGates.readyPods.podSelector.matchExpressions[].operator must be In, NotIn, Exists or DoesNotExist"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['In', 'NotIn']) || (has(e.values) && size(e.values) > 0))",message="spec.healthGates.readyPods.podSelector.matchExpressions[] with operator In or NotIn need at least one value"
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, !(e.operator in ['Exists', 'DoesNotExist']) || !has(e.values) || size(e.values) == 0)",message="spec.healthGates.readyPods.podSelector.matchExpressions[] with operator Exists or DoesNotExist must not have values"
	// +kubebuilder:validation:XValidation:rule="(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",message="spec.healthGates.readyPods.podSelector must not be empty: it would require every pod of the cluster to be Ready"
	PodSelector metav1.LabelSelector `json:"podSelector"`
}

// WorkloadRef names the controller of pods: a ReplicaSet, StatefulSet, ...
type WorkloadRef struct {
	// +required
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// +required
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// +required
	// +kubebuilder:validation:MaxLength=36
	UID string `json:"uid"`
}

// MaintenanceWindow is a time of day, on some days of the week, in one time
// zone. It follows the local wall clock: on the day clocks go forward a window
// that spans the skipped hour is an hour shorter (one that starts inside it
// opens when the clock jumps), and on the day they go back one that spans the
// repeated hour is an hour longer.
// +kubebuilder:validation:XValidation:rule="self.start != self.end",message="a window's start and end must differ; use start 00:00 and end 24:00 for the whole day"
// +kubebuilder:validation:XValidation:rule="self.start != '24:00'",message="a window's start must be between 00:00 and 23:59"
type MaintenanceWindow struct {
	// days are the days of the week on which the window opens, e.g.
	// [Saturday, Sunday]. Empty means every day. A window whose end is
	// earlier than its start runs past midnight into the next day.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=7
	Days []Weekday `json:"days,omitempty"`

	// start is the local time the window opens, as HH:MM on a 24-hour clock
	// (00:00 to 23:59).
	// +required
	// +kubebuilder:validation:MaxLength=5
	// +kubebuilder:validation:XValidation:rule="self.matches('^([01][0-9]|2[0-3]):[0-5][0-9]$|^24:00$')",message="a window's start and end must be times as HH:MM on a 24-hour clock, e.g. 02:00 or 22:30"
	Start string `json:"start"`

	// end is the local time the window closes, as HH:MM on a 24-hour clock
	// (00:01 to 24:00; 24:00 is midnight at the end of the day). An end
	// earlier than start closes the window on the next day.
	// +required
	// +kubebuilder:validation:MaxLength=5
	// +kubebuilder:validation:XValidation:rule="self.matches('^([01][0-9]|2[0-3]):[0-5][0-9]$|^24:00$')",message="a window's start and end must be times as HH:MM on a 24-hour clock, e.g. 02:00 or 22:30"
	End string `json:"end"`

	// timeZone is the IANA time zone name start and end are in, e.g.
	// Europe/Oslo or America/New_York. Defaults to UTC. The API server
	// refuses a name that is not in its time zone database (e.g.
	// Europe/Osloo); should the controller's database lack a zone the API
	// server knows, the group reports it in its Ready condition (reason
	// InvalidSpec) and reboots nothing until it is fixed.
	// +optional
	// +kubebuilder:default=UTC
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$') && self != 'Local'",message="spec.windows[].timeZone must be an IANA time zone name such as Europe/Oslo, America/New_York or UTC"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$') || self == 'Local' || timestamp('2000-01-01T00:00:00Z').getHours(self) >= 0",message="spec.windows[].timeZone is not in the time zone database"
	TimeZone string `json:"timeZone,omitempty"`
}

// DrainSpec says how a node is drained before its reboot. Pods are evicted
// through the Eviction API, so PodDisruptionBudgets hold; DaemonSet pods and
// static pods are left alone.
// +kubebuilder:validation:XValidation:rule="!has(self.gracePeriodSeconds) || !has(self.timeoutSeconds) || self.timeoutSeconds > self.gracePeriodSeconds",message="spec.drain.timeoutSeconds must be longer than spec.drain.gracePeriodSeconds: evicted pods are given that long to stop, and the drain would always time out first"
type DrainSpec struct {
	// timeoutSeconds is how long the drain may take. When it runs out the
	// node is uncordoned (if kubext cordoned it), gives its slot back and is
	// tried again later with backoff; the pod or PodDisruptionBudget that
	// blocked it is named in an Event and in the group's status. Defaults to
	// 1800 (30 minutes); at least 30. A shorter drain times out before
	// evicted pods can stop (30 seconds is their default grace period),
	// so the node would be drained in part, given back, and drained again
	// without end.
	// +optional
	// +kubebuilder:default=1800
	// +kubebuilder:validation:Maximum=86400
	// +kubebuilder:validation:XValidation:rule="self >= 30",message="spec.drain.timeoutSeconds must be at least 30: a shorter drain times out before evicted pods can stop (30s is their default grace period) and the node is drained in part, given back and drained again without end"
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`

	// gracePeriodSeconds overrides the termination grace period of evicted
	// pods. Unset uses each pod's own terminationGracePeriodSeconds.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	GracePeriodSeconds *int64 `json:"gracePeriodSeconds,omitempty"`

	// blockingPodSelector selects pods, by label, that hold back a node's
	// reboot while one of them runs on the node (e.g. a batch job that must
	// not be interrupted). The node waits, without being cordoned, and the
	// group's status names the pod. Unset blocks nothing.
	// +optional
	BlockingPodSelector *metav1.LabelSelector `json:"blockingPodSelector,omitempty"`

	// deleteEmptyDirData allows evicting pods that use emptyDir volumes,
	// whose data is lost with the pod. When false, such a pod blocks the
	// drain until timeoutSeconds. Defaults to true.
	// +optional
	// +kubebuilder:default=true
	DeleteEmptyDirData *bool `json:"deleteEmptyDirData,omitempty"`
}

// RebootGroupStatus reports the progress of the group's reboots.
type RebootGroupStatus struct {
	// nodes is the number of nodes the group selects, including nodes it
	// shares with another group (which count against its budget but which it
	// does not reboot).
	// +optional
	Nodes int32 `json:"nodes"`

	// maxUnavailable is spec.maxUnavailable resolved against nodes.
	// +optional
	MaxUnavailable int32 `json:"maxUnavailable"`

	// unavailable is the number of the group's nodes that are unavailable for
	// any reason (not Ready, cordoned, or rebooting).
	// +optional
	Unavailable int32 `json:"unavailable"`

	// needing is the number of nodes that need a reboot and have not been
	// approved yet.
	// +optional
	Needing int32 `json:"needing"`

	// rebooting is the number of nodes approved and not yet verified: being
	// drained, rebooting, or soaking.
	// +optional
	Rebooting int32 `json:"rebooting"`

	// done is the number of nodes whose last reboot through kubext was
	// verified and that need no other.
	// +optional
	Done int32 `json:"done"`

	// failed is the number of nodes whose reboot failed or is stuck.
	// +optional
	Failed int32 `json:"failed"`

	// currentNodes are the names of the nodes rebooting now.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=1000
	CurrentNodes []string `json:"currentNodes,omitempty"`

	// nextWindow is when the next maintenance window opens, while nodes wait
	// for one.
	// +optional
	NextWindow *metav1.Time `json:"nextWindow,omitempty"`

	// rollout is the group's current (or last) rollout: the nodes that
	// needed a reboot when it started or asked while it ran, how many of
	// them are done, remain or failed, and why it waits, if it does. It is
	// kept here, in the API, so that a rollout cut short by the end of its
	// maintenance window, a pause or a new leader goes on with the nodes
	// that remain. Unset until a node of the group first asks for a reboot.
	// +optional
	Rollout *RolloutStatus `json:"rollout,omitempty"`

	// lastDrain names the group's last node whose drain completed and the
	// workloads whose pods it evicted, for healthGates.evictedPodsReady
	// (kept here so that a new leader checks the same ones).
	// +optional
	LastDrain *DrainRecord `json:"lastDrain,omitempty"`

	// observedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions are Ready (the summary), Paused, Halted, Overlapping,
	// Stuck, DrainBlocked and GateHeld.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RolloutState says where a group's rollout stands.
// +kubebuilder:validation:Enum=Running;WaitingForWindow;Paused;Gated;Halted;Invalid;Complete
type RolloutState string

// States of a rollout.
const (
	// RolloutRunning: nodes of the rollout are rebooting, or wait only for
	// a free slot of the budget (or for reasons of their own, such as a
	// blocking pod or a retry after a drain timeout).
	RolloutRunning RolloutState = "Running"
	// RolloutWaitingForWindow: nothing of the rollout is under way and no
	// maintenance window is open; it goes on at resumeAt.
	RolloutWaitingForWindow RolloutState = "WaitingForWindow"
	// RolloutPaused: spec.paused is set; reboots already approved finish.
	RolloutPaused RolloutState = "Paused"
	// RolloutGated: nothing of the rollout is under way and a health gate
	// holds the group; the message names the gate.
	RolloutGated RolloutState = "Gated"
	// RolloutHalted: maxFailures reboots of the group failed.
	RolloutHalted RolloutState = "Halted"
	// RolloutInvalid: the group's spec cannot be used; the Ready condition
	// says why.
	RolloutInvalid RolloutState = "Invalid"
	// RolloutComplete: every node of the rollout was rebooted (or failed,
	// or withdrew its request).
	RolloutComplete RolloutState = "Complete"
)

// RolloutStatus is one rollout of a group: from the moment a node of the
// group asks for a reboot while no rollout runs, until no node that asked
// since remains to be rebooted. A node is rebooted once per request: one
// verified in this rollout is rebooted again only if it asks again after
// that reboot.
type RolloutStatus struct {
	// number counts the group's rollouts, from 1.
	// +required
	// +kubebuilder:validation:Minimum=1
	Number int64 `json:"number"`

	// startTime is when the rollout started: when the first of its nodes
	// was seen asking for a reboot.
	// +required
	StartTime metav1.Time `json:"startTime"`

	// completionTime is when the last node of the rollout was done.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// state is Running, WaitingForWindow, Paused, Gated, Halted, Invalid
	// or Complete.
	// +required
	State RolloutState `json:"state"`

	// message says more about the state, e.g. which gate holds the group.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// waitingSince is when the rollout stopped for the state it is in
	// (WaitingForWindow, Paused, Gated, Halted or Invalid), e.g. when its
	// last maintenance window closed.
	// +optional
	WaitingSince *metav1.Time `json:"waitingSince,omitempty"`

	// resumeAt is when the next maintenance window opens, while the
	// rollout waits for one.
	// +optional
	ResumeAt *metav1.Time `json:"resumeAt,omitempty"`

	// total is done + remaining + failed: the rollout's nodes, plus one for
	// each node that asked again after its reboot in it. A node whose
	// request is withdrawn before its reboot leaves the rollout.
	// +optional
	Total int32 `json:"total"`

	// done is the number of the rollout's reboots that were verified.
	// +optional
	Done int32 `json:"done"`

	// remaining is the number of the rollout's nodes still to be rebooted,
	// including those rebooting now.
	// +optional
	Remaining int32 `json:"remaining"`

	// failed is the number of the rollout's nodes whose reboot failed or is
	// stuck.
	// +optional
	Failed int32 `json:"failed"`

	// remainingNodes are the names of the rollout's nodes still to be
	// rebooted, including those rebooting now.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=5000
	// +kubebuilder:validation:items:MaxLength=253
	RemainingNodes []string `json:"remainingNodes,omitempty"`

	// failedNodes are the names of the rollout's nodes whose reboot failed
	// or is stuck.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=5000
	// +kubebuilder:validation:items:MaxLength=253
	FailedNodes []string `json:"failedNodes,omitempty"`
}

// DrainRecord is a completed drain: the node and the workloads whose pods
// it evicted.
type DrainRecord struct {
	// +required
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// workloads are the controllers of the evicted pods (at most 100 are
	// kept).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	Workloads []WorkloadRef `json:"workloads,omitempty"`
}

// RebootGroup is a set of nodes that kubext reboots in a rolling fashion, no
// more than maxUnavailable of them unavailable at once, inside maintenance
// windows. A node asks for a reboot with the annotation
// reboot.kubext.io/needed=true.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=rebootgroups,scope=Cluster,shortName=rbg
// +kubebuilder:validation:XValidation:rule="self.metadata.name != 'default' || !has(self.spec.nodeSelector)",message="the RebootGroup named default holds the nodes no other group selects and must not set spec.nodeSelector"
// +kubebuilder:printcolumn:name="MaxUnavailable",type=string,JSONPath=".spec.maxUnavailable"
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=".status.nodes",priority=1
// +kubebuilder:printcolumn:name="Needing",type=integer,JSONPath=".status.needing"
// +kubebuilder:printcolumn:name="Rebooting",type=integer,JSONPath=".status.rebooting"
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=".status.failed",priority=1
// +kubebuilder:printcolumn:name="Rollout",type=string,JSONPath=".status.rollout.state"
// +kubebuilder:printcolumn:name="Done",type=integer,JSONPath=".status.rollout.done"
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=".status.rollout.total"
// +kubebuilder:printcolumn:name="Resume At",type=string,JSONPath=".status.rollout.resumeAt",priority=1
// +kubebuilder:printcolumn:name="Paused",type=boolean,JSONPath=".spec.paused"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].message",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type RebootGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec describes the group.
	// +optional
	Spec RebootGroupSpec `json:"spec,omitempty"`

	// status is written by the operator.
	// +optional
	Status RebootGroupStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// RebootGroupList is a list of RebootGroups.
type RebootGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RebootGroup `json:"items"`
}
