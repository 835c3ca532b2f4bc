package ip

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/ipcond"
	awsprov "github.com/kubext/kubext/internal/provider/aws"
	"github.com/kubext/kubext/internal/statuspatch"
)

// AWSProvider moves addresses in EC2 for pools with provider aws
// (*aws.Provider in production, over an in-memory EC2 in tests).
type AWSProvider interface {
	Resolve(ctx context.Context, providerID string, a awsprov.Address) (awsprov.NodeTarget, error)
	Attach(ctx context.Context, a awsprov.Address, target awsprov.NodeTarget, prev awsprov.Attachment, intend awsprov.Intend) (awsprov.Attachment, error)
	Detach(ctx context.Context, a awsprov.Address, vpcID string, prev awsprov.Attachment) error
	Release(ctx context.Context, a awsprov.Address, vpcID string, prev awsprov.Attachment) error
	GiveBack(ctx context.Context, a awsprov.Address, vpcID string, back []awsprov.PrivateIP) ([]awsprov.PrivateIP, error)
}

var _ AWSProvider = (*awsprov.Provider)(nil)

// ec2Retry is how long an IP waits after EC2 refused or failed a call
// before it tries again: the SDK's adaptive retryer already retried the
// call itself, so what is left needs a person (a permission, a quota) or
// time; never a tight loop.
const ec2Retry = 10 * time.Second

// ec2Reverify bounds how long a verified EC2 placement is trusted without
// a new describe; it is also re-verified after every manager start.
const ec2Reverify = resync

// awsState is the controller's memory of EC2: where each IP was last
// verified (so that a reconcile with nothing to change makes no EC2 call)
// and each node's network interface (so that a failover makes only the
// calls of the move itself).
type awsState struct {
	mu       sync.Mutex
	verified map[string]verifiedPlacement
	targets  map[string]awsprov.NodeTarget
	// refused is each IP's last refused or failed move, so that the
	// events that follow (the agent's claim, its confirmation) do not ask
	// EC2 again before ec2Retry: never a tight loop.
	refused map[string]refusedMove
}

type verifiedPlacement struct {
	// status is status.aws as verified.
	status ipv1.AWSStatus
	// seen is what the verifying describe showed of address, which spares
	// the next move of that address the reads before it.
	seen    *awsprov.Observation
	address string
	at      time.Time
}

// refusedMove is a move of an IP to node that EC2 refused or failed at.
type refusedMove struct {
	node    string
	at      time.Time
	failure ec2Failure
}

// refusedRecently is the failure of the last move of ip to node if it was
// less than ec2Retry ago: the move waits, whatever event brought it back.
// A move to another node (a failover) is not held back.
func (r *Reconciler) refusedRecently(ip, node string) *ec2Failure {
	r.aws.mu.Lock()
	defer r.aws.mu.Unlock()
	m, ok := r.aws.refused[ip]
	if !ok || m.node != node || r.now().Sub(m.at) >= ec2Retry {
		return nil
	}
	f := m.failure
	return &f
}

// rememberRefusal remembers f, the failure of a move of ip to node, and returns it.
func (r *Reconciler) rememberRefusal(ip, node string, f *ec2Failure) *ec2Failure {
	r.aws.mu.Lock()
	defer r.aws.mu.Unlock()
	r.aws.refused[ip] = refusedMove{node: node, at: r.now(), failure: *f}
	return f
}

// giveBackFirst is how many private IPs may wait in status.aws.giveBack
// before a move gives them back first (a move adds at most two; the list
// holds at most eight).
const giveBackFirst = 6

func (s *awsState) init() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.verified == nil {
		s.verified, s.targets = map[string]verifiedPlacement{}, map[string]awsprov.NodeTarget{}
		s.refused = map[string]refusedMove{}
	}
}

// isAWS reports whether the IP's address is attached through EC2: its pool
// says so or, when the pool is gone, its status records EC2 state.
func isAWS(ip *ipv1.IP, pool *ipv1.IPPool) bool {
	if pool != nil {
		return pool.Spec.Provider == ipv1.ProviderAWS
	}
	return ip.Status.AWS != nil
}

// awsAddress is the IP's address as the provider handles it.
func awsAddress(ip *ipv1.IP) (awsprov.Address, error) {
	addr, err := netip.ParseAddr(ip.Status.Address)
	if err != nil {
		return awsprov.Address{}, fmt.Errorf("IP %s has no valid address", ip.Name)
	}
	a := awsprov.Address{Name: ip.Name, IP: addr}
	if ip.Status.AWS != nil {
		a.PublicIPv4Pool = ip.Status.AWS.PublicIPv4Pool
	}
	return a, nil
}

