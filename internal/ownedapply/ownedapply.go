// Package ownedapply writes an object a controller owns (a CronJob, a
// Deployment, a StatefulSet...) with server-side apply, and only when one of
// the fields the controller owns on it differs from what it wants.
//
// It exists for two rules every kubext controller keeps. A reconcile with
// nothing to change writes nothing: applying every time would cost a
// request per object per reconcile and wake every watcher of the object at
// each resync. And what the API server fills in is no difference: the live
// object holds defaults (a rollout strategy, a grace period, an image pull
// policy) the desired one never sets, so the comparison is with what the
// field manager owns (the client-go ExtractX functions), where a field
// someone else has since edited is missing and shows as drift.
package ownedapply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Configuration is what the client-go apply configurations of every kind
// have in common, for Apply to find the object.
type Configuration interface {
	runtime.ApplyConfiguration
	GetName() *string
	GetNamespace() *string
}

// Result is what Apply did.
type Result int

const (
	// Unchanged means the fields the field manager owns were as wanted:
	// nothing was written.
	Unchanged Result = iota
	// Created means there was no object of the name.
	Created
	// Updated means the object was written for a spec of its owner's not
	// yet reconciled.
	Updated
	// Healed means the object was written back after someone else changed
	// a field the field manager owns.
	Healed
)

// ErrNotControlled is an object of the wanted name that the owner does not
// control: not the owner's to change, so nothing was written.
var ErrNotControlled = errors.New("an object of this name exists and is not controlled by its owner")

// WriteError is an apply the API server did not accept.
type WriteError struct {
	// Err is the API server's answer.
	Err error
	// Rejected says the API server refused the object itself (Invalid,
	// BadRequest): it would refuse it again, so only a new spec can help,
	// not a retry.
	Rejected bool
}

func (e *WriteError) Error() string { return e.Err.Error() }
func (e *WriteError) Unwrap() error { return e.Err }

// Apply makes the object of want's namespace and name, controlled by
// owner, hold want: exactly the fields fieldOwner sets. It writes, with
// ForceOwnership to take back fields someone else edited, only when the
// fields fieldOwner owns on the live object, as extract (the client-go
// ExtractX function of its kind) reads them, differ from want.
//
// observedGeneration is the owner's status.observedGeneration: a write
// while the owner has a generation not yet reconciled is for its new spec
// (Updated); any other write puts back what was changed by hand (Healed).
//
// It returns the object as it now stands: as read when Unchanged, as the
// API server answered the apply otherwise. With an error, the Result is
// Unchanged and the object nil, but for a *WriteError: then the object is
// as it stood before the apply, nil if there was none.
func Apply[T any, O interface {
	*T
	client.Object
}, A Configuration](ctx context.Context, c client.Client, fieldOwner string, owner client.Object, observedGeneration int64,
	want A, extract func(O, string) (A, error)) (O, Result, error) {
	live := O(new(T))
	key := client.ObjectKey{Namespace: ptr.Deref(want.GetNamespace(), ""), Name: ptr.Deref(want.GetName(), "")}
	if err := c.Get(ctx, key, live); apierrors.IsNotFound(err) {
		live = nil
	} else if err != nil {
		return nil, Unchanged, err
	}

	if live == nil {
		return create[T, O](ctx, c, fieldOwner, key, want)
	}
	if !metav1.IsControlledBy(live, owner) {
		return nil, Unchanged, ErrNotControlled
	}
	have, err := extract(live, fieldOwner)
	if err != nil {
		return nil, Unchanged, err
	}
	if equality.Semantic.DeepEqual(have, want) {
		return live, Unchanged, nil
	}
	result := Healed
	if owner.GetGeneration() != observedGeneration {
		result = Updated
	}

	if err := c.Apply(ctx, want, client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return live, Unchanged, &WriteError{Err: err, Rejected: apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)}
	}
	// The client has decoded the API server's answer into want.
	applied, err := decode[T, O](want)
	if err != nil {
		return nil, Unchanged, err
	}
	return applied, result, nil
}

// create makes the object the cache says does not exist. The cache may lag:
// an object of the name (someone else's, or ours just created) may exist
// already, and an apply would merge into it and take it over. So the object
// is created with Create, which the API server refuses when the name is
// taken, and only then applied, so that the field manager owns its fields
// as an applier and the next comparison sees them: two writes, on creation
// only.
func create[T any, O interface {
	*T
	client.Object
}, A Configuration](ctx context.Context, c client.Client, fieldOwner string, key client.ObjectKey, want A) (O, Result, error) {
	obj, err := decode[T, O](want)
	if err != nil {
		return nil, Unchanged, err
	}
	if err := c.Create(ctx, obj, client.FieldOwner(fieldOwner)); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// Not a WriteError: trying again, once the cache has seen the
			// object, tells whether it is ours.
			return nil, Unchanged, fmt.Errorf("%s exists though the cache has not seen it yet: %w", key, err)
		}
		return nil, Unchanged, &WriteError{Err: err, Rejected: apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)}
	}
	if err := c.Apply(ctx, want, client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return obj, Unchanged, &WriteError{Err: err, Rejected: apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)}
	}
	applied, err := decode[T, O](want)
	if err != nil {
		return nil, Unchanged, err
	}
	return applied, Created, nil
}

// decode turns an apply configuration (or the API server's answer the
// client decoded into it) into the typed object.
func decode[T any, O interface {
	*T
	client.Object
}](want any) (O, error) {
	b, err := json.Marshal(want)
	if err != nil {
		return nil, err
	}
	obj := O(new(T))
	if err := json.Unmarshal(b, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// Report names, for the Events an owner's user reads, the objects Apply
// writes: Kind for the object ("CronJob"), OwnerKind for its owner
// ("CronTab").
type Report struct {
	Kind, OwnerKind string
}

// Record records the Normal Event that says what Apply did to obj on
// owner's behalf: nothing when Unchanged. created is appended to the
// Created note ("Created CronJob nightly" + created), to say what the new
// object runs.
func (r Report) Record(rec events.EventRecorder, owner, obj client.Object, result Result, created string) {
	switch result {
	case Created:
		rec.Eventf(owner, obj, corev1.EventTypeNormal, "Created", "Apply", "Created %s %s%s", r.Kind, obj.GetName(), created)
	case Updated:
		rec.Eventf(owner, obj, corev1.EventTypeNormal, "Updated", "Apply",
			"Updated %s %s to the %s's new spec", r.Kind, obj.GetName(), r.OwnerKind)
	case Healed:
		rec.Eventf(owner, obj, corev1.EventTypeNormal, "Healed", "Apply",
			"Put back %s %s, changed outside of its %s", r.Kind, obj.GetName(), r.OwnerKind)
	}
}
