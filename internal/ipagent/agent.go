// Package ipagent is the node side of static IPs: one agent per node makes
// the node answer for the IPs the controller places on it, and only those,
// and reports what it answers for in status.attachedNode and
// status.attachedPod.
//
// The protocol, which the controller and the admission policy rely on:
//
//  1. Claim before programming. For an IP with status.node naming this
//     node and no node attached, the agent, while it holds its heartbeat
//     Lease, first writes status.attachedNode (a patch conditional on the
//     version it read). Only once that write succeeded does it program
//     anything for the IP; a conflict means it reads again. So a node that
//     might answer for an address is always named in attachedNode, and the
//     controller never sees an empty attachedNode while a node answers.
//  2. Confirm after programming. Once the kernel has all of it (the
//     address on the uplink, DNAT to status.pod's address, SNAT and policy
//     routing of that pod), as read back from the kernel, the agent sets
//     status.attachedPod to status.pod. When status.pod changes on the same
//     node, attachedPod is cleared before the kernel is repointed. When the
//     kernel no longer has all of it, attachedPod is cleared. The
//     confirmation carries the Attached and Ready conditions that follow
//     from it (internal/ipcond), where the IP is allocated and not of an
//     aws pool.
//  3. Release. When status.node no longer names this node (or the IP is
//     being deleted, its holder is gone, or the Lease is not held), the
//     agent removes the address from the kernel, and clears attachedNode
//     and attachedPod together only once nothing of it is left.
//  4. The agent writes no other field, and those conditions only then.
//
// When it loses its Lease it removes everything at once (fencing), without
// waiting for programming under way, because by the time the controller
// gives the IP to another node, this node must be silent.
package ipagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/agentkube"
	"github.com/kubext/kubext/internal/ipcond"
	"github.com/kubext/kubext/internal/netconf"
)

// Dataplane programs the node's kernel (internal/netconf in production).
type Dataplane interface {
	Apply(ctx context.Context, desired []netconf.Assignment) (netconf.Report, error)
	// Current reads back every address the kernel has a trace of; PodIP is
	// valid only where the kernel forwards the address to it, and back.
	Current() ([]netconf.Assignment, error)
	// Fence removes everything at once and refuses to add anything until
	// Unfence, without waiting for an Apply in flight; that Apply adds
	// nothing, even after Unfence.
	Fence(ctx context.Context) error
	Unfence()
	// Refresh rewrites the timeouts of what is programmed to the current
	// deadlines, shorter or longer (netconf.ErrLapsed: something had
	// expired meanwhile).
	Refresh() error
}

// Lease tells whether the agent still holds its heartbeat Lease.
type Lease interface{ Held() bool }

// Client is the agent's access to the API server: agentkube.Client.
type Client interface {
	Informer(obj runtime.Object, namespace string, fieldSelector fields.Selector) (cache.SharedIndexInformer, error)
	Get(ctx context.Context, namespace, name string, obj runtime.Object) error
	Patch(ctx context.Context, namespace, name string, pt types.PatchType, data []byte, obj runtime.Object, subresource ...string) error
}

// Reconciler converges the node on the IPs placed on it. Every event leads
// to one reconcile of the whole node: the set of IPs on one node is small,
// and computing it whole is what makes the result correct after restarts
// and drift.
type Reconciler struct {
	Client   Client
	Recorder agentkube.EventRecorder
	// Log is the agent's logger (with its node's name).
	Log       logr.Logger
	Node      string
	Dataplane Dataplane
	Lease     Lease
	// Interface is the uplink addresses are attached to ("" = automatic).
	Interface string
	// Resync re-checks the kernel for drift this often.
	Resync time.Duration

	// loop runs the passes; the informers are what they read (Setup):
	// the IPs that name this node (ips), the pods of this node, this
	// Node and the IPPools (for Duty). synced: all have listed.
	loop          *agentkube.Loop
	ips           *nodeIPs
	pods          cache.SharedIndexInformer
	nodes, pools  cache.SharedIndexInformer
	synced        atomic.Bool
	startWatching sync.Once

	// mu makes "check the Lease, register the cancel of this pass's Apply"
	// one step as seen by Fence: either Fence comes first, and the pass
	// sees the Lease lapsed, or it comes after and cancels the Apply. It
	// is never held across an Apply.
	mu          sync.Mutex
	cancelApply context.CancelFunc
	// warned are the hostNetwork holders already reported, by IP and pod
	// UID, so that each gets one Event rather than one per resync.
	warned sync.Map
	// Witness, when set, holds the IPs of Witness pools on the witnesses'
	// word (witness.go); nil: every hold is on the heartbeat Lease.
	Witness *WitnessConfig
	// leaseHolds and witnessSets are what the last pass held, by rule
	// (under mu).
	leaseHolds, wantLease bool
	witnessSets           [][]string
	// addrs are the witnesses' node addresses, by node name.
	addrs sync.Map
	// probing are the witnesses the peer probes (under mu): those of the
	// IPs here and of every one before (probeWitnesses).
	probing map[string]netip.AddrPort
	// waiting are the IPs placed here waiting for their witnesses to
	// vouch, by UID: since when.
	waiting sync.Map
	// fellBack are the IPs, by UID, that this run holds on its Lease
	// because their witnesses did not vouch in time.
	fellBack sync.Map
	// conditionsRefused is when (Unix ns) the admission policy last
	// refused a confirmation's conditions (confirm); 0: never.
	conditionsRefused atomic.Int64
}

