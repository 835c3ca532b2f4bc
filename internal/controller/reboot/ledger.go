package reboot

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/rebootplan"
)

// The approvals ledger makes the budget one record. Without it, the budget
// spans nodes while every write is conditional on one node only: a leader
// that was paused between its decision and its node patch (or two managers
// that both believe they lead) could each approve a different node from the
// same free slot, one reboot over maxUnavailable.
//
// The ledger is one ConfigMap listing every slot granted and not yet given
// back, across all groups (control-plane nodes reboot one at a time across
// groups, so the record has to span them). Its protocol:
//
//  1. Grant: the approvals of a decision are added to the ledger in one
//     write conditional on the resourceVersion the decision read (Create
//     when there is none yet); only then are the nodes patched. A decision
//     made from a ledger that anyone has changed since is refused with a
//     conflict and made again from a new read. Any two grants are
//     therefore ordered, and each was decided knowing every slot granted
//     before it.
//  2. Count: a decision counts a node as holding a slot when its
//     annotations say so or the ledger holds one for it (the union, every
//     ledger slot, confirmed or not), so neither a grant whose node patch
//     has not landed, nor an approval the node cache has not seen yet, nor
//     a node whose slot is being given back is ever missed.
//  3. Give back: a node counts through its slot until its reboot is over
//     and the node released, and through its annotations until its
//     reboot is withdrawn. A completed reboot is released first (the
//     node uncordoned, its annotations cleared, rebooted-at recorded) and
//     its slot removed after, with the reconcile's next ledger write: the
//     grant of the node that takes the slot when there is one, so that a
//     hand-over is three writes one after the other (release, give-back
//     with grant, approval), not four. A withdrawn reboot's slot is
//     removed before its annotations are cleared. Either way, the ledger
//     is written even when the version read holds no entry for the node:
//     that write's precondition is what shows none was granted meanwhile.
//  4. Repair: a granted slot whose node shows no approval is either a node
//     patch still on its way or one that never will land. Each entry keeps
//     the node's resourceVersion at the grant: while the node still has it,
//     the grant is completed (the same patch, conditional on the same
//     resourceVersion, so exactly one of two writers lands); once the node
//     has changed, the granting patch can never land, and the entry is
//     dropped. An entry whose approval had been seen on the node (Confirmed)
//     but whose node lost it — deleted while down, re-registered without
//     its annotations — keeps its slot until the group's reboot timeout
//     (the one the slot recorded at the grant, once the group is gone),
//     unless the node, read fresh, shows the reboot the slot ordered
//     completed and released (completed): a give-back that did not follow
//     its release, the controller stopped in between.
//     The confirmation is written with the next ledger write, and at the
//     latest before the node's reboot is ordered (until then a node that
//     vanishes is not down for kubext's reboot); an order whose approval
//     the ledger as read does not hold writes the slot, confirmed, first.
//  5. Order: the order (the reboot.kubext.io/now it writes and the boot it
//     ends) is added to the node's slot before the node is patched. The
//     agents reboot only for the order their slot records, so an order
//     nobody recorded — written by hand while the node drains, or forged
//     where the admission policy is missing — reboots nothing. A slot that
//     records an order whose node patch never landed is harmless: the order
//     was decided, and the next one overwrites it.
//
// Reading from a cache. Decisions take the nodes, the groups and the
// ledger from informer caches, which may lag the API server by the
// watch's delay (the ledger has one of its own, of that one ConfigMap).
// What this cannot break:
//
//   - Every slot kubext holds is in the ledger from before its node patch
//     until after its node is released (steps 1 and 3), and step 2 counts
//     every slot of the ledger as read whatever the cached node shows. A
//     ledger read from a cache may lack a slot granted since (by another
//     leader, or a paused ex-leader), but a decision only ever adds a slot
//     through a grant, a write conditional on the ledger's resourceVersion
//     as read, which the API server refuses once anyone has written the
//     ledger since. So every grant that lands was decided from the ledger
//     as it is when the grant lands: exact, where a fresh read would be
//     stale the moment it returns. A stale ledger costs a conflict and a
//     quick look again (the controller's own writes are overlaid on the
//     cache, own.go, so it is never its own staleness), never a slot.
//   - A cache that has not seen an approval, a release or a grant of
//     another leader can make a decision approve less, never more.
//   - Every node patch is conditional on the version the decision read:
//     a stale node (a request withdrawn, a node gone NotReady or cordoned
//     since) makes the patch a conflict and the decision is made again.
//   - Step 4 never drops a grant on the cache's word: a node that does
//     not show its grant and is not at the version granted is read fresh
//     first (the cache may be behind the version another leader granted).
//   - A group's spec may lag a user's change by the watch's delay (a
//     lowered maxUnavailable counts from the reconcile its watch event
//     brings), as it would lag any read made just before the change.
//
// What a stale cache can still do: count as available a node that became
// unavailable for reasons outside kubext (NotReady, cordoned by someone
// else) during the watch's lag — typically milliseconds, at most until the
// informer's watch reconnects — and approve another node in its place. It
// cannot be prevented by any read either: a fresh List is as stale the
// moment after it returns, a node can go NotReady at any time, and such
// nodes are not kubext's to count in the ledger. maxUnavailable bounds
// what kubext makes unavailable; it has never been a promise about nodes
// that fail by themselves. The outside watch of make bench-reboot samples
// the sum of both and finds it within the budget.
//
// The controller also remembers the nodes, groups and ledger as it last
// wrote them until the cache shows them (own.go), so that its next
// decision is not made from the version before its own write; that memory
// only ever returns a newer version of an object and is not part of the
// argument above.
//
// What the ledger does not cover: nodes unavailable for other reasons
// (NotReady, cordoned by someone else) are read from the nodes as before;
// they are not kubext's doing and a stale view of them cannot be prevented
// by kubext's writes.

