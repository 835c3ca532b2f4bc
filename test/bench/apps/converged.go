package main

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
	pulsarv1 "github.com/kubext/kubext/api/pulsar/v1"
)

// state is how far one object has got. docs/benchmarks.md states the same
// rules in prose; keep them together.
type state int

const (
	// pending: its owned Deployment or StatefulSet does not exist yet.
	pending state = iota
	// owned: the owned object exists; the status is not yet of the
	// current generation.
	owned
	// reconciled: status.observedGeneration is the generation, the
	// controller's first pass is done; pods and status may still follow.
	reconciled
	// running: the owned object runs what the spec asks, as its own
	// controller (kube-controller-manager) reports; the status may not
	// say so yet.
	running
	// converged: the owned object runs what the spec asks, its controller
	// reports so, and the status reports what the owned object reports.
	converged
)

// consumerState: a PulsarConsumer is converged when its Deployment has
// spec.replicas of the PulsarConsumer, the Deployment controller has acted
// on its generation and reports every replica updated, ready and
// available, and the PulsarConsumer's status is of its generation, has the
// Deployment's replica counts, and says Available=True, Progressing=False
// and Degraded=False for this generation.
func consumerState(pc *pulsarv1.PulsarConsumer, dep *appsv1.Deployment) state {
	if dep == nil || !metav1.IsControlledBy(dep, pc) {
		return pending
	}
	if pc.Status.ObservedGeneration != pc.Generation {
		return owned
	}
	want := ptr.Deref(pc.Spec.Replicas, 1)
	ds, s := dep.Status, pc.Status
	if ptr.Deref(dep.Spec.Replicas, 1) != want ||
		ds.ObservedGeneration < dep.Generation ||
		ds.Replicas != want || ds.UpdatedReplicas != want || ds.ReadyReplicas != want || ds.AvailableReplicas != want {
		return reconciled
	}
	switch {
	case s.Replicas != ds.Replicas || s.ReadyReplicas != ds.ReadyReplicas || s.AvailableReplicas != ds.AvailableReplicas,
		!conditionIs(s.Conditions, pulsarv1.ConditionAvailable, metav1.ConditionTrue, pc.Generation),
		!conditionIs(s.Conditions, pulsarv1.ConditionProgressing, metav1.ConditionFalse, pc.Generation),
		!conditionIs(s.Conditions, pulsarv1.ConditionDegraded, metav1.ConditionFalse, pc.Generation):
		return running
	}
	return converged
}

// redisState: a Redis is converged when its StatefulSet has spec.replicas
// = size, the StatefulSet controller has acted on its generation and
// reports size pods, all ready, and the Redis's status is of its
// generation, has the StatefulSet's replicas, lists size members of which
// none is Pending (each one's pod runs with an address and the controller
// has looked for its Redis), and has a Ready condition of this generation.
//
// On the lab no Redis runs inside the simulated pods: every member is
// Unreachable and Ready is False (MembersUnreachable). That report is the
// converged state here; Ready=True is proven against real redis-server
// processes by the redisrepl tests.
func redisState(rd *cachev1.Redis, sts *appsv1.StatefulSet) state {
	if sts == nil || !metav1.IsControlledBy(sts, rd) {
		return pending
	}
	if rd.Status.ObservedGeneration != rd.Generation {
		return owned
	}
	size := rd.Spec.Size
	ss, s := sts.Status, rd.Status
	if ptr.Deref(sts.Spec.Replicas, 1) != size || ss.ObservedGeneration < sts.Generation ||
		ss.Replicas != size || ss.ReadyReplicas != size {
		return reconciled
	}
	switch {
	case s.Replicas != ss.Replicas,
		len(s.Members) != int(size),
		meta.FindStatusCondition(s.Conditions, cachev1.ConditionReady) == nil,
		meta.FindStatusCondition(s.Conditions, cachev1.ConditionReady).ObservedGeneration != rd.Generation:
		return running
	}
	for _, m := range s.Members {
		if m.State == cachev1.MemberPending {
			return running
		}
	}
	return converged
}

