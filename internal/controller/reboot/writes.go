package reboot

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

// parallelNodeWrites bounds the node patches one reconcile has in flight.
// The steps of a rollout come in waves (a maxUnavailable of 50 releases and
// approves up to 50 nodes in one reconcile); one patch after the other, the
// last node of a wave waited for all the others' round trips — seconds at
// 1,000 nodes — and every decision behind it too.
const parallelNodeWrites = 16

// nodeWrite is one change a reconcile makes to a node, and what follows
// once it has landed.
type nodeWrite struct {
	// orig is the node as decided from; changed the same with the change
	// made. The patch is conditional on orig's resourceVersion.
	orig, changed *corev1.Node
	// giveBack says the write clears the node's approval: its ledger slot
	// is removed first (ledger.go, step 3).
	giveBack bool
	// thenGiveBack says the write completes the node's reboot: its slot is
	// given back once the patch has landed, with the reconcile's next
	// ledger write (ledger.go, step 3: a hand-over is then one ledger
	// write, the give-back and the next grant together).
	thenGiveBack bool
	// order says the write orders the reboot: the ledger's unwritten
	// confirmations, and the node's own, are written first.
	order bool
	// controlPlane says the decision counted the node as a control-plane
	// node (for a slot an order adds to the ledger).
	controlPlane bool
	// freed is when the write frees the node's slot (zero: it does not).
	freed time.Time
	group string
	// landed runs, in the reconcile's goroutine, once the write has landed.
	landed func()
}

// writeNodes makes a reconcile's node writes: first the one ledger write
// that gives back the slots of the nodes whose reboot is withdrawn and
// carries the confirmations an order needs, then every node patch, in
// parallel. The slot of a node whose reboot a patch completed is given
// back in memory once the patch has landed (ledger.owed), for the
// reconcile's next ledger write to carry. A patch
// refused (a node changed since it was read) does not stop the others; once
// all have been made, what landed is recorded, and the first failure is
// returned: a *refusedPatch when every failure was a refusal.
func (r *Reconciler) writeNodes(ctx context.Context, s *state, writes []*nodeWrite) error {
	if len(writes) == 0 {
		return nil
	}
	slots, changed := maps.Clone(s.ledger.slots), false
	for _, w := range writes {
		name := w.orig.Name
		switch {
		case w.giveBack:
			// Written even when the ledger as read holds no slot for the
			// node: read from a cache, it may lag another leader's grant,
			// and the write, conditional on the version read, is what
			// proves it holds none (else that slot would be left behind
			// until its timeout).
			delete(slots, name)
			changed = true
		case w.order:
			// The ledger records the order itself, the slot confirmed,
			// before the node's patch (ledger.go, step 5; the agent reboots
			// only for an order the ledger holds): confirmations made by
			// repairLedger are written now, and a slot the ledger as read
			// lacks (a cache behind another leader's grant, an approval
			// from before the ledger) is added, which only makes the node
			// count where it counted already through its annotations.
			approval := w.orig.Annotations[rebootv1.AnnotationInProgress]
			sl, ok := slots[name]
			if !ok || sl.Approval != approval {
				sl = slot{Group: w.group, Approval: approval, NodeResourceVersion: w.orig.ResourceVersion,
					ControlPlane: w.controlPlane, TimeoutSeconds: timeoutSeconds(s.groupSpec(w.group))}
			}
			sl.Confirmed = true
			sl.Order = w.changed.Annotations[rebootv1.AnnotationNow]
			sl.BootID = w.changed.Annotations[rebootv1.AnnotationBootID]
			slots[name] = sl
			changed = true
		}
	}
	if changed {
		if err := r.writeLedger(ctx, s.ledger, slots); err != nil {
			return err
		}
	}

	// Every patch runs (the context is only the patches' own): one never
	// started would read as landed.
	errs := make([]error, len(writes))
	fresh := make([]*corev1.Node, len(writes))
	workqueue.ParallelizeUntil(context.WithoutCancel(ctx), parallelNodeWrites, len(writes), func(i int) {
		w := writes[i]
		errs[i] = r.Patch(ctx, w.changed, client.MergeFromWithOptions(w.orig, client.MergeFromWithOptimisticLock{}))
		if isConflict(errs[i]) {
			// Read at once what the node changed to, so that the next look
			// decides from it rather than from a cache that may not have
			// it yet (typically kube-controller-manager's taint following a
			// cordon, which the order patch right after a short drain
			// meets). A failed read leaves it to the cache.
			fresh[i], _ = r.freshNode(ctx, w.orig.Name)
		}
	})

	var failed, refused error
	for i, w := range writes {
		switch {
		case isConflict(errs[i]):
			refusedWrites.WithLabelValues("node").Inc()
			if fresh[i] != nil {
				// Newer than the version decided from, as the API server
				// returned it (own.go): seen by the next look even before
				// the cache has it.
				r.own.wrote(w.orig.ResourceVersion, fresh[i])
			}
			rp, _ := refused.(*refusedPatch)
			if rp == nil {
				rp = &refusedPatch{node: w.orig.Name, err: errs[i], reread: true}
				refused = rp
			}
			rp.reread = rp.reread && fresh[i] != nil
			continue
		case errs[i] != nil:
			if failed == nil {
				failed = fmt.Errorf("patching node %s: %w", w.orig.Name, errs[i])
			}
			continue
		}
		r.own.wrote(w.orig.ResourceVersion, w.changed)
		s.setNode(w.changed)
		if w.thenGiveBack {
			s.ledger.giveBack(w.orig.Name)
		}
		if _, waiting := r.freed[w.group]; !w.freed.IsZero() && !waiting {
			r.freed[w.group] = w.freed
		}
		if w.landed != nil {
			w.landed()
		}
	}
	if failed != nil {
		return failed
	}
	return refused
}

// refusedPatch is a node patch the API server refused because the node
// changed since it was read (a conflict). The node still shows what it
// showed, and counts as it did, so the reconcile goes on with the writes
// that landed and looks again soon (Reconcile).
type refusedPatch struct {
	node string
	err  error
	// reread says every refused node was read again from the API server:
	// the next look need not wait for the cache.
	reread bool
}

func (e *refusedPatch) Error() string { return fmt.Sprintf("patching node %s: %v", e.node, e.err) }
func (e *refusedPatch) Unwrap() error { return e.err }