// DefaultLedgerName is the ConfigMap holding the approvals ledger, in the
// controller's namespace, unless Reconciler.LedgerName says otherwise.
const DefaultLedgerName = rebootv1.DefaultLedgerName

// ledgerKey is the ConfigMap key holding the slots as JSON.
const ledgerKey = rebootv1.LedgerKey

// slot is one granted slot, by node name (api/reboot/v1alpha1: the
// reboot-agents read the ledger too).
type slot = rebootv1.LedgerSlot

// ledger is the ledger as read.
type ledger struct {
	// object is the ConfigMap as read; nil when there is none yet.
	object *corev1.ConfigMap
	slots  map[string]slot
	// unwritten says slots holds confirmations not written yet; any
	// write of slots carries them.
	unwritten bool
	// owed says slots lacks slots given back (giveBack) and not written
	// yet: the reconcile writes them before it ends, with its grant when
	// it makes one.
	owed bool
}

// giveBack removes the slot of a node whose reboot was completed (its
// release patch landed) from the slots as read, for the next write of the
// ledger to carry (ledger.go, step 3).
//
// Owed even when the ledger as read holds no slot for the node: read from a
// cache, it may lag another leader's grant, and the write, conditional on
// the version read, is what proves it holds none.
func (l *ledger) giveBack(node string) {
	if !l.owed {
		// Once per write: the slots as read stay as read.
		l.slots = maps.Clone(l.slots)
	}
	delete(l.slots, node)
	l.owed = true
}

// readLedger reads the ledger from LedgerReader (a cache of it, as a
// rule), overlaid with this controller's own last write.
func (r *Reconciler) readLedger(ctx context.Context) (*ledger, error) {
	cm := &corev1.ConfigMap{}
	err := r.ledgerReader().Get(ctx, types.NamespacedName{Namespace: r.LedgerNamespace, Name: r.LedgerName}, cm)
	switch {
	case apierrors.IsNotFound(err):
		created, ok := r.ownLedger.created(r.LedgerName)
		if !ok {
			return &ledger{slots: map[string]slot{}}, nil
		}
		cm = created
	case err != nil:
		return nil, fmt.Errorf("reading the reboot ledger %s/%s: %w", r.LedgerNamespace, r.LedgerName, err)
	default:
		cm = r.ownLedger.view(cm)
	}
	slots, err := rebootv1.ParseLedger(cm.Data)
	if err != nil {
		// Never guess at a damaged budget: approve nothing until a person
		// looks (the Event and error say where).
		return nil, fmt.Errorf("%s/%s: %w; no reboot is approved until it is fixed or deleted", r.LedgerNamespace, r.LedgerName, err)
	}
	return &ledger{object: cm, slots: slots}, nil
}

