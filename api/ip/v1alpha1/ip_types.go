package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// AnnotationIP is the pod annotation that claims an IP: its value is the
	// name of the IP object. Several pods may claim the same IP; one holds it.
	AnnotationIP = "ip.kubext.io/ip"

	// AnnotationMoveTo on an IP asks the operator to move the address to
	// one of its standbys, given as namespace/name (what `kubectl kubext ip
	// move` sets). The operator honours it once, if that pod is an eligible
	// standby, and then removes the annotation; otherwise it reports why in
	// an Event and removes it too.
	AnnotationMoveTo = "ip.kubext.io/move-to"
	// Finalizer keeps an IP until its address is detached from every node and
	// its reservation released.
	Finalizer = "ip.kubext.io/finalizer"

	// ReservationFinalizer is on every networking.k8s.io/v1 IPAddress that
	// reserves an address for an IP. Whoever deletes the IPAddress (a
	// cascading delete of the IP, or anyone allowed to delete IPAddresses),
	// the address stays reserved until the operator has seen it released
	// from every node; only then does it remove the finalizer.
	ReservationFinalizer = "ip.kubext.io/reservation"

	// LabelPool is set on the networking.k8s.io/v1 IPAddress objects that
	// reserve addresses for IPs; its value is the name of the IPPool.
	LabelPool = "ip.kubext.io/pool"

	// ManagedBy is the value of app.kubernetes.io/managed-by, and of
	// IPAddress's own ipaddress.kubernetes.io/managed-by label, on the objects
	// kubext creates. The kube-apiserver's Service IP repair loop only garbage
	// collects IPAddress objects managed by its own allocator, so it leaves
	// these alone.
	ManagedBy = "ip.kubext.io"
)

// Condition types shared by IP and IPPool.
const (
	// ConditionReady summarises an object. An IP is Ready when it is both
	// Allocated and Attached; when it is not, Ready repeats the reason and
	// message of the first of those that is not True. An IPPool is Ready when
	// it can hand out addresses.
	ConditionReady = "Ready"

	// ConditionAllocated is True when an address is reserved for the IP in the
	// API server, so that no other IP can hold it.
	ConditionAllocated = "Allocated"

	// ConditionAttached is True when the agent on the node that should hold
	// the address has confirmed it answers for it and, for an aws pool,
	// EC2's own description shows the address routed to that node.
	ConditionAttached = "Attached"
)

// Reasons of the Allocated condition of an IP.
const (
	// ReasonAddressAllocated: the address in status.address is reserved for
	// this IP.
	ReasonAddressAllocated = "AddressAllocated"

	// ReasonAddressInUse: the address in spec.address is already reserved by
	// another IP (or by a Service ClusterIP); the message names the holder.
	ReasonAddressInUse = "AddressInUse"

	// ReasonPoolExhausted: spec.address is empty and the pool has no
	// unreserved address left.
	ReasonPoolExhausted = "PoolExhausted"

	// ReasonPoolNotFound: the IPPool named by spec.pool does not exist, or no
	// IPPool contains spec.address.
	ReasonPoolNotFound = "PoolNotFound"

	// ReasonAddressOutsidePool: spec.address is not an address that
	// spec.pool hands out (outside its addresses, or a network or broadcast
	// address).
	ReasonAddressOutsidePool = "AddressOutsidePool"
)

