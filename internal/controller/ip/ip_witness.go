package ip

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/heartbeat"
	"github.com/kubext/kubext/internal/ipam"
	"github.com/kubext/kubext/internal/witness"
)

// maxWitnesses is how many witnesses a hold gets: with three, one may be
// lost (or slow) without ending the hold or blocking a failover.
const maxWitnesses = 3

// declarations is what the agents have published as witnesses, from the
// annotations of their heartbeat Leases (only an agent may write its own):
// each witness's highest generation declared silent, per node. A published
// declaration stays true for ever (rule W1 of docs/design/failover.md), so
// a stale cache can only lack one and delay a move, never allow one early:
// unlike a lapsed heartbeat, a declaration needs no confirming read.
type declarations struct {
	mu sync.Mutex
	by map[string]map[string]witness.Gen // witness -> node -> generation
	// gens are the generations the agents publish as their current one.
	gens map[string]witness.Gen
	// changes names the nodes that a witness newly declared silent, as a
	// Lease held by that node, so that heartbeatToIPs requeues its IPs.
	changes chan event.GenericEvent
}

func newDeclarations() *declarations {
	return &declarations{by: map[string]map[string]witness.Gen{}, gens: map[string]witness.Gen{},
		changes: make(chan event.GenericEvent, 1024)}
}

// get is what witness w has declared for node (0: nothing).
func (d *declarations) get(w, node string) witness.Gen {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.by[w][node]
}

// silent reports whether some witness has declared node silent in the
// generation its agent last published: a node not to name as a witness
// (it is down, or cut off from its peers).
func (d *declarations) silent(node string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.gens[node]
	for _, decl := range d.by {
		if decl[node] > 0 && decl[node] >= g {
			return true
		}
	}
	return false
}

// observe records a heartbeat Lease's declarations. Malformed ones count
// as none: only the agent writes them, and a move waits rather than
// trust what it cannot read.
func (d *declarations) observe(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || l.Labels[heartbeat.LabelComponent] != ipv1.AgentComponent || l.Spec.HolderIdentity == nil {
		return
	}
	if g, err := witness.ParseGen(l.Annotations[witness.AnnotationGeneration]); err == nil {
		d.mu.Lock()
		d.gens[*l.Spec.HolderIdentity] = g
		d.mu.Unlock()
	}
	v, ok := l.Annotations[witness.AnnotationDeclared]
	if !ok {
		return
	}
	decl, err := witness.ParseDeclared(v)
	if err != nil {
		ctrl.Log.WithName("ip").Info("Ignoring unreadable declarations", "lease", l.Name, "error", err.Error())
		return
	}
	w := *l.Spec.HolderIdentity
	var newer []string
	d.mu.Lock()
	seen := d.by[w]
	if seen == nil {
		seen = map[string]witness.Gen{}
		d.by[w] = seen
	}
	for node, g := range decl {
		if g > seen[node] {
			seen[node] = g
			newer = append(newer, node)
		}
	}
	d.mu.Unlock()
	for _, node := range newer {
		select {
		case d.changes <- event.GenericEvent{Object: &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: heartbeat.LeaseName(ipv1.AgentComponent, node)},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &node},
		}}:
		default:
			// Full: the IPs of an unhealthy node are looked at every
			// confirmEvery anyway (doubtful).
		}
	}
}

// The manager gives the ip-agents their witness key (cmd/manager, with this
// controller): it reads the Secret back by name, never watches Secrets.
// +kubebuilder:rbac:groups="",namespace=system,resources=secrets,verbs=get,resourceNames=kubext-witness-key

// watch feeds the declarations from the cache's Lease informer (the one
// the heartbeat Tracker uses: the agents' namespace only).
func (d *declarations) watch(ctx context.Context, c cache.Cache) error {
	inf, err := c.GetInformer(ctx, &coordinationv1.Lease{})
	if err != nil {
		return fmt.Errorf("getting the Lease informer for witness declarations: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    d.observe,
		UpdateFunc: func(_, obj any) { d.observe(obj) },
	}); err != nil {
		return fmt.Errorf("watch witness declarations in Leases: %w", err)
	}
	return nil
}

// witnessHold reports whether ip's attachment is a hold on its witnesses'
// word (the agent wrote its generation with attachedNode), and if so
// whether a majority of those witnesses has declared that generation
// silent: only then may the address move, whatever the node's heartbeat
// says. The heartbeat does not keep such a hold, so it cannot end it.
func (r *Reconciler) witnessHold(ip *ipv1.IP) (isWitness, lost bool) {
	g, att := ip.Status.AttachedGeneration, ip.Status.AttachedNode
	if g <= 0 || att == "" {
		return false, false
	}
	return true, witness.MayMove(witness.Hold{Node: att, Gen: witness.Gen(g)}, ip.Status.Witnesses, r.decl.get)
}

// witnessRetry is how often an IP that awaits witnesses looks for them
// besides when a node's agent turns healthy (awaiting).
const witnessRetry = 30 * time.Second

// awaiting are the names of the IPs that await witnesses (awaitsWitnesses
// when last placed): a node whose agent turns healthy may be one, so
// heartbeatToIPs brings them all back.
type awaiting struct {
	mu    sync.Mutex
	names map[string]struct{}
}

func (a *awaiting) set(name string, waits bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.names == nil {
		a.names = map[string]struct{}{}
	}
	if waits {
		a.names[name] = struct{}{}
	} else {
		delete(a.names, name)
	}
}

func (a *awaiting) list() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Collect(maps.Keys(a.names))
}

