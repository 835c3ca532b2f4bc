// Package agenthealth is the controllers' side of the agents' heartbeats
// (internal/heartbeat renews them on the nodes): which nodes' agents are
// alive, from the Leases a controller observes, and whether one is lost,
// confirmed with the API server before anything is taken from its node.
package agenthealth

import (
	"context"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/kubext/kubext/internal/heartbeat"
)

// Tracker is the controller's side: it watches the agents' Leases and
// decides which nodes are alive from what it observes itself. A node is
// healthy while the Tracker has seen its Lease renewed within the lease
// duration, measured on the Tracker's own clock (as the node lifecycle
// controller does), so clock skew between machines does not matter. After
// a restart every known node counts as freshly renewed: failover is delayed
// by one lease duration at most, never hastened.
//
// Healthy is what the informer has shown, and the informer can be stale: a
// paused or starved controller, a slow watch. So "unhealthy" only makes a
// node ineligible for new work; before anything is taken away from a node,
// Lost confirms it with a read from the API server itself.
type Tracker struct {
	component string
	// namespace and reader are where Lost reads the Leases from: the API
	// server, not the cache.
	namespace string
	reader    client.Reader
	now       func() time.Time
	changes   chan event.GenericEvent

	mu     sync.Mutex
	nodes  map[string]*observation
	synced func() bool

	// rounds batch Lost's reads from the API server (confirm.go).
	rounds rounds
}

type observation struct {
	renew    time.Time // the Lease's renewTime as last seen
	seenAt   time.Time // when the Tracker saw it change
	duration time.Duration
	healthy  bool // as last reported through Changes
	// missingSince is when a read from the API server first found the
	// Lease missing (zero while it exists).
	missingSince time.Time
}

// NewTracker tracks the Leases of one component's agents in a namespace;
// reader reads them from the API server (a manager's GetAPIReader) when a
// loss must be confirmed.
func NewTracker(component, namespace string, reader client.Reader) *Tracker {
	return &Tracker{
		component: component,
		namespace: namespace,
		reader:    reader,
		now:       time.Now,
		changes:   make(chan event.GenericEvent, 1024),
		nodes:     map[string]*observation{},
	}
}

// Changes delivers the Lease of a node each time the node turns healthy or
// unhealthy; a controller watches it with source.Channel.
func (t *Tracker) Changes() <-chan event.GenericEvent { return t.changes }

// Healthy reports whether the node's agent renewed within its lease
// duration, as observed by the Tracker.
func (t *Tracker) Healthy(node string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, ok := t.nodes[node]
	return ok && t.now().Sub(o.seenAt) < o.duration
}

// LastRenewal is when the Tracker last saw the node's Lease renewed (zero
// if never): the start of an outage when the node is lost.
func (t *Tracker) LastRenewal(node string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if o, ok := t.nodes[node]; ok {
		return o.seenAt
	}
	return time.Time{}
}

// Observe records a Lease as seen now.
func (t *Tracker) Observe(l *coordinationv1.Lease) {
	if l.Labels[heartbeat.LabelComponent] != t.component || l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil {
		return
	}
	node := *l.Spec.HolderIdentity
	duration := time.Second
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	t.mu.Lock()
	o, ok := t.nodes[node]
	if !ok {
		o = &observation{}
		t.nodes[node] = o
	}
	renewed := !o.renew.Equal(l.Spec.RenewTime.Time)
	if renewed {
		o.renew, o.seenAt = l.Spec.RenewTime.Time, t.now()
	}
	o.duration = duration
	o.missingSince = time.Time{}
	turnedHealthy := renewed && !o.healthy
	if turnedHealthy {
		o.healthy = true
	}
	t.mu.Unlock()
	if turnedHealthy {
		t.notify(l)
	}
}

// Forget is told that a node's Lease was deleted. That says nothing about
// the agent: anyone allowed to delete Leases can do it, and a live agent
// recreates its Lease at its next renewal. The node keeps its last
// observation and expires from it as usual; Lost decides from the API
// server whether the agent is really gone.
func (t *Tracker) Forget(l *coordinationv1.Lease) {
	if l.Spec.HolderIdentity == nil {
		return
	}
	t.notify(l)
}