// prepareAWS records the pool's mode in status.aws before any node is
// asked to hold the address, so that the agents know from their first
// pass not to announce it (EC2 routes it, not ARP).
func prepareAWS(ip *ipv1.IP, pool *ipv1.IPPool) {
	if ip.Status.AWS == nil {
		ip.Status.AWS = &ipv1.AWSStatus{}
	}
	if pool != nil && pool.Spec.AWS != nil && ip.Status.AWS.AllocationID == "" {
		// The mode may only change while nothing is allocated: an
		// allocation is released under the mode it was made in.
		ip.Status.AWS.PublicIPv4Pool = pool.Spec.AWS.PublicIPv4Pool
	}
}

func prevAttachment(st *ipv1.AWSStatus) awsprov.Attachment {
	att := awsprov.Attachment{ENI: st.NetworkInterfaceID, PrivateIP: st.PrivateIP,
		AllocationID: st.AllocationID, AssociationID: st.AssociationID, GiveBack: giveBackOf(st)}
	if p := st.Pending; p != nil {
		att.Pending = &awsprov.PrivateIP{ENI: p.NetworkInterfaceID, IP: p.PrivateIP}
	}
	return att
}

// errIntent marks an attach stopped because its intent could not be
// recorded (a status write conflict): nothing was asked of EC2, and the
// reconcile retries at once rather than after ec2Retry.
var errIntent = errors.New("the private IP about to be assigned could not be recorded")

// intentRecorder returns the awsprov.Intend of an attach to target: it
// writes the chosen private IP to status.aws.pending, with a patch
// conditional on the version read, before EC2 is asked to assign it. An
// intent left by an attach that stopped (a restart) on another ENI goes to
// giveBack when it is replaced; on target's ENI the provider found it
// unassigned before choosing anew.
func intentRecorder(ip *ipv1.IP, status *statuspatch.Patcher[*ipv1.IP]) awsprov.Intend {
	if status == nil {
		return nil
	}
	st := ip.Status.AWS
	before := st.Pending
	return func(ctx context.Context, p awsprov.PrivateIP) error {
		e := ipv1.AWSPrivateIP{NetworkInterfaceID: p.ENI, PrivateIP: p.IP}
		if before != nil && before.NetworkInterfaceID != p.ENI && !slices.Contains(st.GiveBack, *before) {
			st.GiveBack = append(st.GiveBack, *before)
		}
		before = nil
		st.Pending = &e
		ipcond.Summarize(ip)
		if err := status.PatchUnfinished(ctx, ip); err != nil {
			return fmt.Errorf("%w: %w", errIntent, err)
		}
		return nil
	}
}

func giveBackOf(st *ipv1.AWSStatus) []awsprov.PrivateIP {
	var out []awsprov.PrivateIP
	for _, g := range st.GiveBack {
		out = append(out, awsprov.PrivateIP{ENI: g.NetworkInterfaceID, IP: g.PrivateIP})
	}
	return out
}

// record keeps what EC2 handed out, including after a failed call (the
// Attachment then says what the calls before the failure did).
func record(st *ipv1.AWSStatus, att awsprov.Attachment) {
	if att.ENI != "" {
		st.NetworkInterfaceID, st.PrivateIP, st.AssociationID = att.ENI, att.PrivateIP, att.AssociationID
	}
	if att.AllocationID != "" {
		st.AllocationID = att.AllocationID
	}
	for _, g := range att.GiveBack {
		e := ipv1.AWSPrivateIP{NetworkInterfaceID: g.ENI, PrivateIP: g.IP}
		if !slices.Contains(st.GiveBack, e) {
			st.GiveBack = append(st.GiveBack, e)
		}
	}
}

// ec2Failure is an EC2 failure as the Attached condition shows it.
type ec2Failure struct{ reason, message string }