// Reasons of the Attached condition of an IP.
const (
	// ReasonAgentConfirmed: the agent on status.node has programmed the
	// address and reported it in status.attachedNode.
	ReasonAgentConfirmed = "AgentConfirmed"

	// ReasonWaitingForAgent: a holder is chosen; the agent on its node has not
	// confirmed yet.
	ReasonWaitingForAgent = "WaitingForAgent"

	// ReasonDetaching: the address is being removed from a node (the IP is
	// being deleted or reassigned, or its holder moved) and that node's agent
	// has not confirmed yet.
	ReasonDetaching = "Detaching"

	// ReasonNoClaimant: no pod carries the ip.kubext.io/ip annotation naming
	// this IP.
	ReasonNoClaimant = "NoClaimant"

	// ReasonNoEligibleNode: pods claim the IP, but none is Ready on a healthy
	// node that the pool's nodeSelector allows.
	ReasonNoEligibleNode = "NoEligibleNode"

	// ReasonNodeLost: the node holding the address stopped renewing its
	// heartbeat (or its witnesses declared it silent) and no standby could
	// take over.
	ReasonNodeLost = "NodeLost"

	// ReasonWitnessesUnreachable (Event): the node the IP is placed on
	// heard no majority of its witnesses in time and holds it on its
	// heartbeat Lease instead (Witness failover falling back to Lease).
	ReasonWitnessesUnreachable = "WitnessesUnreachable"

	// ReasonNoAllowedClaimant: pods claim the IP, but none is allowed to by
	// spec.claimants and the pool's spec.claimants.
	ReasonNoAllowedClaimant = "NoAllowedClaimant"

	// ReasonProgramming: the agent on status.node has taken the address
	// (status.attachedNode) and is programming the node; it has not
	// confirmed yet that traffic reaches the holder pod.
	ReasonProgramming = "Programming"

	// ReasonNotSupported: the IP's pool uses a provider this version cannot
	// attach addresses with; nothing is attached.
	ReasonNotSupported = "NotSupported"

	// ReasonEC2Attaching: the agent on status.node has taken the address;
	// the operator is moving it there in EC2 (aws pools) and has not
	// verified it yet. Failures of EC2 replace it with the provider's
	// reason (IAMPermissionMissing, SecondaryIPLimit,
	// AddressNotInNodeSubnets, Throttled, EIPQuota, ...).
	ReasonEC2Attaching = "EC2Attaching"

	// ReasonAddressConflict: the address is also a node's address, inside
	// the cluster's pod or service ranges, or the gateway of a node's
	// network; attaching it would break that. Nothing is attached.
	ReasonAddressConflict = "AddressConflict"
)

// ReasonReady is the reason of a Ready condition that is True, on an IP or an
// IPPool.
const ReasonReady = "Ready"

// ReasonReconciling is the reason of a Ready condition that cannot be
// summed up yet: the condition named in its message has not been evaluated.
const ReasonReconciling = "Reconciling"

// IPSpec is what the user asks for: a fixed address, or a pool to allocate one
// from.
type IPSpec struct {
	// address is the fixed address, in canonical form (IPv4 like 192.0.2.10,
	// IPv6 like 2001:db8::10). Leave it empty to have one allocated from
	// spec.pool; status.address then shows it, and writing that address here
	// pins it. An address may be named here even when the pool reserves it.
	// Without spec.pool, the IPPool containing the address is used; an
	// address in no pool is refused with the Allocated condition
	// (reason PoolNotFound). Once an address is assigned it cannot change
	// unless spec.reassign is true.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip.isCanonical(self)",message="spec.address must be a canonical IPv4 or IPv6 address, e.g. 192.0.2.10 or 2001:db8::10"
	// +kubebuilder:validation:XValidation:rule="!isIP(self) || !ip.isCanonical(self) || ip(self).isGlobalUnicast()",message="spec.address must be a unicast address a node can answer for: not unspecified (0.0.0.0, ::), loopback (127.0.0.0/8, ::1), link-local (169.254.0.0/16, fe80::/10), multicast (224.0.0.0/4, ff00::/8) or broadcast"
	Address string `json:"address,omitempty"`

	// pool is the name of the IPPool that allocates the address (when
	// spec.address is empty), decides which nodes may hold it and how it is
	// attached. It cannot change once set.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Pool string `json:"pool,omitempty"`

	// reassign allows spec.address to change after an address has been
	// assigned. When false (the default) the address is fixed for the life
	// of the IP, which is what an address on a partner's allow-list needs:
	// once status.assigned is true the API server refuses any change to
	// spec.address, except writing the allocated address into an empty
	// spec.address to pin it. When true (it may be set in the same edit as
	// the new address), editing spec.address moves the IP: the operator
	// detaches the old address from its node (status.original keeps the
	// spec it was assigned under until the detach is confirmed), releases
	// it, then reserves and attaches the new one. Pods keep their claim
	// throughout; traffic to the old address stops.
	// +optional
	Reassign bool `json:"reassign,omitempty"`

	// claimants says which pods may claim this IP with the ip.kubext.io/ip
	// annotation. A pod that is not allowed never holds the address and is
	// never a standby, whatever its annotation or age; it gets a Warning
	// Event (ClaimRefused) saying why. Secure by default: a pod may claim
	// an IP only when its namespace is named here or by the pool's
	// spec.claimants (namespaces or namespaceSelector), and it passes every
	// restriction that is set, here and on the pool. An IP and pool that
	// name no namespace are claimable by no pod; their Attached condition
	// says so (reason NoAllowedClaimant).
	// +optional
	Claimants *IPClaimants `json:"claimants,omitempty"`
}

