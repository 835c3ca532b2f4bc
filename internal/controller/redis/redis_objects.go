package redis

import (
	"context"
	"errors"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
	"github.com/kubext/kubext/internal/ownedapply"
)

const (
	// FieldOwner is the server-side apply field manager of a Redis's
	// objects: it owns exactly the fields the desired* builders set.
	FieldOwner = "kubext-redis"

	// ContainerName names the Redis container of each member pod.
	ContainerName = "redis"
	// Port is the port every member's Redis listens on.
	Port = 6379

	dataVolume = "data"

	// nobodyPort is where a member that has not been given its primary yet
	// looks for one: port 1 of its own loopback, where no Redis listens.
	nobodyPort = 1
)

// Service names of a Redis.
func headlessName(rd *cachev1.Redis) string { return rd.Name + "-headless" }
func primaryName(rd *cachev1.Redis) string  { return rd.Name + "-primary" }
func replicasName(rd *cachev1.Redis) string { return rd.Name + "-replicas" }

// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch

// reconcileObjects makes the Redis's StatefulSet, Services and
// PodDisruptionBudget match its spec and returns the StatefulSet as it now
// stands.
func (r *Reconciler) reconcileObjects(ctx context.Context, rd *cachev1.Redis) (*appsv1.StatefulSet, error) {
	sts, err := apply(ctx, r, rd, desiredStatefulSet(rd), appsv1ac.ExtractStatefulSet)
	if err != nil {
		return nil, err
	}
	for _, svc := range desiredServices(rd) {
		if _, err := apply(ctx, r, rd, svc, corev1ac.ExtractService); err != nil {
			return nil, err
		}
	}
	for _, pdb := range desiredPDBs(rd) {
		if _, err := apply(ctx, r, rd, pdb, policyv1ac.ExtractPodDisruptionBudget); err != nil {
			return nil, err
		}
	}
	return sts, nil
}

// applyConfiguration is what the client-go apply configurations of the
// objects a Redis owns have in common.
type applyConfiguration interface {
	ownedapply.Configuration
	GetKind() *string
}

// apply makes one owned object match want (see ownedapply.Apply), sets the
// Ready condition when it cannot, and tells of what it wrote in an Event.
// It returns the object as it now stands, or ownedapply.ErrNotControlled
// when an object of the name is not the Redis's.
func apply[T any, O interface {
	*T
	client.Object
}, A applyConfiguration](ctx context.Context, r *Reconciler, rd *cachev1.Redis, want A, extract func(O, string) (A, error)) (O, error) {
	kind, name := *want.GetKind(), *want.GetName()
	live, result, err := ownedapply.Apply(ctx, r.Client, FieldOwner, rd, rd.Status.ObservedGeneration, want, extract)
	var write *ownedapply.WriteError
	switch {
	case errors.Is(err, ownedapply.ErrNotControlled):
		setCondition(rd, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonObjectExists,
			"%s %s exists and is not controlled by this Redis; delete or rename it, or rename the Redis", kind, name)
		return nil, err
	case errors.As(err, &write) && write.Rejected:
		setCondition(rd, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonRejected,
			"The API server refused %s %s: %v", kind, name, write.Err)
		r.Recorder.Eventf(rd, nil, corev1.EventTypeWarning, cachev1.ReasonRejected, "Apply", "The API server refused %s %s: %v", kind, name, write.Err)
		return nil, reconcile.TerminalError(write.Err)
	case errors.As(err, &write):
		setCondition(rd, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonApplyFailed, "Writing %s %s failed, will retry: %v", kind, name, write.Err)
		return nil, write.Err
	case err != nil:
		return nil, err
	}
	switch result {
	case ownedapply.Created:
		r.Recorder.Eventf(rd, live, corev1.EventTypeNormal, "Created", "Apply", "Created %s %s", kind, name)
	case ownedapply.Updated:
		r.Recorder.Eventf(rd, live, corev1.EventTypeNormal, "Updated", "Apply", "Updated %s %s to the Redis's new spec", kind, name)
	case ownedapply.Healed:
		r.Recorder.Eventf(rd, live, corev1.EventTypeNormal, "Healed", "Apply", "Put back %s %s, changed outside of its Redis", kind, name)
	}
	return live, nil
}

// labels are on every object and pod of a Redis.
func labels(rd *cachev1.Redis) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":       "redis",
		"app.kubernetes.io/instance":   rd.Name,
		"app.kubernetes.io/managed-by": "kubext",
		cachev1.LabelRedis:             rd.Name,
	}
}

// selector selects a Redis's pods. It is part of the StatefulSet's
// selector, which cannot change: keep it to the one label.
func selector(rd *cachev1.Redis) map[string]string {
	return map[string]string{cachev1.LabelRedis: rd.Name}
}

func ownerReference(rd *cachev1.Redis) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(cachev1.GroupVersion.String()).
		WithKind("Redis").
		WithName(rd.Name).
		WithUID(rd.UID).
		WithController(true).
		WithBlockOwnerDeletion(true)
}