// reconcile converges the node; it returns when to look again.
func (r *Reconciler) reconcile(ctx context.Context) (time.Duration, error) {
	log := r.Log
	stored := r.ips.list()
	ips := make([]*ipv1.IP, 0, len(stored))
	for _, ip := range stored {
		ips = append(ips, ip.DeepCopy())
	}
	applyCtx, held, done := r.startPass(ctx)
	defer done()
	desired, pending, claimErr := r.claim(ctx, ips, held)
	report, err := r.Dataplane.Apply(applyCtx, values(desired))
	if err != nil && !errors.Is(err, netconf.ErrHoldEnding) {
		log.Error(err, "Programming the node failed")
	}
	r.reportFailures(ips, desired, report)
	programmed, err := r.Dataplane.Current()
	if err != nil {
		return 0, fmt.Errorf("reading back what is programmed: %w", err)
	}
	if err := r.report(ctx, ips, desired, pending, programmed); err != nil {
		return 0, err
	}
	if claimErr != nil {
		return 0, claimErr
	}
	if r.Witness != nil && r.waitingForWitnesses(ips) {
		return min(r.Resync, r.Witness.fallbackAfter()/4), nil
	}
	return r.Resync, nil
}

// startPass reads the Lease and registers the cancel of this pass's Apply
// under mu (see there). done unregisters it.
func (r *Reconciler) startPass(ctx context.Context) (applyCtx context.Context, held bool, done func()) {
	applyCtx, cancel := context.WithCancel(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cancelApply = cancel
	return applyCtx, r.Lease.Held(), func() {
		r.mu.Lock()
		r.cancelApply = nil
		r.mu.Unlock()
		cancel()
	}
}

func values(m map[string]netconf.Assignment) []netconf.Assignment {
	out := make([]netconf.Assignment, 0, len(m))
	for _, a := range m {
		out = append(out, a)
	}
	return out
}

// reportFailures tells the user, per IP, what the kernel refused.
func (r *Reconciler) reportFailures(ips []*ipv1.IP, desired map[string]netconf.Assignment, report netconf.Report) {
	for _, ip := range ips {
		a, ok := desired[ip.Name]
		if !ok {
			continue
		}
		// A write waiting for the next renewal is no failure: the
		// renewal brings it back (netconf.ErrLapsed).
		if aerr := report.Errors[a.Address]; aerr != nil && !errors.Is(aerr, netconf.ErrHoldEnding) {
			r.Recorder.Eventf(ip, nil, corev1.EventTypeWarning, "AttachFailed", "Attach",
				"Node %s could not attach %s: %v", r.Node, a.Address, aerr)
		}
	}
}

// Fence removes everything at once; the heartbeat calls it when the Lease
// lapses. It cancels the Apply in flight and does not wait for it: the
// Dataplane refuses what that Apply would still add.
func (r *Reconciler) Fence() {
	r.mu.Lock()
	if r.cancelApply != nil {
		r.cancelApply()
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Dataplane.Fence(ctx); err != nil {
		r.Log.Error(err, "Fencing: removing the node's static IPs failed")
	}
	r.poke()
}

// Regained is called when the heartbeat Lease is held again.
func (r *Reconciler) Regained() {
	r.Dataplane.Unfence()
	r.poke()
}

// Poke asks for a reconcile of the node: the dataplane found something
// missing that should be there (it expired while renewals stalled, or a
// write waited for the next renewal).
func (r *Reconciler) Poke() { r.poke() }

// poke asks for a reconcile (after a conflict, or when the Lease changes).
func (r *Reconciler) poke() {
	if r.loop != nil {
		r.loop.Trigger()
	}
}

// Setup makes the agent's informers and its work loop; Run runs them.
// IPs, this node's pods and this Node all lead to one pass over the node.
// The agent sees only the IPs that name its node (nodeIPs), only its
// node's pods, its own Node and the IPPools.
func (r *Reconciler) Setup() error {
	if r.Resync == 0 {
		r.Resync = 10 * time.Second
	}
	var err error
	if r.ips, err = newNodeIPs(r.Client, r.Node); err != nil {
		return err
	}
	if r.pods, err = r.Client.Informer(&corev1.Pod{}, "", fields.OneTermEqualSelector("spec.nodeName", r.Node)); err != nil {
		return err
	}
	if r.nodes, err = r.Client.Informer(&corev1.Node{}, "", fields.OneTermEqualSelector("metadata.name", r.Node)); err != nil {
		return err
	}
	if r.pools, err = r.Client.Informer(&ipv1.IPPool{}, "", nil); err != nil {
		return err
	}
	if err := r.pods.SetTransform(slimPod); err != nil {
		return err
	}
	if err := r.nodes.SetTransform(slimNode); err != nil {
		return err
	}
	r.loop = agentkube.NewLoop("ip-agent", r.Log)
	for _, inf := range []cache.SharedIndexInformer{r.ips.placed, r.ips.attached, r.pods} {
		if _, err := inf.AddEventHandler(r.loop.Handler()); err != nil {
			return err
		}
	}
	return nil
}

// Run runs the informers and, once they have synced, the passes, until
// ctx ends. Every agent works on its own node: there is no leader
// election.
func (r *Reconciler) Run(ctx context.Context) error {
	if r.loop == nil {
		return errors.New("ip-agent: Run before Setup")
	}
	if !r.watch(ctx) {
		return nil // stopping
	}
	// test/lab waits for this line (SyncedMessage).
	r.Log.Info(SyncedMessage)
	r.loop.Trigger()
	r.loop.Run(ctx, r.reconcile)
	return nil
}

// SyncedMessage is what the agent logs once its informers have synced and
// it starts reconciling.
const SyncedMessage = "Informers synced: reconciling the node"

// watch runs the informers until ctx ends, once, and waits for them to
// sync; false if ctx ended first.
func (r *Reconciler) watch(ctx context.Context) bool {
	all := []cache.SharedIndexInformer{r.ips.placed, r.ips.attached, r.pods, r.nodes, r.pools}
	r.startWatching.Do(func() {
		for _, inf := range all {
			go inf.RunWithContext(ctx)
		}
	})
	synced := make([]cache.InformerSynced, len(all))
	for i, inf := range all {
		synced[i] = inf.HasSynced
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return false
	}
	r.synced.Store(true)
	return true
}

// Ready is a readiness check: the informers have synced.
func (r *Reconciler) Ready() error {
	if !r.synced.Load() {
		return errors.New("the agent's informers have not synced")
	}
	return nil
}

// pod is the pod namespace/name of this node as the informer has it (read
// it, never change it), or nil.
func (r *Reconciler) pod(namespace, name string) *corev1.Pod {
	o, ok, err := r.pods.GetStore().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil
	}
	p, _ := o.(*corev1.Pod)
	return p
}

// assignment is what the node must program for an IP, if anything: its
// holder pod runs here, with an address, and not on the host network. The
// holder is the pod the controller chose, by UID where status names one: a
// pod created again under the holder's name (by its StatefulSet, or by
// anyone allowed to create pods in the namespace, between the holder's
// deletion and the controller's next look) is another pod, and gets
// nothing until the controller has chosen it.
func (r *Reconciler) assignment(ip *ipv1.IP) (netconf.Assignment, bool) {
	addr, err := netip.ParseAddr(ip.Status.Address)
	if err != nil {
		return netconf.Assignment{}, false
	}
	ns, name, ok := strings.Cut(ip.Status.Pod, "/")
	if !ok {
		return netconf.Assignment{}, false
	}
	pod := r.pod(ns, name)
	if pod == nil || pod.Spec.NodeName != r.Node || (ip.Status.PodUID != "" && string(pod.UID) != ip.Status.PodUID) {
		return netconf.Assignment{}, false
	}
	if pod.Spec.HostNetwork {
		r.warnHostNetwork(ip, pod)
		return netconf.Assignment{}, false
	}
	podIP, err := podAddr(pod, addr.Is4())
	if err != nil {
		return netconf.Assignment{}, false
	}
	return netconf.Assignment{Address: addr, PodIP: podIP, Interface: r.Interface}, true
}

// warnHostNetwork reports, once per IP and pod, that a holder on the host
// network is not attached: its address is the node's, so translating it
// would send all of the node's traffic as the static IP. The controller
// refuses such holders too; this is the node's own check.
func (r *Reconciler) warnHostNetwork(ip *ipv1.IP, pod *corev1.Pod) {
	if _, seen := r.warned.LoadOrStore(string(ip.UID)+"/"+string(pod.UID), true); seen {
		return
	}
	r.Log.Info("Not attaching to a pod on the host network", "ip", ip.Name, "pod", ip.Status.Pod)
	r.Recorder.Eventf(ip, pod, corev1.EventTypeWarning, "HostNetworkPod", "Attach",
		"Node %s will not attach %s to pod %s: the pod uses the host network, so the node's own traffic would leave as %s",
		r.Node, ip.Status.Address, ip.Status.Pod, ip.Status.Address)
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

// patchStatus writes attachedNode and attachedPod, conditional on the
// version read: if the controller changed the IP meanwhile, nothing is
// written and the next reconcile reads it again. ip is updated on success.
func (r *Reconciler) patchStatus(ctx context.Context, ip *ipv1.IP, node, pod string, gen int64) (bool, error) {
	return r.writeStatus(ctx, ip, node, pod, gen, false)
}

// conditionsRetry is how long the agent reports without the Attached and
// Ready conditions after the admission policy refused them.
const conditionsRetry = 10 * time.Minute

// confirm is patchStatus for a confirmation: this node forwards ip to its
// holder, status.pod. Where it may (ipcond.AgentMayConfirm) it writes the Attached and
// Ready conditions that follow in the same patch, as the manager would
// have (the manager's write per IP that this saves is what bounds
// convergence at scale). An admission policy that refuses them (one older
// than this agent) gets the bare report, and none with conditions for
// conditionsRetry: the manager writes them then, as before.
func (r *Reconciler) confirm(ctx context.Context, ip *ipv1.IP, gen int64) error {
	pod := ip.Status.Pod
	refused := r.conditionsRefused.Load()
	if ipcond.AgentMayConfirm(ip, r.Node) && (refused == 0 || time.Since(time.Unix(0, refused)) > conditionsRetry) {
		_, err := r.writeStatus(ctx, ip, r.Node, pod, gen, true)
		if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
			return err
		}
		r.Log.Info("The admission policy refuses the agent's Attached and Ready conditions; reporting without them (the manager writes them)",
			"ip", ip.Name, "error", err.Error())
		r.conditionsRefused.Store(time.Now().UnixNano())
	}
	_, err := r.patchStatus(ctx, ip, r.Node, pod, gen)
	return err
}

func (r *Reconciler) writeStatus(ctx context.Context, ip *ipv1.IP, node, pod string, gen int64, confirmed bool) (bool, error) {
	changed := ip.DeepCopy()
	changed.Status.AttachedNode, changed.Status.AttachedPod, changed.Status.AttachedGeneration = node, pod, gen
	if confirmed {
		ipcond.Confirm(changed)
	}
	patch, err := optimisticMergePatch(ip, changed)
	if err != nil {
		return false, err
	}
	err = r.Client.Patch(ctx, "", ip.Name, types.MergePatchType, patch, changed, "status")
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		r.poke()
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reporting IP %s attached to node %q pod %q: %w", ip.Name, node, pod, err)
	}
	r.Log.Info("Reported", "ip", ip.Name, "address", ip.Status.Address, "attachedNode", node, "attachedPod", pod, "attachedGeneration", gen,
		"conditions", confirmed)
	*ip = *changed
	return true, nil
}