// attachEC2 moves the address to node's network interface in EC2 and
// verifies it there. It is called for the node of a new hold as soon as
// the hold is on record (leadInEC2), and again once the agent on node has
// claimed the IP (status.attachedNode), which finds the move done; EC2
// follows the holds the controller records, so a node that lost its hold
// (a stale holder) is never given the address back.
// Nil when EC2 shows the address routed to node.
func (r *Reconciler) attachEC2(ctx context.Context, ip *ipv1.IP, node string, status *statuspatch.Patcher[*ipv1.IP]) *ec2Failure {
	st := ip.Status.AWS
	if v, ok := r.recentlyVerified(ip.Name, node); ok {
		// Verified by this manager a moment ago; a reconcile that read
		// the IP before that status write landed takes it from memory
		// rather than asking EC2 again. Once the status records the
		// move (the reconcile after it), what the move left behind is
		// given back: not before, so that the failover never waits for it.
		recorded := st.Node == node
		*st = *v.DeepCopy()
		if recorded {
			r.giveBack(ctx, ip, st)
		}
		return nil
	}
	if f := r.refusedRecently(ip.Name, node); f != nil {
		return f
	}
	addr, err := awsAddress(ip)
	if err != nil {
		return &ec2Failure{reason: awsprov.ReasonEC2Error, message: err.Error()}
	}
	n := &corev1.Node{}
	if err := r.Get(ctx, types.NamespacedName{Name: node}, n); err != nil {
		return &ec2Failure{reason: awsprov.ReasonInstanceNotFound, message: fmt.Sprintf("reading node %s: %v", node, err)}
	}
	start := time.Now()
	target, err := r.resolve(ctx, n, addr)
	if err != nil {
		return r.rememberRefusal(ip.Name, node, r.ec2Failed(ctx, ip, st, "Resolve", err))
	}
	if len(st.GiveBack) >= giveBackFirst {
		// Give-backs keep failing: do not pile up more.
		if r.giveBack(ctx, ip, st); len(st.GiveBack) > giveBackFirst {
			return &ec2Failure{reason: awsprov.ReasonEC2Error, message: fmt.Sprintf("%d former private IPs of %s wait to be given back in EC2 (status.aws.giveBack); the address is not moved again until they are", len(st.GiveBack), addr.IP)}
		}
	}
	st.InstanceID, st.VPCID = target.InstanceID, target.VPCID
	prev := prevAttachment(st)
	prev.Seen = r.seen(ip.Name, addr.IP.String())
	att, err := r.AWS.Attach(ctx, addr, target, prev, intentRecorder(ip, status))
	record(st, att)
	if errors.Is(err, errIntent) {
		return &ec2Failure{reason: ipv1.ReasonEC2Attaching, message: err.Error()}
	}
	if err != nil {
		r.forgetTarget(n, addr)
		return r.rememberRefusal(ip.Name, node, r.ec2Failed(ctx, ip, st, "Attach", err))
	}
	st.Pending = nil // associated, or in giveBack
	moved := st.Node != node
	st.Node = node
	r.aws.mu.Lock()
	r.aws.verified[ip.Name] = verifiedPlacement{status: *st.DeepCopy(), seen: att.Seen, address: addr.IP.String(), at: r.now()}
	delete(r.aws.refused, ip.Name)
	r.aws.mu.Unlock()
	ec2Seconds.Observe(time.Since(start).Seconds())
	if !moved {
		r.giveBack(ctx, ip, st)
	}
	if moved {
		what := fmt.Sprintf("%s is on %s of instance %s (node %s)", addr.IP, st.NetworkInterfaceID, st.InstanceID, node)
		if addr.PublicIPv4Pool != "" {
			what = fmt.Sprintf("Elastic IP %s (%s) is associated with %s on %s of instance %s (node %s), association %s",
				addr.IP, st.AllocationID, st.PrivateIP, st.NetworkInterfaceID, st.InstanceID, node, st.AssociationID)
		}
		r.Recorder.Eventf(ip, nil, corev1.EventTypeNormal, "EC2Attached", "Attach", "EC2 verified: %s", what)
	}
	return nil
}

// leadInEC2 moves an aws IP in EC2 as soon as a new hold is on record,
// rather than once the new holder's agent has claimed it: the claim (the
// agent's witness check and its write) then runs while EC2 moves the
// address, instead of before, which takes it off every failover's path.
//
// It is as safe as following the claim. The placement it follows was
// written conditionally on the version it was decided from, and the
// controller places a new hold only once no other node may answer (the
// old holder let go, or is provably fenced: its Lease confirmed expired by
// the API server, or a quorum of its witnesses declared it silent), which
// is also all the claim would have waited for; EC2 itself then routes the
// address to one network interface at a time. What EC2 gives a node whose
// agent never claims is taken away by the next placement, which EC2 again
// follows. A manager that dies between the move and its record finds it
// by describing, as after any other interrupted move.
func (r *Reconciler) leadInEC2(ctx context.Context, ip *ipv1.IP, status *statuspatch.Patcher[*ipv1.IP], wasOn string) error {
	node, st := ip.Status.Node, ip.Status.AWS
	if r.AWS == nil || st == nil || node == "" || node == wasOn || ip.Status.AttachedNode != "" || st.Node == node {
		return nil
	}
	ipcond.Summarize(ip)
	if err := status.PatchUnfinished(ctx, ip); err != nil {
		return err
	}
	if ec2 := r.attachEC2(ctx, ip, node, status); ec2 != nil {
		// The claim's reconcile tries again; its failure waits ec2Retry.
		ipcond.Set(ip, metav1.Condition{Type: ipv1.ConditionAttached, Status: metav1.ConditionFalse,
			Reason: ec2.reason, Message: ec2.message})
	}
	return nil
}