// desiredStatefulSet runs the members: every field kubext owns on the
// StatefulSet, and nothing else, so that defaults the API server fills in
// are never taken for a difference. Members start as replicas of nobody;
// the controller then promotes one and points the others at it.
func desiredStatefulSet(rd *cachev1.Redis) *appsv1ac.StatefulSetApplyConfiguration {
	args := []string{
		"--port", strconv.Itoa(Port),
		"--dir", "/data",
		// A member (re)starts as a read-only replica of an address where
		// nothing listens, never as a primary: a primary's process that
		// restarts empty would otherwise be followed again by its replicas,
		// which would copy its empty data set over theirs before kubext
		// could promote one of them. Such a replica serves nobody's
		// replication either (NOMASTERLINK) until kubext points it at the
		// primary.
		"--replicaof", "127.0.0.1", strconv.Itoa(nobodyPort),
		// The primary pings its replicas every second, so that a replica
		// silent for longer than redisrepl.MaxLinkSilence tells of a
		// primary gone even when its connection is not closed (node lost).
		"--repl-ping-replica-period", "1",
	}
	if rd.Spec.Persistence != nil {
		args = append(args, "--appendonly", "yes")
	} else {
		args = append(args, "--appendonly", "no", "--save", "")
	}
	container := corev1ac.Container().
		WithName(ContainerName).
		WithImage(rd.Spec.Image).
		WithPorts(corev1ac.ContainerPort().WithName("redis").WithContainerPort(Port).WithProtocol(corev1.ProtocolTCP)).
		WithVolumeMounts(corev1ac.VolumeMount().WithName(dataVolume).WithMountPath("/data")).
		WithReadinessProbe(corev1ac.Probe().
			WithExec(corev1ac.ExecAction().WithCommand("sh", "-c", `test "$(redis-cli -h 127.0.0.1 -p `+strconv.Itoa(Port)+` ping)" = PONG`)).
			WithPeriodSeconds(5)).
		WithLivenessProbe(corev1ac.Probe().
			WithTCPSocket(corev1ac.TCPSocketAction().WithPort(intstr.FromString("redis"))).
			WithInitialDelaySeconds(10).
			WithPeriodSeconds(10))
	if ref := passwordRef(rd); ref != nil {
		fromSecret := func(name string) *corev1ac.EnvVarApplyConfiguration {
			return corev1ac.EnvVar().WithName(name).WithValueFrom(corev1ac.EnvVarSource().
				WithSecretKeyRef(corev1ac.SecretKeySelector().WithName(ref.Name).WithKey(ref.Key)))
		}
		// The kubelet expands $(REDIS_PASSWORD) in the arguments, so the
		// password is in no object but the Secret; redis-cli (the
		// readiness probe) reads REDISCLI_AUTH.
		container.WithEnv(fromSecret("REDIS_PASSWORD"), fromSecret("REDISCLI_AUTH"))
		// Protected mode stays on: it refuses clients from other hosts
		// only while the server has no password, so that a password lost
		// from the configuration leaves Redis closed rather than open.
		args = append(args, "--protected-mode", "yes", "--requirepass", "$(REDIS_PASSWORD)", "--masterauth", "$(REDIS_PASSWORD)")
	} else {
		// authentication None: clients come from other pods without a
		// password, which protected mode would refuse.
		args = append(args, "--protected-mode", "no")
	}
	// The image's entrypoint runs redis-server with these arguments.
	container.WithArgs(args...)
	if res := rd.Spec.Resources; len(res.Limits) > 0 || len(res.Requests) > 0 || len(res.Claims) > 0 {
		rr := corev1ac.ResourceRequirements()
		if len(res.Limits) > 0 {
			rr.WithLimits(res.Limits)
		}
		if len(res.Requests) > 0 {
			rr.WithRequests(res.Requests)
		}
		for _, c := range res.Claims {
			rr.WithClaims(corev1ac.ResourceClaim().WithName(c.Name).WithRequest(c.Request))
		}
		container.WithResources(rr)
	}

	// Redis never talks to the API server: its pods get no token.
	pod := corev1ac.PodSpec().WithAutomountServiceAccountToken(false).WithContainers(container)
	spec := appsv1ac.StatefulSetSpec().
		WithReplicas(replicas(rd)).
		WithServiceName(headlessName(rd)).
		// Members start and stop together: replication, not start order,
		// is what makes them a group.
		WithPodManagementPolicy(appsv1.ParallelPodManagement).
		WithSelector(metav1ac.LabelSelector().WithMatchLabels(selector(rd)))
	if p := rd.Spec.Persistence; p != nil {
		// volumeClaimTemplates is replaced as a whole, so the fields the
		// API server would default (volume mode, a template's status) are
		// given, and a template has no kind or namespace, to compare equal.
		claim := corev1ac.PersistentVolumeClaimSpec().
			WithAccessModes(corev1.ReadWriteOnce).
			WithVolumeMode(corev1.PersistentVolumeFilesystem).
			WithResources(corev1ac.VolumeResourceRequirements().WithRequests(corev1.ResourceList{corev1.ResourceStorage: p.Size}))
		if p.StorageClassName != nil {
			claim.WithStorageClassName(*p.StorageClassName)
		}
		spec.WithVolumeClaimTemplates((&corev1ac.PersistentVolumeClaimApplyConfiguration{}).
			WithName(dataVolume).
			WithLabels(selector(rd)).
			WithSpec(claim).
			WithStatus(corev1ac.PersistentVolumeClaimStatus().WithPhase(corev1.ClaimPending)))
	} else {
		pod.WithVolumes(corev1ac.Volume().WithName(dataVolume).WithEmptyDir(corev1ac.EmptyDirVolumeSource()))
	}
	spec.WithTemplate(corev1ac.PodTemplateSpec().WithLabels(labels(rd)).WithSpec(pod))
	return appsv1ac.StatefulSet(rd.Name, rd.Namespace).
		WithLabels(labels(rd)).
		WithOwnerReferences(ownerReference(rd)).
		WithSpec(spec)
}