// writeLedger replaces the ledger's slots, conditional on the version read;
// a conflict means someone else granted or gave back a slot meanwhile (or
// the ledger was read from a cache that had not seen the last write yet).
func (r *Reconciler) writeLedger(ctx context.Context, l *ledger, slots map[string]slot) error {
	data, err := json.Marshal(slots)
	if err != nil {
		return err
	}
	if l.object == nil {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: r.LedgerNamespace, Name: r.LedgerName,
				Labels: map[string]string{"app.kubernetes.io/name": "kubext", "app.kubernetes.io/component": "reboot-controller"}},
			Data: map[string]string{ledgerKey: string(data)},
		}
		if err := r.Create(ctx, cm); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("configmaps"), r.LedgerName, err)
			}
			return fmt.Errorf("creating the reboot ledger: %w", err)
		}
		r.ownLedger.wrote("", cm)
		l.object, l.slots, l.unwritten, l.owed = cm, slots, false, false
		return nil
	}
	cm := l.object.DeepCopy()
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[ledgerKey] = string(data)
	// Update carries the resourceVersion read: the API server refuses it
	// if the ledger changed since.
	if err := r.Update(ctx, cm); err != nil {
		if apierrors.IsConflict(err) {
			refusedWrites.WithLabelValues("ledger").Inc()
		}
		if apierrors.IsNotFound(err) {
			// Deleted since it was read: decide again from nothing.
			r.ownLedger.forget(r.LedgerName)
			return apierrors.NewConflict(corev1.Resource("configmaps"), r.LedgerName, err)
		}
		return fmt.Errorf("updating the reboot ledger: %w", err)
	}
	r.ownLedger.wrote(l.object.ResourceVersion, cm)
	l.object, l.slots, l.unwritten, l.owed = cm, slots, false, false
	return nil
}

// grant records the decision's approvals as slots in one ledger write. A
// slot remembers whether its node is a control-plane node as the decision
// saw it (role label, taint or a group's controlPlaneSelector), for when
// the Node is gone.
func (r *Reconciler) grant(ctx context.Context, s *state, decision rebootplan.Decision, now time.Time) error {
	slots := maps.Clone(s.ledger.slots)
	groups := s.groupsOf(decision)
	for _, name := range decision.Approved {
		n := s.nodes[name]
		g := groups.of(name)
		slots[name] = slot{Group: g.name, Approval: stamp(now), NodeResourceVersion: n.ResourceVersion,
			ControlPlane: decision.IsControlPlane(name), TimeoutSeconds: timeoutSeconds(g.spec)}
	}
	return r.writeLedger(ctx, s.ledger, slots)
}

