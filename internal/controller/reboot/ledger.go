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
//     conflict and made again from a fresh read. Any two grants are
//     therefore ordered, and each was decided knowing every slot granted
//     before it.
//  2. Count: a decision counts a node as holding a slot when its
//     annotations say so or the ledger does (the union), so neither a grant
//     whose node patch has not landed nor a node whose slot is being given
//     back is ever missed.
//  3. Give back: the ledger entry is removed before the node's annotations
//     are cleared (the node still counts through its annotations meanwhile).
//  4. Repair: a granted slot whose node shows no approval is either a node
//     patch still on its way or one that never will land. Each entry keeps
//     the node's resourceVersion at the grant: while the node still has it,
//     the grant is completed (the same patch, conditional on the same
//     resourceVersion, so exactly one of two writers lands); once the node
//     has changed, the granting patch can never land, and the entry is
//     dropped. An entry whose approval had been seen on the node (Confirmed)
//     but whose node lost it — deleted while down, re-registered without
//     its annotations — keeps its slot until the group's reboot timeout.
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
}

// readLedger reads the ledger from the API server (never from a cache).
func (r *Reconciler) readLedger(ctx context.Context) (*ledger, error) {
	cm := &corev1.ConfigMap{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: r.LedgerNamespace, Name: r.LedgerName}, cm)
	if apierrors.IsNotFound(err) {
		return &ledger{slots: map[string]slot{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the reboot ledger %s/%s: %w", r.LedgerNamespace, r.LedgerName, err)
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
// a conflict means someone else granted or gave back a slot meanwhile.
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
		l.object, l.slots = cm, slots
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
		return fmt.Errorf("updating the reboot ledger: %w", err)
	}
	l.object, l.slots = cm, slots
	return nil
}

// grant records the decision's approvals as slots in one ledger write. A
// slot remembers whether its node is a control-plane node as the decision
// saw it (role label, taint or a group's controlPlaneSelector), for when
// the Node is gone.
func (r *Reconciler) grant(ctx context.Context, s *state, decision rebootplan.Decision, now time.Time) error {
	slots := maps.Clone(s.ledger.slots)
	for _, name := range decision.Approved {
		n := s.nodes[name]
		slots[name] = slot{Group: s.groupOf(decision, name).name, Approval: stamp(now), NodeResourceVersion: n.ResourceVersion,
			ControlPlane: decision.IsControlPlane(name)}
	}
	return r.writeLedger(ctx, s.ledger, slots)
}

// giveBack removes a node's slot from the ledger before its annotations are
// cleared.
func (r *Reconciler) giveBack(ctx context.Context, s *state, name string) error {
	if _, ok := s.ledger.slots[name]; !ok {
		return nil
	}
	slots := maps.Clone(s.ledger.slots)
	delete(slots, name)
	return r.writeLedger(ctx, s.ledger, slots)
}

// repairLedger brings the ledger and the nodes together (step 4 of the
// protocol): it completes grants whose node patch may still land, drops
// those that never can, confirms those the node shows, and lets slots of
// vanished nodes go at their group's reboot timeout. It returns the slots
// held for nodes that cannot show them.
func (r *Reconciler) repairLedger(ctx context.Context, s *state, now time.Time) ([]rebootplan.Absent, error) {
	slots := maps.Clone(s.ledger.slots)
	changed := false
	var absent []rebootplan.Absent
	var complete []string
	for name, sl := range s.ledger.slots {
		n, exists := s.nodes[name]
		shows := exists && n.Annotations[rebootv1.AnnotationInProgress] != ""
		switch {
		case shows && !sl.Confirmed:
			sl.Confirmed = true
			slots[name] = sl
			changed = true
		case shows:
		case !sl.Confirmed && exists && n.ResourceVersion == sl.NodeResourceVersion:
			complete = append(complete, name)
		case !sl.Confirmed:
			// The node changed since the grant: the granting patch, made
			// conditional on the old version, can never land.
			delete(slots, name)
			changed = true
		default:
			approved, err := time.Parse(time.RFC3339, sl.Approval)
			if err != nil || now.Sub(approved) > rebootTimeout(s.groupSpec(sl.Group)) {
				delete(slots, name)
				changed = true
				continue
			}
			absent = append(absent, rebootplan.Absent{Node: name, Group: sl.Group, ControlPlane: sl.ControlPlane})
		}
	}
	if changed {
		if err := r.writeLedger(ctx, s.ledger, slots); err != nil {
			return nil, err
		}
	}
	for _, name := range complete {
		sl := s.ledger.slots[name]
		if err := r.markApproved(ctx, s, name, sl.Approval); err != nil {
			return nil, err
		}
	}
	return absent, nil
}

// groupSpec is the spec of the named group; the CRD's defaults when there
// is no such object (the implicit default group, or a deleted group).
func (s *state) groupSpec(name string) rebootv1.RebootGroupSpec {
	for i := range s.groups {
		if s.groups[i].Name == name {
			return s.groups[i].Spec
		}
	}
	return implicitDefault()
}