// Lost reports whether the node's agent has certainly stopped renewing for
// a whole lease duration, which is when it has fenced itself (see
// Heartbeat). It never trusts the informer alone: it reads the Lease from
// the API server and
//   - a renewal the informer had not shown yet revives the node (a paused
//     controller or a slow watch);
//   - the same renewTime as observed means no renewal since the Tracker
//     first saw it, at seenAt on the Tracker's own clock: lost once a
//     lease duration has passed since;
//   - a missing Lease is unknown, not dead: a live agent recreates it at
//     its next renewal, and as long as it is missing the agent renews
//     nothing. The node is lost once reads from the API server have found it
//     missing for a whole lease duration (measured from the first such
//     read), and no renewal was observed since.
//
// An error (the API server unreachable) is "not confirmed": the caller
// waits and asks again. Reads are shared between callers (confirm.go).
func (t *Tracker) Lost(ctx context.Context, node string) (bool, error) {
	if t.Healthy(node) {
		return false, nil
	}
	l, err := t.read(ctx, node)
	switch {
	case err != nil:
		return false, err
	case l == nil:
		return t.missing(node), nil
	}
	t.Observe(l)
	t.mu.Lock()
	defer t.mu.Unlock()
	o, ok := t.nodes[node]
	if !ok {
		// A Lease that is not an agent heartbeat, or has never been
		// renewed: nothing to confirm a loss from.
		return false, nil
	}
	return t.now().Sub(o.seenAt) >= o.duration, nil
}

// missing records that a read found the node's Lease missing, and reports
// whether it has been missing for a whole lease duration.
func (t *Tracker) missing(node string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	o, ok := t.nodes[node]
	if !ok {
		// Never seen since this controller started (its Lease was deleted
		// before): measure from now.
		o = &observation{seenAt: now, duration: time.Second}
		t.nodes[node] = o
	}
	if o.missingSince.IsZero() {
		o.missingSince = now
		return false
	}
	return now.Sub(o.missingSince) >= o.duration && now.Sub(o.seenAt) >= o.duration
}

// notify never blocks: on a replica that is not the leader nobody drains
// the channel, and the Lease informer must not stall. A dropped change is
// made good by the consumer's periodic resync.
func (t *Tracker) notify(l *coordinationv1.Lease) {
	select {
	case t.changes <- event.GenericEvent{Object: l}:
	default:
	}
}

// expire reports the nodes that stopped renewing since the last call.
func (t *Tracker) expire() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var lost []string
	for node, o := range t.nodes {
		if o.healthy && t.now().Sub(o.seenAt) >= o.duration {
			o.healthy = false
			lost = append(lost, node)
		}
	}
	return lost
}

// NeedLeaderElection is false: every replica keeps its own observations,
// so a new leader does not start blind.
func (t *Tracker) NeedLeaderElection() bool { return false }

// Start checks for expired Leases every 100 ms until ctx ends.
func (t *Tracker) Start(ctx context.Context) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			for _, node := range t.expire() {
				l := &coordinationv1.Lease{}
				l.Name = heartbeat.LeaseName(t.component, node)
				l.Spec.HolderIdentity = &node
				t.notify(l)
			}
		}
	}
}

// Watch feeds the Tracker from the cache's Lease informer.
func (t *Tracker) Watch(ctx context.Context, c cache.Cache) error {
	inf, err := c.GetInformer(ctx, &coordinationv1.Lease{})
	if err != nil {
		return err
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.observe(obj) },
		UpdateFunc: func(_, obj any) { t.observe(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if l, ok := obj.(*coordinationv1.Lease); ok {
				t.Forget(l)
			}
		},
	})
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.synced = reg.HasSynced
	t.mu.Unlock()
	return nil
}

// Synced reports whether the Tracker has seen every Lease that existed
// when it started. Until then it knows nothing, and a controller must not
// decide from it: a node it has not heard from yet is not a dead node.
func (t *Tracker) Synced() bool {
	t.mu.Lock()
	synced := t.synced
	t.mu.Unlock()
	return synced != nil && synced()
}

func (t *Tracker) observe(obj any) {
	if l, ok := obj.(*coordinationv1.Lease); ok {
		t.Observe(l)
	}
}

// NodeOf is the node a heartbeat Lease belongs to.
func NodeOf(o client.Object) string {
	if l, ok := o.(*coordinationv1.Lease); ok && l.Spec.HolderIdentity != nil {
		return *l.Spec.HolderIdentity
	}
	return ""
}