// optimisticMergePatch is the JSON merge patch that takes old's status to
// changed's, in the fields the agent owns (the package comment) and no
// other: attachedNode, attachedPod and attachedGeneration (null when
// empty), and the conditions when changed has them different. It carries
// old's resourceVersion, so the API server refuses it with a conflict if
// the IP has changed since old was read.
func optimisticMergePatch(old, changed *ipv1.IP) ([]byte, error) {
	var p struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Status struct {
			AttachedNode       *string            `json:"attachedNode"`
			AttachedPod        *string            `json:"attachedPod"`
			AttachedGeneration *int64             `json:"attachedGeneration"`
			Conditions         []metav1.Condition `json:"conditions,omitempty"`
		} `json:"status"`
	}
	p.Metadata.ResourceVersion = old.ResourceVersion
	st := changed.Status
	if st.AttachedNode != "" {
		p.Status.AttachedNode = &st.AttachedNode
	}
	if st.AttachedPod != "" {
		p.Status.AttachedPod = &st.AttachedPod
	}
	if st.AttachedGeneration != 0 {
		p.Status.AttachedGeneration = &st.AttachedGeneration
	}
	if !equality.Semantic.DeepEqual(old.Status.Conditions, st.Conditions) {
		if len(st.Conditions) == 0 {
			return nil, fmt.Errorf("IP %s: the agent never removes conditions", old.Name)
		}
		p.Status.Conditions = st.Conditions
	}
	return json.Marshal(p)
}

// Scheme is the API types the agent reads and writes: IPs and IPPools,
// Pods and Nodes, its heartbeat Lease and the Events it records.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{ipv1.AddToScheme, corev1.AddToScheme, coordinationv1.AddToScheme, eventsv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}
