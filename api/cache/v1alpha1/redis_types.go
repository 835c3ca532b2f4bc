package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels kubext sets on a Redis's objects and pods.
const (
	// LabelRedis is on every object and pod of a Redis; its value is the
	// Redis's name.
	LabelRedis = "cache.kubext.io/redis"
	// LabelRole is on each member pod kubext has observed in its role:
	// RolePrimary on the primary, RoleReplica on the replicas that
	// replicate from it. The primary and replicas Services select on it.
	LabelRole = "cache.kubext.io/role"
	// RolePrimary is the LabelRole value of the primary's pod.
	RolePrimary = "primary"
	// RoleReplica is the LabelRole value of a replica's pod.
	RoleReplica = "replica"
)

// Condition types of a Redis.
const (
	// ConditionReady is True when every member is in service: one primary,
	// and each other member replicating from it with its link up.
	ConditionReady = "Ready"
	// ConditionDegraded is True when replication needs or needed repair:
	// the primary is lost, a replica was just promoted, or members cannot be
	// reached.
	ConditionDegraded = "Degraded"
)

// Reasons of the Ready and Degraded conditions.
const (
	// ReasonReplicating (Ready): the primary and every replica are in
	// service.
	ReasonReplicating = "Replicating"
	// ReasonSyncing (Ready): some members are not in service yet: their pod
	// is starting, or they are copying the primary's data.
	ReasonSyncing = "Syncing"
	// ReasonMembersUnreachable (Ready, Degraded): kubext could not connect
	// to some members' Redis; the message names them and says why.
	ReasonMembersUnreachable = "MembersUnreachable"
	// ReasonPrimaryLost (Ready, Degraded): no member is primary and none
	// can be promoted (none is reachable).
	ReasonPrimaryLost = "PrimaryLost"
	// ReasonPromoting (Degraded): the primary was gone and kubext has just
	// promoted the replica with the most data.
	ReasonPromoting = "Promoting"
	// ReasonAsExpected (Degraded False): nothing needs repair.
	ReasonAsExpected = "AsExpected"
	// ReasonSecretNotFound (Ready): the Secret or key named by
	// spec.passwordSecretKeyRef does not exist, so the pods cannot start and
	// kubext cannot talk to them.
	ReasonSecretNotFound = "SecretNotFound"
	// ReasonSecretForbidden (Ready): kubext may not read Secrets in the
	// Redis's namespace (its Secret rights are limited to some namespaces,
	// e.g. the chart's rbac.redisSecretNamespaces), so it cannot talk to
	// the members; the pods themselves read the Secret as usual.
	ReasonSecretForbidden = "SecretForbidden"
	// ReasonObjectExists (Ready): an object kubext must create (the
	// StatefulSet, a Service or the PodDisruptionBudget) exists and is not
	// controlled by this Redis, so kubext leaves it alone. Delete or rename
	// it, or rename the Redis.
	ReasonObjectExists = "ObjectExists"
	// ReasonRejected (Ready): the API server refused an object built from
	// the spec; the message quotes it. Fix the spec.
	ReasonRejected = "Rejected"
	// ReasonApplyFailed (Ready): writing an object failed for a reason that
	// may pass; kubext retries.
	ReasonApplyFailed = "ApplyFailed"
)

// MemberState is what kubext observes of one member.
// +kubebuilder:validation:Enum=Primary;Replica;Syncing;Unreachable;Pending
type MemberState string

const (
	// MemberPrimary means the member is the primary.
	MemberPrimary MemberState = "Primary"
	// MemberReplica means the member replicates from the primary, link up.
	MemberReplica MemberState = "Replica"
	// MemberSyncing means the member was pointed at the primary and its link is
	// not up yet (connecting, or copying the primary's data).
	MemberSyncing MemberState = "Syncing"
	// MemberUnreachable means the member's pod runs, but kubext could not
	// connect to its Redis.
	MemberUnreachable MemberState = "Unreachable"
	// MemberPending means the member's pod does not exist, is not running or
	// has no IP address yet.
	MemberPending MemberState = "Pending"
)

// SecretKeyRef names a key of a Secret in the Redis's namespace.
type SecretKeyRef struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="name must be the name of a Secret: lower case letters, digits, '-' and '.'"
	Name string `json:"name"`
	// key of the Secret's data that holds the password. Defaults to
	// "password".
	// +optional
	// +kubebuilder:default=password
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[-._a-zA-Z0-9]+$')",message="key must be a Secret data key: letters, digits, '-', '_' and '.'"
	Key string `json:"key,omitempty"`
}