// IPClaimants restricts which pods may claim an IP.
type IPClaimants struct {
	// namespaces are the namespaces whose pods may claim the IP.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespaces []string `json:"namespaces,omitempty"`

	// podSelector, when set, further requires the claiming pod's labels to
	// match it. An empty selector matches every pod.
	// +optional
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`
}

// IPStatus is what the operator and the node agents observe.
type IPStatus struct {
	// address is the address reserved for this IP: the one to put on
	// allow-lists. During a reassign it stays the old address until that is
	// detached.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	Address string `json:"address,omitempty"`

	// pool is the IPPool the address belongs to: spec.pool, or the pool
	// found to contain spec.address.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Pool string `json:"pool,omitempty"`

	// assigned is true while an address is reserved for this IP.
	// +optional
	Assigned bool `json:"assigned,omitempty"`

	// claimed is true while at least one pod claims this IP with the
	// ip.kubext.io/ip annotation.
	// +optional
	Claimed bool `json:"claimed,omitempty"`

	// node is the node that should hold the address now: the node of the
	// holder pod. Node agents select their IPs by this field.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node,omitempty"`

	// pod is the holder, as namespace/name: the claiming pod the address is
	// attached for.
	// +optional
	// +kubebuilder:validation:MaxLength=317
	Pod string `json:"pod,omitempty"`

	// podUID is the holder pod's UID. The node's agent forwards the address
	// only to the pod of that name with this UID: a pod deleted and created
	// again under the same name is another pod, which the controller must
	// choose (and may refuse) before it gets the address. Empty on IPs
	// placed before the field existed, until the controller next writes
	// them.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	PodUID string `json:"podUID,omitempty"`

	// standbys are the other Ready claimants, as namespace/name, in the order
	// they would take over (oldest first). At most 64 are listed.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=317
	Standbys []string `json:"standbys,omitempty"`

	// original is the spec under which the current address was assigned.
	// On a reassign it keeps the old address until its detach is confirmed.
	// +optional
	Original *IPSpec `json:"original,omitempty"`

	// attachedNode is the node whose agent may answer for the address. Its
	// agent writes it *before* it programs anything (only while status.node
	// names its node and no other node is attached), and clears it only once
	// nothing of the address is left on the node, so a node that might be
	// answering is always named here. It differs from node while the
	// address moves; node agents also select IPs by it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	AttachedNode string `json:"attachedNode,omitempty"`

	// attachedPod is the holder pod (namespace/name) that the agent on
	// attachedNode has confirmed the kernel forwards the address to, and
	// sends for: the address is on the interface, traffic to it reaches this
	// pod, and the pod's traffic leaves from it. Empty while the agent is
	// still programming. The IP is Attached when attachedNode and
	// attachedPod equal node and pod.
	// +optional
	// +kubebuilder:validation:MaxLength=317
	AttachedPod string `json:"attachedPod,omitempty"`

	// witnesses are the nodes that vouch for the hold of the node in
	// status.node when the pool's failover is Witness (set by the
	// controller with status.node, never changed while that node holds
	// the address; empty in Lease failover). A majority of them must
	// vouch for the holder to keep answering, and must declare it silent
	// before the address moves.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=5
	// +kubebuilder:validation:items:MaxLength=253
	Witnesses []string `json:"witnesses,omitempty"`

	// attachedGeneration is the session of attachedNode's agent that took
	// the hold, written by the agent with attachedNode, when it holds the
	// address on its witnesses' word (Witness failover); 0 for a hold on
	// the agent's heartbeat Lease.
	// +optional
	// +kubebuilder:validation:Minimum=0
	AttachedGeneration int64 `json:"attachedGeneration,omitempty"`

	// aws is what EC2 handed out for this IP, for IPs of a pool with
	// provider aws: the operator records it so that a restart finds and
	// reuses it, and releases on delete only what it allocated. Node
	// agents send no ARP or neighbour advertisement for an IP with this
	// field: in a VPC, EC2 decides which node receives the address.
	// +optional
	AWS *AWSStatus `json:"aws,omitempty"`

	// lastMoveTime is when the address last moved to another node.
	// +optional
	LastMoveTime *metav1.Time `json:"lastMoveTime,omitempty"`

	// observedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions are Allocated (an address is reserved), Attached (the
	// holder's node answers for it) and Ready (both).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// AWSStatus is where the address of an IP of an aws pool is on EC2.
type AWSStatus struct {
	// publicIPv4Pool is the BYOIP pool the Elastic IP is allocated from;
	// empty in private mode (the address is a secondary private IP).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	PublicIPv4Pool string `json:"publicIPv4Pool,omitempty"`

	// node is the node that EC2 was last verified to route the address
	// to; empty while it is routed to none.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node,omitempty"`

	// instanceID is node's EC2 instance (from its spec.providerID).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	InstanceID string `json:"instanceID,omitempty"`

	// vpcID is the VPC of networkInterfaceID.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	VPCID string `json:"vpcID,omitempty"`

	// networkInterfaceID is the ENI that holds the address (private mode)
	// or the private IP the Elastic IP is associated with (public mode).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	NetworkInterfaceID string `json:"networkInterfaceID,omitempty"`

	// privateIP is the address itself (private mode) or the secondary
	// private IP the Elastic IP is associated with (public mode).
	// +optional
	// +kubebuilder:validation:MaxLength=45
	PrivateIP string `json:"privateIP,omitempty"`

	// allocationID is the Elastic IP's allocation (public mode). It is
	// kept while the address is routed to no node, so that the next
	// attach reuses it; it is released when the IP is deleted, only if
	// the operator allocated it (tag kubext.io/ip).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	AllocationID string `json:"allocationID,omitempty"`

	// associationID is the Elastic IP's association with privateIP on
	// networkInterfaceID (public mode).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	AssociationID string `json:"associationID,omitempty"`

	// giveBack are secondary private IPs the operator assigned for the
	// Elastic IP on network interfaces the Elastic IP has since left (a
	// move to a node in another subnet, public mode). No Elastic IP is
	// associated with them and no agent answers on them; the operator
	// unassigns them just after the move, so that a failover waits for
	// the move's calls only, and before it releases the Elastic IP.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	GiveBack []AWSPrivateIP `json:"giveBack,omitempty"`

	// pending is a secondary private IP the operator chose for the Elastic
	// IP and recorded here before it asked EC2 to assign it (public mode:
	// the first attach, a move to another subnet). Should the operator stop
	// between EC2's answer and recording it, the next attach reuses this
	// address, or gives it back, instead of leaving it on the interface.
	// +optional
	Pending *AWSPrivateIP `json:"pending,omitempty"`
}

// AWSPrivateIP is a secondary private IP of a network interface.
type AWSPrivateIP struct {
	// networkInterfaceID is the ENI that holds privateIP.
	// +kubebuilder:validation:MaxLength=64
	NetworkInterfaceID string `json:"networkInterfaceID"`

	// privateIP is the address.
	// +kubebuilder:validation:MaxLength=45
	PrivateIP string `json:"privateIP"`
}

// IP is one fixed address that follows the pods claiming it. Pods claim it
// with the annotation ip.kubext.io/ip: <name>; the address is attached to the
// node of one Ready claimant (the holder) and detached from every other node,
// and the other Ready claimants are standbys that take over at once. Note that
// "kubectl get ip" lists the built-in IPAddress objects (short name "ip");
// use "kubectl get ips" or the short name "kip".
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=ips,scope=Cluster,shortName=kip
// +kubebuilder:selectablefield:JSONPath=".status.node"
// +kubebuilder:selectablefield:JSONPath=".status.attachedNode"
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=".status.address"
// +kubebuilder:printcolumn:name="Pod",type=string,JSONPath=".status.pod"
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=".status.node"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=".status.pool",priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].message",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.assigned) || !oldSelf.status.assigned || (has(self.spec.reassign) && self.spec.reassign) || (has(self.spec.address) == has(oldSelf.spec.address) && (!has(self.spec.address) || self.spec.address == oldSelf.spec.address)) || (!has(oldSelf.spec.address) && has(self.spec.address) && has(oldSelf.status.address) && self.spec.address == oldSelf.status.address)",message="spec.address cannot change while the IP is assigned; set spec.reassign: true to move this IP to a new address",fieldPath=".spec.address"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.spec.pool) || (has(self.spec.pool) && self.spec.pool == oldSelf.spec.pool)",message="spec.pool cannot change once set; create a new IP to use another pool",fieldPath=".spec.pool"
type IP struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec names the address, or the pool to allocate it from.
	// +required
	// +kubebuilder:validation:XValidation:rule="has(self.address) || has(self.pool)",message="set spec.address, spec.pool or both"
	Spec IPSpec `json:"spec"`

	// status is written by the operator and the node agents.
	// +optional
	Status IPStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// IPList is a list of IPs.
type IPList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IP `json:"items"`
}