// replicas is how many pods the StatefulSet keeps: spec.size, or, while the
// primary is a member a scale down removes, up to the primary, so that the
// primary's pod is not deleted before it has handed over (see
// redisrepl.Decide); the next reconcile after the handover removes it.
func replicas(rd *cachev1.Redis) int32 {
	n, err := strconv.Atoi(strings.TrimPrefix(rd.Status.Primary, rd.Name+"-"))
	if err != nil || !strings.HasPrefix(rd.Status.Primary, rd.Name+"-") || int32(n) < rd.Spec.Size {
		return rd.Spec.Size
	}
	return int32(n) + 1
}

// desiredServices are the headless Service, which gives each member the
// stable name <pod>.<name>-headless, and the Services of the primary and
// of the replicas, which select on the role label the controller sets on
// the member pods.
func desiredServices(rd *cachev1.Redis) []*corev1ac.ServiceApplyConfiguration {
	service := func(name, role string) *corev1ac.ServiceApplyConfiguration {
		sel := selector(rd)
		if role != "" {
			sel[cachev1.LabelRole] = role
		}
		spec := corev1ac.ServiceSpec().
			WithSelector(sel).
			WithPorts(corev1ac.ServicePort().WithName("redis").WithPort(Port).
				WithTargetPort(intstr.FromString("redis")).WithProtocol(corev1.ProtocolTCP))
		if role == "" {
			// Members find each other before they are ready.
			spec.WithClusterIP(corev1.ClusterIPNone).WithPublishNotReadyAddresses(true)
		}
		return corev1ac.Service(name, rd.Namespace).
			WithLabels(labels(rd)).
			WithOwnerReferences(ownerReference(rd)).
			WithSpec(spec)
	}
	return []*corev1ac.ServiceApplyConfiguration{
		service(headlessName(rd), ""),
		service(primaryName(rd), cachev1.RolePrimary),
		service(replicasName(rd), cachev1.RoleReplica),
	}
}

// desiredPDBs are the two PodDisruptionBudgets that shape voluntary
// disruptions (drains, e.g. kubext's own reboots):
//
//   - <name> covers the members but the primary and lets a drain take one
//     at a time (minAvailable: all of them but one): losing two at once
//     could cost the replica best placed to replace the primary.
//   - <name>-primary covers the pod labelled primary and lets no drain
//     take it while the Redis has replicas (minAvailable 1): the drain
//     cordons the node first, the controller sees the cordon and the
//     primary hands over (FAILOVER, which waits for the replica to catch
//     up), the label moves to the new primary, and only then does the
//     eviction of the old one go through: no acknowledged write is lost.
//
// The two select disjoint pods: the Eviction API refuses a pod that two
// budgets cover. A member that is not Ready may always be evicted
// (unhealthyPodEvictionPolicy AlwaysAllow): it serves nothing to protect,
// and a drain must not wait on it. A Redis of one member has nothing to
// hand over to, so its primary's budget blocks nothing.
func desiredPDBs(rd *cachev1.Redis) []*policyv1ac.PodDisruptionBudgetApplyConfiguration {
	budget := func(name string, minAvailable int32, role metav1.LabelSelectorOperator) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
		return policyv1ac.PodDisruptionBudget(name, rd.Namespace).
			WithLabels(labels(rd)).
			WithOwnerReferences(ownerReference(rd)).
			WithSpec(policyv1ac.PodDisruptionBudgetSpec().
				WithMinAvailable(intstr.FromInt32(minAvailable)).
				WithUnhealthyPodEvictionPolicy(policyv1.AlwaysAllow).
				WithSelector(metav1ac.LabelSelector().WithMatchLabels(selector(rd)).
					WithMatchExpressions(metav1ac.LabelSelectorRequirement().
						WithKey(cachev1.LabelRole).WithOperator(role).WithValues(cachev1.RolePrimary))))
	}
	primaryMin := int32(1)
	if rd.Spec.Size < 2 {
		primaryMin = 0
	}
	return []*policyv1ac.PodDisruptionBudgetApplyConfiguration{
		budget(rd.Name, max(rd.Spec.Size-2, 0), metav1.LabelSelectorOpNotIn),
		budget(primaryName(rd), primaryMin, metav1.LabelSelectorOpIn),
	}
}