// giveBack unassigns the private IPs in status.aws.giveBack (what a move
// across subnets left behind), after the move, so that the failover did
// not wait for it. A failure is an Event; the next reconcile tries again.
func (r *Reconciler) giveBack(ctx context.Context, ip *ipv1.IP, st *ipv1.AWSStatus) {
	if len(st.GiveBack) == 0 || st.VPCID == "" {
		return
	}
	addr, err := awsAddress(ip)
	if err != nil {
		return
	}
	left, err := r.AWS.GiveBack(ctx, addr, st.VPCID, giveBackOf(st))
	st.GiveBack = nil
	for _, g := range left {
		st.GiveBack = append(st.GiveBack, ipv1.AWSPrivateIP{NetworkInterfaceID: g.ENI, PrivateIP: g.IP})
	}
	r.aws.mu.Lock()
	if v, ok := r.aws.verified[ip.Name]; ok {
		v.status.GiveBack = slices.Clone(st.GiveBack)
		r.aws.verified[ip.Name] = v
	}
	r.aws.mu.Unlock()
	if err != nil {
		reason := awsprov.ReasonOf(err)
		r.Recorder.Eventf(ip, nil, corev1.EventTypeWarning, reason, "GiveBack", "giving back former private IPs of %s: %v", addr.IP, err)
		ctrl.LoggerFrom(ctx).Info("EC2 give-back failed", "ip", ip.Name, "reason", reason, "message", err.Error())
		ec2Failures.WithLabelValues(reason).Inc()
	}
}

// ec2Failed turns a provider error into the Attached condition's reason
// and message, with a Warning Event naming the EC2 action and EC2's error
// code (once per change of reason).
func (r *Reconciler) ec2Failed(ctx context.Context, ip *ipv1.IP, st *ipv1.AWSStatus, step string, err error) *ec2Failure {
	st.Node = ""
	r.forgetVerified(ip.Name)
	f := &ec2Failure{reason: awsprov.ReasonOf(err), message: err.Error()}
	action := step
	var e *awsprov.Error
	if errors.As(err, &e) && e.Action != "" {
		action = e.Action
	}
	if c := meta.FindStatusCondition(ip.Status.Conditions, ipv1.ConditionAttached); c == nil || c.Reason != f.reason {
		r.Recorder.Eventf(ip, nil, corev1.EventTypeWarning, f.reason, action, "%s", f.message)
	}
	ctrl.LoggerFrom(ctx).Info("EC2 failed", "ip", ip.Name, "action", action, "reason", f.reason, "message", f.message)
	ec2Failures.WithLabelValues(f.reason).Inc()
	return f
}

// detachEC2 takes the address off every node in EC2 once no agent may
// answer for it and no holder is chosen; an Elastic IP stays allocated
// for the next holder. It returns the failure, if any.
func (r *Reconciler) detachEC2(ctx context.Context, ip *ipv1.IP) *ec2Failure {
	st := ip.Status.AWS
	if st == nil || st.VPCID == "" || (st.Node == "" && st.NetworkInterfaceID == "" && len(st.GiveBack) == 0 && st.Pending == nil) {
		return nil
	}
	addr, err := awsAddress(ip)
	if err != nil {
		return nil
	}
	if err := r.AWS.Detach(ctx, addr, st.VPCID, prevAttachment(st)); err != nil {
		return r.ec2Failed(ctx, ip, st, "Detach", err)
	}
	r.forgetVerified(ip.Name)
	st.Node, st.NetworkInterfaceID, st.PrivateIP, st.AssociationID, st.GiveBack, st.Pending = "", "", "", "", nil, nil
	r.Recorder.Eventf(ip, nil, corev1.EventTypeNormal, "EC2Detached", "Detach", "EC2 routes %s to no node", addr.IP)
	return nil
}