// repairLedger brings the ledger and the nodes together (step 4 of the
// protocol): it completes grants whose node patch may still land, drops
// those that never can, confirms those the node shows, and lets slots of
// vanished nodes go at their group's reboot timeout. It returns the slots
// held for nodes that cannot show them.
func (r *Reconciler) repairLedger(ctx context.Context, s *state, now time.Time, next *deadlines) ([]rebootplan.Absent, error) {
	slots := maps.Clone(s.ledger.slots)
	changed, confirmed := false, false
	var absent []rebootplan.Absent
	var complete []string
	for name, sl := range s.ledger.slots {
		n, exists := s.nodes[name]
		// From the cache, a node that does not show its grant and is at
		// another version proves nothing: the cache may be behind the
		// version granted (another leader's grant), whose patch may still
		// land. Nor does a node that shows its reboot completed and
		// released, its give-back not written (the controller stopped, or
		// its ledger write was refused, in between): an old version of it
		// can look so. Only the API server can say the node moved on.
		moved := !sl.Confirmed && (!exists || !shows(n, sl) && n.ResourceVersion != sl.NodeResourceVersion)
		released := sl.Confirmed && exists && completed(n, sl)
		if moved || released {
			fresh, err := r.freshNode(ctx, name)
			if err != nil {
				return nil, err
			}
			if exists = fresh != nil; exists {
				s.setNode(fresh)
				n = fresh
			}
		}
		switch {
		case exists && shows(n, sl) && !sl.Confirmed:
			// Written with the next ledger write this reconcile makes, or
			// before the node's reboot is ordered, whichever is first
			// (writeNodes): until then nothing needs it.
			sl.Confirmed = true
			slots[name] = sl
			confirmed = true
		case exists && shows(n, sl):
		case !sl.Confirmed && exists && n.ResourceVersion == sl.NodeResourceVersion:
			complete = append(complete, name)
		case !sl.Confirmed:
			// The node, read fresh, changed since the grant: the granting
			// patch, made conditional on the old version, can never land.
			delete(slots, name)
			changed = true
		case exists && completed(n, sl):
			// The reboot the slot ordered is over and the node released:
			// the give-back that should have followed is written now.
			delete(slots, name)
			changed = true
		default:
			approved, err := time.Parse(time.RFC3339, sl.Approval)
			if err != nil || now.Sub(approved) > s.slotTimeout(sl) {
				delete(slots, name)
				changed = true
				continue
			}
			// Looked at again when the slot may go, not at the next
			// periodic look.
			next.at(approved.Add(s.slotTimeout(sl) + time.Second))
			// A node that exists counts through the slot (snapshot:
			// Reserved) whatever it shows, e.g. a cache that has not seen
			// its approval yet; one that does not has only the ledger.
			if !exists {
				absent = append(absent, rebootplan.Absent{Node: name, Group: sl.Group, ControlPlane: sl.ControlPlane})
			}
		}
	}
	switch {
	case changed:
		if err := r.writeLedger(ctx, s.ledger, slots); err != nil {
			return nil, err
		}
	case confirmed:
		s.ledger.slots, s.ledger.unwritten = slots, true
	}
	writes := make([]*nodeWrite, 0, len(complete))
	for _, name := range complete {
		writes = append(writes, markApproved(s, name, s.ledger.slots[name].Approval, now))
	}
	if err := r.writeNodes(ctx, s, writes); err != nil {
		return nil, err
	}
	return absent, nil
}

// completed says whether the node shows the reboot its slot ordered done
// and the node released: it runs another boot than the one the order
// ended, and carries the completion's rebooted-at and not the slot's
// approval. Only the controller writes those annotations (the order
// policy), so a node re-registered without its annotations while down is
// not completed, and keeps its slot until the group's timeout. A slot
// that recorded no order (granted by an earlier manager) never is.
func completed(n *corev1.Node, sl slot) bool {
	_, rebooted := n.Annotations[rebootv1.AnnotationRebootedAt]
	return sl.Order != "" && sl.BootID != "" && rebooted && !shows(n, sl) &&
		n.Status.NodeInfo.BootID != sl.BootID
}

// shows says whether the node carries the approval the slot grants.
func shows(n *corev1.Node, sl slot) bool {
	return n.Annotations[rebootv1.AnnotationInProgress] == sl.Approval
}

// freshNode reads a node from the API server; nil when there is none.
func (r *Reconciler) freshNode(ctx context.Context, name string) (*corev1.Node, error) {
	n := &corev1.Node{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Name: name}, n)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading node %s: %w", name, err)
	}
	return n, nil
}

// groupSpec is the spec of the named group; the CRD's defaults when there
// is no such object (the implicit default group, or a deleted group).
func (s *state) groupSpec(name string) rebootv1.RebootGroupSpec {
	if spec, ok := s.lookupGroup(name); ok {
		return spec
	}
	return implicitDefault()
}

func (s *state) lookupGroup(name string) (rebootv1.RebootGroupSpec, bool) {
	for i := range s.groups {
		if s.groups[i].Name == name {
			return s.groups[i].Spec, true
		}
	}
	return rebootv1.RebootGroupSpec{}, false
}

// slotTimeout is how long a confirmed slot whose node is gone is kept: the
// group's reboot timeout while the group exists (a user may lengthen it
// for a slow machine), the one recorded at the grant once the group is
// gone too — deleting a group must not stretch its 30 s timeout to the
// default 15 minutes — and the default for a slot that recorded none.
func (s *state) slotTimeout(sl slot) time.Duration {
	if spec, ok := s.lookupGroup(sl.Group); ok {
		return rebootTimeout(spec)
	}
	if sl.TimeoutSeconds > 0 {
		return time.Duration(sl.TimeoutSeconds) * time.Second
	}
	return rebootplan.DefaultRebootTimeout
}