// awaitsWitnesses reports whether ip, in a Witness pool, is placed on a
// node (and held there, or not yet held anywhere) without witnesses: none
// was eligible when the hold began (the other nodes' agents not yet
// renewing, a node rebooting, a one-node pool). Its holder then holds it on
// its heartbeat Lease, which a stalled API server ends.
func awaitsWitnesses(ip *ipv1.IP, pool *ipv1.IPPool) bool {
	return pool != nil && pool.Spec.Failover == ipv1.FailoverWitness && ip.Status.Node != "" &&
		len(ip.Status.Witnesses) == 0 && ip.Status.AttachedGeneration == 0 &&
		(ip.Status.AttachedNode == "" || ip.Status.AttachedNode == ip.Status.Node)
}

// nameLateWitnesses names the witnesses of an IP that awaits them, once
// some are eligible. That changes nothing for a hold on the Lease: the
// controller goes on judging it by its Lease (attachedGeneration 0) until
// its agent moves it to the witnesses' word, a claim conditional on the
// version that names them, made after the agent has bound its kernel by
// their word (internal/ipagent, convertHold). The witnesses of a hold on
// their word are never changed: the safety argument needs two quorums of
// one set (docs/design/failover.md).
func (r *Reconciler) nameLateWitnesses(ctx context.Context, ip *ipv1.IP, pool *ipv1.IPPool, h ipam.Holding) {
	chosen, _ := r.chooseWitnesses(ctx, ip, pool, ip.Status.Node, "", h)
	if len(chosen) == 0 {
		return
	}
	ctrl.LoggerFrom(ctx).Info("Witnesses named for a hold that had none", "ip", ip.Name, "node", ip.Status.Node, "witnesses", chosen)
	ip.Status.Witnesses = chosen
}

// witnessesFor names the witnesses of a new placement on target: none in
// Lease failover; otherwise other nodes the pool admits whose agents are
// alive and not declared silent (nor the previous holder, which may have
// just died with its Lease still fresh), the standbys' nodes first (they are the
// ones that must hear the holder to take over): three if there are, else
// one. An even number would buy nothing: two of two must vouch, so either
// one's loss ends the hold, where with one only that one's does. With
// none, the agent holds on its Lease, as in Lease failover.
func (r *Reconciler) witnessesFor(ctx context.Context, ip *ipv1.IP, pool *ipv1.IPPool, target, previous string, h ipam.Holding) []string {
	chosen, passed := r.chooseWitnesses(ctx, ip, pool, target, previous, h)
	if len(chosen) < maxWitnesses && len(passed) > 0 {
		ctrl.LoggerFrom(ctx).Info("Fewer witnesses than wanted", "ip", ip.Name, "node", target, "witnesses", chosen, "passedOver", passed)
	}
	return chosen
}

// chooseWitnesses is witnessesFor without the log; passed says why each
// node examined was passed over.
func (r *Reconciler) chooseWitnesses(ctx context.Context, ip *ipv1.IP, pool *ipv1.IPPool, target, previous string, h ipam.Holding) (chosen []string, passed map[string]string) {
	if target == "" || pool == nil || pool.Spec.Failover != ipv1.FailoverWitness {
		return nil, nil
	}
	allowed, err := r.nodeAllowed(ctx, pool)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Reading the pool's nodes for witnesses", "ip", ip.Name)
		return nil, nil
	}
	var candidates []string
	for _, s := range h.Standbys {
		candidates = append(candidates, s.Node)
	}
	// Read only (names), so not copied: a placement must not cost a copy
	// of every Node of the cluster.
	nodes := &corev1.NodeList{}
	if err := r.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing nodes for witnesses", "ip", ip.Name)
	}
	rest := make([]string, 0, len(nodes.Items))
	for i := range nodes.Items {
		rest = append(rest, nodes.Items[i].Name)
	}
	candidates = append(candidates, ringAfter(target, rest)...)
	// Only as many candidates are examined as it takes to find the
	// witnesses (each check may read a Node).
	passed = map[string]string{} // why a node is not a candidate
	var eligible []string
	for _, n := range candidates {
		if len(eligible) == maxWitnesses {
			break
		}
		why := ""
		switch {
		case n == "" || n == target || slices.Contains(eligible, n):
			continue
		case n == previous || n == ip.Status.AttachedNode || n == ip.Status.Node:
			why = "the previous holder"
		case !r.Health.Healthy(n):
			why = "its agent does not renew its heartbeat"
		case r.decl.silent(n):
			why = "a witness declared it silent"
		case !allowed(n):
			why = "the pool does not select it"
		}
		if why != "" {
			passed[n] = why
			continue
		}
		eligible = append(eligible, n)
	}
	chosen = witness.Choose(target, eligible, maxWitnesses)
	if len(chosen)%2 == 0 && len(chosen) > 0 {
		chosen = chosen[:len(chosen)-1]
	}
	return chosen, passed
}

// ringAfter orders nodes by name starting after target, round the ring:
// the order in which nodes other than the standbys become witnesses.
// Every holder's witnesses would otherwise be the pool's first names,
// each probed by every holder of the cluster (at 100 holders their
// answers fell behind and they declared live holders silent); this way
// each node witnesses for a few holders, and a holder's IPs share their
// witnesses, so it probes a few. nodes is sorted in place.
func ringAfter(target string, nodes []string) []string {
	slices.Sort(nodes)
	at, found := slices.BinarySearch(nodes, target)
	if found {
		at++
	}
	return slices.Concat(nodes[at:], nodes[:at])
}
