package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Provider says how a pool's addresses are attached to nodes.
// +kubebuilder:validation:Enum=l2;aws
type Provider string

const (
	// ProviderL2 attaches addresses on the node itself: the node agent adds
	// the address to a network interface and announces it with gratuitous
	// ARP (IPv4) or unsolicited neighbour advertisements (IPv6). For bare
	// metal and any network where nodes share a layer-2 segment.
	ProviderL2 Provider = "l2"

	// ProviderAWS attaches addresses as secondary private IPs of the node's
	// EC2 network interface, moved with AllowReassignment.
	ProviderAWS Provider = "aws"
)

// Reasons of the Ready condition of an IPPool, besides ReasonReady.
const (
	// ReasonInvalidSpec: the pool's addresses or reserved list cannot be
	// used as written; the message says which entry and why.
	ReasonInvalidSpec = "InvalidSpec"

	// ReasonPoolOverlap: the pool's addresses overlap another IPPool's, so an
	// IP without spec.pool could not tell which pool it belongs to. The
	// message names the other pool.
	ReasonPoolOverlap = "PoolOverlap"

	// ReasonProviderNotSupported: spec.provider names a provider this
	// operator cannot attach addresses with (aws, when the manager runs
	// without the aws provider); the pool's IPs are allocated but never
	// attached.
	ReasonProviderNotSupported = "ProviderNotSupported"

	// ReasonDeleteBlocked is the reason of the Warning Event of a pool
	// being deleted while addresses are still allocated from it: it stays
	// until their IPs are deleted.
	ReasonDeleteBlocked = "DeleteBlocked"

	// ConditionWitnesses (pools with Witness failover) says whether the
	// pool's holds are on their witnesses' word: False, with reason
	// WitnessesUnreachable (ip_types.go), while some IP is held on its
	// node's Lease because its witnesses did not vouch in time.
	ConditionWitnesses = "Witnesses"
	// ReasonWitnessesHeard: every held IP of the pool is held on its
	// witnesses' word.
	ReasonWitnessesHeard = "WitnessesHeard"
)

// FailoverMode is how a pool's holders are kept to one (IPPoolSpec.Failover).
// +kubebuilder:validation:Enum=Lease;Witness
type FailoverMode string

// Failover modes.
const (
	FailoverLease   FailoverMode = "Lease"
	FailoverWitness FailoverMode = "Witness"
)

// IPPoolSpec describes the addresses a pool hands out and how they reach the
// nodes.
// +kubebuilder:validation:XValidation:rule="self.provider == 'l2' || !has(self.l2)",message="spec.l2 is only allowed when spec.provider is l2"
// +kubebuilder:validation:XValidation:rule="self.provider == 'aws' || !has(self.aws)",message="spec.aws is only allowed when spec.provider is aws"
type IPPoolSpec struct {
	// addresses are the ranges the pool hands out, as CIDRs (IPv4 or IPv6,
	// e.g. 192.0.2.0/24 or 2001:db8::/120; a single address is /32 or /128).
	// In IPv4 ranges shorter than /31 the first (network) and last
	// (broadcast) addresses are never handed out; in IPv6 ranges shorter
	// than /127 the first (subnet-router anycast) address is never handed
	// out. Ranges must not overlap each other or another pool's. Addresses
	// may be added at any time; removing a range that IPs still hold leaves
	// those IPs without a pool (reason AddressOutsidePool).
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=49
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="each entry of spec.addresses must be a CIDR, e.g. 192.0.2.0/24 or 2001:db8::/120"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || cidr(self) == cidr(self).masked()",message="each entry of spec.addresses must have no bits set after the prefix length, e.g. 192.0.2.0/24 rather than 192.0.2.1/24"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || ['0.0.0.0/8', '127.0.0.0/8', '169.254.0.0/16', '224.0.0.0/3', '::/127', 'fe80::/10', 'ff00::/8'].all(b, !cidr(self).containsCIDR(b) && !cidr(b).containsCIDR(self))",message="each entry of spec.addresses must hold only unicast addresses a node can answer for: it must not overlap 0.0.0.0/8, loopback (127.0.0.0/8, ::1), the unspecified address (::), link-local (169.254.0.0/16, fe80::/10), multicast or reserved (224.0.0.0/3, ff00::/8)"
	// +kubebuilder:validation:XValidation:rule="self.all(a, !isCIDR(a) || self.filter(b, isCIDR(b) && (cidr(a).containsCIDR(b) || cidr(b).containsCIDR(a))).size() == 1)",message="entries of spec.addresses must not overlap each other"
	Addresses []string `json:"addresses"`

	// reserved are addresses (192.0.2.1) or CIDRs (192.0.2.0/28) of this pool
	// that are never allocated automatically, e.g. a gateway or addresses
	// handed out by other means. An IP may still name a reserved address in
	// its spec.address: reserved means "only by explicit request". Entries
	// outside spec.addresses have no effect.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=49
	// +kubebuilder:validation:items:XValidation:rule="isIP(self) || isCIDR(self)",message="each entry of spec.reserved must be an IP address or a CIDR, e.g. 192.0.2.1 or 192.0.2.0/28"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || cidr(self) == cidr(self).masked()",message="each CIDR in spec.reserved must have no bits set after the prefix length, e.g. 192.0.2.0/28 rather than 192.0.2.1/28"
	Reserved []string `json:"reserved,omitempty"`

	// nodeSelector selects the nodes that may hold this pool's addresses, by
	// node label. Pods claiming an IP on any other node are not eligible to
	// hold it. Empty or unset selects every node.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`

	// claimants says which pods may claim the IPs of this pool, for every IP
	// in it; an IP's own spec.claimants can only narrow it further. A pod
	// may claim an IP only when its namespace is named (here by namespaces
	// or namespaceSelector, or in the IP's spec.claimants.namespaces) and
	// it passes every restriction that is set. Unset here and on an IP: no
	// pod may claim that IP.
	// +optional
	Claimants *PoolClaimants `json:"claimants,omitempty"`

	// provider says how addresses are attached to nodes: "l2" (the default)
	// puts the address on a node interface and announces it with gratuitous
	// ARP / unsolicited neighbour advertisement, for bare metal and lab
	// networks; "aws" assigns it as a secondary private IP of the node's EC2
	// network interface. It cannot change; create a new pool instead.
	// +optional
	// +kubebuilder:default=l2
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.provider cannot change; create a new IPPool to attach addresses another way"
	Provider Provider `json:"provider,omitempty"`

	// failover says how a node that stops is told apart from one that is
	// only cut off from the API server. "Witness" (the default): the nodes
	// the pool selects vouch for each other directly, over UDP on the node
	// network (the ip-agents' --witness-port, 7946); the holder keeps an
	// address while a majority of the witnesses named in the IP's status
	// vouches for it, and the address moves once a majority has declared
	// it silent: failover in under a second, and no outage while the API
	// server stalls (docs/design/failover.md). Where the witnesses cannot
	// be heard, the node holds the address on its Lease instead and the
	// pool's condition Witnesses says so. "Lease": the holder keeps an
	// address only while it renews its heartbeat Lease, and the address
	// moves once the API server shows that it stopped renewing for a lease
	// duration (about 2 s); a control-plane stall longer than that
	// silences every address. A change applies to new holds; a live hold
	// keeps the rule it was taken under.
	// +optional
	// +kubebuilder:default=Witness
	Failover FailoverMode `json:"failover,omitempty"`

	// l2 holds settings of the l2 provider.
	// +optional
	L2 *L2Provider `json:"l2,omitempty"`

	// aws holds settings of the aws provider.
	// +optional
	AWS *AWSProvider `json:"aws,omitempty"`
}