func conditionIs(conds []metav1.Condition, typ string, status metav1.ConditionStatus, generation int64) bool {
	c := meta.FindStatusCondition(conds, typ)
	return c != nil && c.Status == status && c.ObservedGeneration == generation
}

// census counts the objects at or past each state.
type census [converged + 1]int

// survey reads the benchmark's cache (no API request) and counts how far
// the objects have got.
func (b *bench) survey(ctx context.Context) (census, error) {
	var n census
	pcs, deps := &pulsarv1.PulsarConsumerList{}, &appsv1.DeploymentList{}
	rds, stss := &cachev1.RedisList{}, &appsv1.StatefulSetList{}
	for _, list := range []client.ObjectList{pcs, deps, rds, stss} {
		if err := b.cache.List(ctx, list, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
			return n, err
		}
	}
	depByName := map[string]*appsv1.Deployment{}
	for i := range deps.Items {
		depByName[deps.Items[i].Name] = &deps.Items[i]
	}
	stsByName := map[string]*appsv1.StatefulSet{}
	for i := range stss.Items {
		stsByName[stss.Items[i].Name] = &stss.Items[i]
	}
	for i := range pcs.Items {
		for s := range consumerState(&pcs.Items[i], depByName[pcs.Items[i].Name]) + 1 {
			n[s]++
		}
	}
	for i := range rds.Items {
		for s := range redisState(&rds.Items[i], stsByName[rds.Items[i].Name]) + 1 {
			n[s]++
		}
	}
	return n, nil
}

// stateOf is the state of the owner of the Deployment or StatefulSet
// kind/name, from the benchmark's cache.
func (b *bench) stateOf(ctx context.Context, kind, name string) (state, error) {
	key := client.ObjectKey{Namespace: namespace, Name: name}
	if kind == "Deployment" {
		pc, dep := &pulsarv1.PulsarConsumer{}, &appsv1.Deployment{}
		if err := b.cache.Get(ctx, key, pc); err != nil {
			return pending, err
		}
		if err := b.cache.Get(ctx, key, dep); err != nil {
			return pending, client.IgnoreNotFound(err)
		}
		return consumerState(pc, dep), nil
	}
	rd, sts := &cachev1.Redis{}, &appsv1.StatefulSet{}
	if err := b.cache.Get(ctx, key, rd); err != nil {
		return pending, err
	}
	if err := b.cache.Get(ctx, key, sts); err != nil {
		return pending, client.IgnoreNotFound(err)
	}
	return redisState(rd, sts), nil
}

// convergence is when, from the start, every object was first reconciled,
// running and converged, all at once.
type convergence struct {
	reconciled, running, converged time.Duration
}

// waitConverged surveys the objects every 200 ms until all are converged
// and reports progress every 10 s.
func (b *bench) waitConverged(ctx context.Context, start time.Time, timeout time.Duration) (convergence, error) {
	var conv convergence
	total := len(b.consumers) + len(b.redis)
	lastReport := time.Now()
	var last census
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := b.survey(ctx)
		if err != nil {
			return false, err
		}
		last = n
		if n[pending] < total {
			return false, nil // not all created yet
		}
		if conv.reconciled == 0 && n[reconciled] == total {
			conv.reconciled = time.Since(start)
		}
		if conv.running == 0 && n[running] == total {
			conv.running = time.Since(start)
		}
		if n[converged] == total {
			conv.converged = time.Since(start)
			return true, nil
		}
		if time.Since(lastReport) >= 10*time.Second {
			fmt.Printf("   %6.1f s: of %d, %d have their owned object, %d reconciled, %d running, %d converged\n",
				time.Since(start).Seconds(), total, n[owned], n[reconciled], n[running], n[converged])
			lastReport = time.Now()
		}
		return false, nil
	})
	if err != nil {
		return conv, fmt.Errorf("waiting for convergence (of %d: %d owned, %d reconciled, %d running, %d converged): %w",
			total, last[owned], last[reconciled], last[running], last[converged], err)
	}
	return conv, nil
}
