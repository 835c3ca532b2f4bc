// Package statuspatch is how a kubext reconciler writes what it found out:
// the object's status, once per reconcile, and its finalizers, each with a
// patch conditional on the version it was computed from; and Error, the
// failure that carries the condition reason the status shows for it.
//
// The rules it keeps are those of every kubext reconciler. A reconcile
// with nothing to report writes nothing: comparing with the object as read
// costs nothing, a write wakes every watcher. A write is
// never blind: it is a merge patch carrying the resourceVersion read, so a
// status computed from an old version (another replica, an agent writing
// the same object) is refused, and the next reconcile computes it again
// from the new one. observedGeneration moves on only when the reconcile
// finished with the generation it read: it succeeded, or refused the spec
// for good (a terminal error), so a user can tell "not looked at yet" from
// "looked at and refused".
//
// A reconciler uses it so (internal/controller/crontab is the shortest):
//
//	if added, err := statuspatch.AddFinalizer(ctx, r.Client, obj, finalizer); err != nil || added {
//		return ctrl.Result{}, err // only where external cleanup is needed
//	}
//	status := statuspatch.New(r.Client, obj, statusFields)
//	defer func() { reterr = errors.Join(reterr, status.Patch(ctx, obj, reterr)) }()
//	err := r.reconcileChild(ctx, obj) // returns statuspatch.Failed or Refused
//	if failure := statuspatch.As(err); failure != nil {
//		setCondition(obj, metav1.ConditionFalse, failure.Reason, failure.Message)
//	}
//
// After Cluster API's util/patch and util/finalizers and Flux's serror,
// reduced to what kubext's typed objects need.
package statuspatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Fields says where an object of one kind keeps its status and, in it, its
// observedGeneration: for a CronTab,
//
//	func(ct *stablev1.CronTab) (any, *int64) { return ct.Status, &ct.Status.ObservedGeneration }
type Fields[O client.Object] func(O) (status any, observedGeneration *int64)

// Patcher writes the status of one object at the end of one reconcile.
// Start it with New right after reading the object, before anything
// changes it, and call Patch once, usually from a defer.
type Patcher[O client.Object] struct {
	client client.Client
	fields Fields[O]
	orig   O
}

// New remembers obj as read, so that Patch can tell what the reconcile
// changed and write over that version only.
func New[O client.Object](c client.Client, obj O, fields Fields[O]) *Patcher[O] {
	return &Patcher[O]{client: c, fields: fields, orig: obj.DeepCopyObject().(O)}
}

// Finished reports whether a reconcile that ended with err is done with
// the generation it read: it succeeded, or the spec was refused for good.
func Finished(err error) bool {
	return err == nil || errors.Is(err, reconcile.TerminalError(nil))
}

// Patch writes obj's status when it differs from the status read, setting
// observedGeneration to obj's generation first when the reconcile, ending
// with reconcileErr, is Finished. The object being gone meanwhile is no
// error; another writer having changed it is, wrapped to say so, and the
// retry computes the status again from what that writer left.
func (p *Patcher[O]) Patch(ctx context.Context, obj O, reconcileErr error) error {
	if Finished(reconcileErr) {
		_, observed := p.fields(obj)
		*observed = obj.GetGeneration()
	}
	return p.write(ctx, obj)
}

// PatchUnfinished writes obj's status when it differs from the status
// read, leaving observedGeneration as it was: for a reconcile that is not
// done with its generation whatever it returns (a deletion still waiting).
func (p *Patcher[O]) PatchUnfinished(ctx context.Context, obj O) error {
	return p.write(ctx, obj)
}

func (p *Patcher[O]) write(ctx context.Context, obj O) error {
	before, _ := p.fields(p.orig)
	after, _ := p.fields(obj)
	if equality.Semantic.DeepEqual(before, after) {
		return nil
	}
	err := p.client.Status().Patch(ctx, obj, client.MergeFromWithOptions(p.orig, client.MergeFromWithOptimisticLock{}))
	switch {
	case apierrors.IsConflict(err):
		return fmt.Errorf("status of %s changed meanwhile, will retry: %w", client.ObjectKeyFromObject(obj), err)
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("writing the status of %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	// The next write of this reconcile, if any, is over what was written.
	p.orig = obj.DeepCopyObject().(O)
	return nil
}

// AddFinalizer puts finalizer f on obj unless it is there, with a patch
// conditional on obj's resourceVersion, and reports whether it wrote. A
// reconciler that wrote returns at once: the write brings it back with the
// object as it now is.
func AddFinalizer(ctx context.Context, c client.Client, obj client.Object, f string) (bool, error) {
	if controllerutil.ContainsFinalizer(obj, f) {
		return false, nil
	}
	orig := obj.DeepCopyObject().(client.Object)
	controllerutil.AddFinalizer(obj, f)
	if err := c.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, fmt.Errorf("adding finalizer %s to %s: %w", f, client.ObjectKeyFromObject(obj), err)
	}
	return true, nil
}

// RemoveFinalizer takes finalizer f off obj, with a patch conditional on
// obj's resourceVersion, once the cleanup it stood for is done. The object
// being gone already is no error.
func RemoveFinalizer(ctx context.Context, c client.Client, obj client.Object, f string) error {
	if !controllerutil.ContainsFinalizer(obj, f) {
		return nil
	}
	orig := obj.DeepCopyObject().(client.Object)
	controllerutil.RemoveFinalizer(obj, f)
	err := c.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing finalizer %s from %s: %w", f, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

// DropFinalizer takes finalizer f off obj whatever else changed in obj
// since it was read: a JSON patch that tests the entry it removes. For an
// object whose own version says nothing about the cleanup the finalizer
// stood for (a reservation, released because its IP is detached), right
// after a write of our own (a Delete) that made obj's version stale: an
// optimistic-lock patch would conflict until the cache caught up. If the
// finalizers moved meanwhile the test fails and the caller retries; nobody
// else's finalizer is dropped. The object being gone already is no error.
func DropFinalizer(ctx context.Context, c client.Client, obj client.Object, f string) error {
	i := slices.Index(obj.GetFinalizers(), f)
	if i < 0 {
		return nil
	}
	path := fmt.Sprintf("/metadata/finalizers/%d", i)
	patch, err := json.Marshal([]map[string]any{{"op": "test", "path": path, "value": f}, {"op": "remove", "path": path}})
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing finalizer %s from %s: %w", f, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}