// Persistence gives each member a PersistentVolumeClaim for its data.
type Persistence struct {
	// size of each member's volume, e.g. 1Gi.
	// +required
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="persistence.size must be more than 0, e.g. 1Gi"
	Size resource.Quantity `json:"size"`
	// storageClassName is the StorageClass of the volumes; the cluster's
	// default class when not set.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// Authentication says whether a Redis's members require a password.
// +kubebuilder:validation:Enum=Password;None
type Authentication string

const (
	// AuthenticationPassword means clients and replicas must give the password
	// of spec.passwordSecretKeyRef, or the one kubext generates.
	AuthenticationPassword Authentication = "Password"
	// AuthenticationNone means the members accept clients without a password.
	AuthenticationNone Authentication = "None"
)

// GeneratedPasswordKey is the key of the password in the Secret kubext
// generates for a Redis that names none (<name>-auth).
const GeneratedPasswordKey = "password"

// GeneratedPasswordSecretName is the name of the Secret kubext generates
// for a Redis that names none.
func GeneratedPasswordSecretName(redisName string) string { return redisName + "-auth" }

// RedisSpec is the Redis the user wants.
// +kubebuilder:validation:XValidation:rule="!(has(self.authentication) && self.authentication == 'None' && has(self.passwordSecretKeyRef))",message="passwordSecretKeyRef names a password, authentication None asks for none: set one or the other"
// +kubebuilder:validation:XValidation:rule="has(self.persistence) == has(oldSelf.persistence) && (!has(self.persistence) || self.persistence == oldSelf.persistence)",message="persistence cannot be added, removed or changed once the Redis exists (a StatefulSet's volume claim templates cannot change); create a new Redis instead"
type RedisSpec struct {
	// size is the number of members: one primary and size-1 replicas of it.
	// `kubectl patch redis <name> --type=merge -p '{"spec":{"size":4}}'` or
	// `kubectl scale redis <name> --replicas=4` changes it; new members
	// replicate from the primary.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Size int32 `json:"size"`
	// image is the Redis container image, version 6.2 or newer. Pin a
	// version tag or a digest (@sha256:...): a change of image rolls the
	// members one at a time, so it should be a change of this field.
	// +optional
	// +kubebuilder:default="redis:7.2.5"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:space:]]')",message="image must not contain whitespace"
	// +kubebuilder:validation:XValidation:rule="self.matches('(:[A-Za-z0-9_][A-Za-z0-9_.-]*|@sha256:[a-f0-9]{64})$')",message="image must be pinned to a version tag or a digest, e.g. redis:7.2.5 or redis@sha256:<64 hex digits>"
	// +kubebuilder:validation:XValidation:rule="!self.endsWith(':latest')",message="image must not be :latest; pin a version tag such as redis:7.2.5"
	Image string `json:"image,omitempty"`
	// authentication says whether clients and replicas must give a
	// password (Redis requirepass and masterauth). Password (the default):
	// they must, the one in spec.passwordSecretKeyRef or, without it, one
	// kubext generates into a Secret <name>-auth (key "password", owned by
	// the Redis; status.passwordSecretKeyRef names it), with protected mode
	// on. None: the members accept any client that reaches them, without a
	// password (protected mode off, else they would refuse every client
	// from another pod); spec.passwordSecretKeyRef must not be set.
	// Changing it rolls the members, and clients must change with it.
	// +optional
	// +kubebuilder:default=Password
	Authentication Authentication `json:"authentication,omitempty"`
	// passwordSecretKeyRef names the Secret key holding the password that
	// clients and replicas must give (Redis requirepass and masterauth).
	// Without it (and unless authentication is None) kubext generates one.
	// The pods read it when they start: after changing the password,
	// restart them.
	// +optional
	PasswordSecretKeyRef *SecretKeyRef `json:"passwordSecretKeyRef,omitempty"`
	// persistence gives each member a volume of its own (append-only file
	// on), kept across restarts. Without it members keep their data in
	// memory and a restarted member copies it from the primary. It cannot
	// change once the Redis exists.
	// +optional
	Persistence *Persistence `json:"persistence,omitempty"`
	// resources are the compute resources of each member's Redis container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
}

// RedisMember is one member as kubext last observed it.
type RedisMember struct {
	// name of the member's pod.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// state: Primary; Replica (replicating from the primary, link up);
	// Syncing (pointed at the primary, link not up yet); Unreachable (its
	// pod runs but kubext could not connect to its Redis); Pending (no
	// running pod with an IP address yet).
	// +required
	State MemberState `json:"state"`
}

// RedisStatus is what kubext observes of the Redis's pods and members.
type RedisStatus struct {
	// observedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// replicas is the number of member pods the StatefulSet has.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// readyReplicas is the number of members in service: the primary, and
	// the replicas replicating from it with their link up.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// primary is the name of the pod that is the primary, as observed; empty
	// when no member could be seen to be primary.
	// +optional
	Primary string `json:"primary,omitempty"`
	// passwordSecretKeyRef is the Secret key of the password the members
	// require: spec.passwordSecretKeyRef, or the Secret kubext generated
	// (<name>-auth, key "password"). Empty when authentication is None.
	// +optional
	PasswordSecretKeyRef *SecretKeyRef `json:"passwordSecretKeyRef,omitempty"`
	// members lists each member (pods 0 to size-1) and its state.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	Members []RedisMember `json:"members,omitempty"`
	// conditions: Ready (True when every member is in service) and
	// Degraded (True when replication needs or needed repair), with the
	// reason and a message.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Redis is a replicated Redis: kubext runs size members in a StatefulSet of
// the same name, makes one the primary and the others replicas of it,
// promotes a replica when the primary is gone, and serves it through the
// Services <name>-primary (read-write) and <name>-replicas (read-only);
// <name>-headless gives each member a stable DNS name. Deleting the Redis
// deletes them all.
//
// +kubebuilder:object:root=true
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]{0,50}[a-z0-9])?$')",message="the name of a Redis must be at most 52 lower case letters, digits and '-', starting with a letter and ending with a letter or digit: its pods are <name>-<n> and its Services <name>-primary, <name>-replicas and <name>-headless"
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.size,statuspath=.status.replicas
// +kubebuilder:resource:path=redis,singular=redis,scope=Namespaced
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=".spec.size"
// +kubebuilder:printcolumn:name="In Service",type=integer,JSONPath=".status.readyReplicas"
// +kubebuilder:printcolumn:name="Primary",type=string,JSONPath=".status.primary"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].reason"
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=".spec.image",priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].message",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type Redis struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the Redis the user wants.
	// +required
	Spec RedisSpec `json:"spec"`
	// status is written by kubext from what it observes.
	// +optional
	Status RedisStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// RedisList is a list of Redis objects.
type RedisList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Redis `json:"items"`
}