// PoolClaimants restricts which pods may claim the IPs of a pool.
// +kubebuilder:validation:XValidation:rule="has(self.namespaces) || has(self.namespaceSelector) || has(self.podSelector)",message="spec.claimants needs namespaces, namespaceSelector or podSelector"
type PoolClaimants struct {
	// namespaces are namespaces whose pods may claim the pool's IPs.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespaces []string `json:"namespaces,omitempty"`

	// namespaceSelector selects, by namespace label, namespaces whose pods
	// may claim the pool's IPs. When both namespaces and namespaceSelector
	// are set, a namespace is allowed when either names it. Select on a
	// label only namespace administrators can set, such as
	// kubernetes.io/metadata.name.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// podSelector, when set, requires the claiming pod's labels to match.
	// +optional
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`
}

// L2Provider holds settings of the l2 provider.
type L2Provider struct {
	// interface is the name of the node network interface the address is
	// added to, e.g. eth0 or bond0.100. By default, the interface that holds
	// the node's route to the address.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="self.matches('^[^/:\\\\s\\\\v]+$') && self != '.' && self != '..'",message="spec.l2.interface must be a Linux interface name: 1 to 15 characters, no '/', ':' or whitespace, not '.' or '..'"
	Interface string `json:"interface,omitempty"`
}

// AWSProvider holds settings of the aws provider.
type AWSProvider struct {
	// publicIPv4Pool is the ID of the BYOIP public IPv4 pool
	// (ipv4pool-ec2-...) this IPPool's addresses belong to. When set, the
	// addresses are public: each is allocated as an Elastic IP from that pool
	// and associated with a secondary private IP of the holder node's network
	// interface. When unset, the addresses are private addresses of the
	// nodes' subnet, assigned directly as secondary private IPs.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^ipv4pool-ec2-[0-9a-f]+$`
	PublicIPv4Pool string `json:"publicIPv4Pool,omitempty"`
}

// IPPoolStatus reports the pool's capacity and use.
type IPPoolStatus struct {
	// size is the number of addresses the pool can hand out (excluding
	// network, broadcast and reserved addresses). It saturates at
	// 9223372036854775807 for very large IPv6 ranges.
	// +optional
	Size int64 `json:"size"`

	// allocated is the number of the pool's addresses reserved by IPs,
	// including reserved addresses that IPs named explicitly.
	// +optional
	Allocated int32 `json:"allocated"`

	// available is the number of addresses still free for automatic
	// allocation: size minus the allocated addresses that are not reserved.
	// Like size, it saturates.
	// +optional
	Available int64 `json:"available"`

	// observedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions has Ready: True when the pool can hand out addresses,
	// False with reason InvalidSpec or PoolOverlap otherwise.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// IPPool is a set of address ranges that IPs are allocated from, the nodes
// allowed to hold them, and how they are attached to those nodes.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=ippools,scope=Cluster,shortName=ippool
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=".spec.provider"
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=".status.size"
// +kubebuilder:printcolumn:name="Allocated",type=integer,JSONPath=".status.allocated"
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=".status.available",priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].message",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type IPPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec describes the pool.
	// +required
	Spec IPPoolSpec `json:"spec"`

	// status is written by the operator.
	// +optional
	Status IPPoolStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// IPPoolList is a list of IPPools.
type IPPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPPool `json:"items"`
}
