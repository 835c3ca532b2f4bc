// Package ipagent is the node side of static IPs: one agent per node makes
// the node answer for the IPs the controller places on it, and only those,
// and reports in status.attachedNode what it actually programmed.
//
// The agent attaches an IP only when status.node names its node and no
// other node is attached (status.attachedNode empty or its own), and only
// while it holds its heartbeat Lease. It reports an attachment only after
// the kernel has it, and clears its report only after the kernel no longer
// has it. When it loses its Lease it removes everything at once (fencing),
// because by the time the controller gives the IP to another node, this
// node must be silent.
package ipagent

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/netconf"
)

// Dataplane programs the node's kernel (internal/netconf in production).
type Dataplane interface {
	Apply(ctx context.Context, desired []netconf.Assignment) (netconf.Report, error)
	Current() ([]netconf.Assignment, error)
	Flush(ctx context.Context) error
}

// Lease tells whether the agent still holds its heartbeat Lease.
type Lease interface{ Held() bool }

// Reconciler converges the node on the IPs placed on it. Every event leads
// to one reconcile of the whole node: the set of IPs on one node is small,
// and computing it whole is what makes the result correct after restarts
// and drift.
type Reconciler struct {
	client.Client
	Recorder  events.EventRecorder
	Node      string
	Dataplane Dataplane
	Lease     Lease
	// Interface is the uplink addresses are attached to ("" = automatic).
	Interface string
	// Resync re-checks the kernel for drift this often.
	Resync time.Duration

	trigger chan event.GenericEvent
	// mu makes Fence and "check the Lease, then Apply" exclusive, so that a
	// reconcile that checked the Lease just before it lapsed cannot re-add
	// what Fence removed.
	mu sync.Mutex
}

// Reconcile converges the node.
func (r *Reconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	ips := &ipv1.IPList{}
	if err := r.List(ctx, ips); err != nil {
		return ctrl.Result{}, err
	}
	// Only the check and the programming are under the lock: reporting
	// talks to the API server, which may be what is failing, and must never
	// hold up fencing.
	r.mu.Lock()
	held := r.Lease.Held()
	var desired []netconf.Assignment
	want := map[string]*ipv1.IP{} // address -> IP
	for i := range ips.Items {
		ip := &ips.Items[i]
		a, ok := r.assignment(ctx, ip)
		if !ok || !held {
			continue
		}
		desired = append(desired, a)
		want[a.Address.String()] = ip
	}
	report, err := r.Dataplane.Apply(ctx, desired)
	r.mu.Unlock()
	if err != nil {
		log.Error(err, "Programming the node failed")
	}
	for addr, aerr := range report.Errors {
		if ip, ok := want[addr.String()]; ok {
			r.Recorder.Eventf(ip, nil, corev1.EventTypeWarning, "AttachFailed", "Attach",
				"Node %s could not attach %s: %v", r.Node, addr, aerr)
		}
	}
	programmed, cerr := r.Dataplane.Current()
	if cerr != nil {
		return ctrl.Result{}, fmt.Errorf("reading back what is programmed: %w", cerr)
	}
	// An IP counts as attached only when the kernel has all of it: the
	// address, forwarding to this very pod, and the way back.
	// It counts as released only when none of it is left.
	complete, present := map[string]bool{}, map[string]bool{}
	for _, a := range programmed {
		present[a.Address.String()] = true
		if d, ok := wantByAddr(desired, a.Address); ok && d.PodIP == a.PodIP {
			complete[a.Address.String()] = true
		}
	}
	// Report: attached where the kernel has it, released where it does not.
	for i := range ips.Items {
		ip := &ips.Items[i]
		switch {
		case complete[ip.Status.Address] && want[ip.Status.Address] == ip && ip.Status.AttachedNode != r.Node:
			err = r.report(ctx, ip, r.Node)
		case ip.Status.AttachedNode == r.Node && want[ip.Status.Address] != ip && !present[ip.Status.Address]:
			err = r.report(ctx, ip, "")
		default:
			continue
		}
		if err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: r.Resync}, err
}

func wantByAddr(desired []netconf.Assignment, addr netip.Addr) (netconf.Assignment, bool) {
	for _, d := range desired {
		if d.Address == addr {
			return d, true
		}
	}
	return netconf.Assignment{}, false
}

// assignment is what the node must program for an IP, if anything: the IP
// is placed here, no other node is attached, and its holder pod runs here
// with an address.
func (r *Reconciler) assignment(ctx context.Context, ip *ipv1.IP) (netconf.Assignment, bool) {
	if ip.Status.Node != r.Node || (ip.Status.AttachedNode != "" && ip.Status.AttachedNode != r.Node) {
		return netconf.Assignment{}, false
	}
	addr, err := netip.ParseAddr(ip.Status.Address)
	if err != nil {
		return netconf.Assignment{}, false
	}
	ns, name, ok := strings.Cut(ip.Status.Pod, "/")
	if !ok {
		return netconf.Assignment{}, false
	}
	pod := &corev1.Pod{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, pod); err != nil || pod.Spec.NodeName != r.Node {
		return netconf.Assignment{}, false
	}
	podIP, err := podAddr(pod, addr.Is4())
	if err != nil {
		return netconf.Assignment{}, false
	}
	return netconf.Assignment{Address: addr, PodIP: podIP, Interface: r.Interface}, true
}

// podAddr is the pod's address of the IP's family.
func podAddr(pod *corev1.Pod, v4 bool) (netip.Addr, error) {
	for _, p := range pod.Status.PodIPs {
		if a, err := netip.ParseAddr(p.IP); err == nil && a.Is4() == v4 {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("pod %s/%s has no address of that family", pod.Namespace, pod.Name)
}

// report writes status.attachedNode, conditional on the version read: if
// the controller moved the IP meanwhile, the next reconcile sees that.
func (r *Reconciler) report(ctx context.Context, ip *ipv1.IP, node string) error {
	orig := ip.DeepCopy()
	ip.Status.AttachedNode = node
	err := r.Status().Patch(ctx, ip, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		r.poke()
		return nil
	}
	if err == nil {
		ctrl.LoggerFrom(ctx).Info("Reported", "ip", ip.Name, "address", ip.Status.Address, "attachedNode", node)
	}
	return err
}

// Fence removes everything at once; the heartbeat calls it when the Lease
// lapses.
func (r *Reconciler) Fence() {
	r.mu.Lock()
	defer r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Dataplane.Flush(ctx); err != nil {
		ctrl.Log.WithName("ip-agent").Error(err, "Fencing: removing the node's static IPs failed")
	}
	r.poke()
}

// poke asks for a reconcile (after a conflict, or when the Lease changes).
func (r *Reconciler) poke() {
	select {
	case r.trigger <- event.GenericEvent{Object: &ipv1.IP{}}:
	default:
	}
}

// SetupWithManager registers the agent's reconciler: IPs and this node's
// pods all lead to one request for the node.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.trigger = make(chan event.GenericEvent, 1)
	if r.Resync == 0 {
		r.Resync = 10 * time.Second
	}
	node := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: r.Node}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("ip-agent").
		Watches(&ipv1.IP{}, node).
		Watches(&corev1.Pod{}, node).
		WatchesRawSource(source.Channel(r.trigger, node)).
		// Every agent works on its own node: no leader election.
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false)}).
		Complete(r)
}

// Regained is called when the heartbeat Lease is held again.
func (r *Reconciler) Regained() { r.poke() }