// releaseEC2 detaches the address in EC2 and releases the Elastic IP if
// the operator allocated it (never one a user allocated by hand), for an
// IP that is deleted or moves to another address. Nil status.aws or no
// VPC: nothing was ever handed out.
func (r *Reconciler) releaseEC2(ctx context.Context, ip *ipv1.IP) error {
	st := ip.Status.AWS
	if st == nil || r.AWS == nil {
		// Without the provider, EC2 is left as it is and status.aws keeps
		// saying what is there.
		return nil
	}
	if st.VPCID != "" {
		addr, err := awsAddress(ip)
		if err != nil {
			return err
		}
		if err := r.AWS.Release(ctx, addr, st.VPCID, prevAttachment(st)); err != nil {
			f := r.ec2Failed(ctx, ip, st, "Release", err)
			ipcond.Set(ip, metav1.Condition{Type: ipv1.ConditionAttached, Status: metav1.ConditionFalse,
				Reason: f.reason, Message: f.message})
			return fmt.Errorf("releasing %s of IP %s in EC2: %w", addr.IP, ip.Name, err)
		}
		r.Recorder.Eventf(ip, nil, corev1.EventTypeNormal, "EC2Released", "Release", "EC2 routes %s to no node; released what kubext allocated for it", addr.IP)
	}
	r.forgetVerified(ip.Name)
	ip.Status.AWS = nil
	return nil
}

// resolve finds node's network interface for addr, from memory when it
// was found before: a node's instance and ENIs do not change while its
// providerID stays the same, and a failed attach forgets it.
func (r *Reconciler) resolve(ctx context.Context, n *corev1.Node, addr awsprov.Address) (awsprov.NodeTarget, error) {
	key := targetKey(n, addr)
	r.aws.mu.Lock()
	t, ok := r.aws.targets[key]
	r.aws.mu.Unlock()
	if ok {
		return t, nil
	}
	t, err := r.AWS.Resolve(ctx, n.Spec.ProviderID, addr)
	if err != nil {
		return t, err
	}
	r.aws.mu.Lock()
	r.aws.targets[key] = t
	r.aws.mu.Unlock()
	return t, nil
}

// preResolve finds the network interfaces of the standbys' nodes ahead of
// a failover, so that the failover itself makes only the move's calls.
// Errors are left for the attach to report.
func (r *Reconciler) preResolve(ctx context.Context, ip *ipv1.IP, nodes []string) {
	addr, err := awsAddress(ip)
	if err != nil {
		return
	}
	for _, name := range nodes {
		n := &corev1.Node{}
		if err := r.Get(ctx, types.NamespacedName{Name: name}, n); err != nil || n.Spec.ProviderID == "" {
			continue
		}
		_, _ = r.resolve(ctx, n, addr)
	}
}

func targetKey(n *corev1.Node, addr awsprov.Address) string {
	return n.Name + "|" + n.Spec.ProviderID + "|" + addr.IP.String() + "|" + addr.PublicIPv4Pool
}

func (r *Reconciler) forgetTarget(n *corev1.Node, addr awsprov.Address) {
	r.aws.mu.Lock()
	delete(r.aws.targets, targetKey(n, addr))
	r.aws.mu.Unlock()
}

// recentlyVerified returns status.aws as this manager verified it with
// EC2 on node less than ec2Reverify ago, if it did.
func (r *Reconciler) recentlyVerified(ip, node string) (ipv1.AWSStatus, bool) {
	r.aws.mu.Lock()
	defer r.aws.mu.Unlock()
	v, ok := r.aws.verified[ip]
	if !ok || v.status.Node != node || r.now().Sub(v.at) >= ec2Reverify {
		return ipv1.AWSStatus{}, false
	}
	return v.status, true
}

// seen is what the last verification of ip's address by this manager
// showed, less than ec2Reverify ago, on whichever node; nil if none.
func (r *Reconciler) seen(ip, address string) *awsprov.Observation {
	r.aws.mu.Lock()
	defer r.aws.mu.Unlock()
	v, ok := r.aws.verified[ip]
	if !ok || v.address != address || r.now().Sub(v.at) >= ec2Reverify {
		return nil
	}
	return v.seen
}

func (r *Reconciler) forgetVerified(ip string) {
	r.aws.mu.Lock()
	delete(r.aws.verified, ip)
	r.aws.mu.Unlock()
}
