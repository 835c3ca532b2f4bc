package reboot

import (
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ownWrites remembers objects (nodes, groups, the ledger) as this
// controller last wrote them, until the informer cache shows them: a
// reconcile that runs before the watch delivered the controller's own
// write would otherwise decide from the version before it, and its next
// write of that object would be a certain conflict (and a grant it made a
// moment ago would look unfinished).
//
// It only ever replaces a cached object with a newer version of the same
// object, as the API server returned it: the cache shows each object's
// versions in the API server's order, so a cached version this controller
// wrote from is older than what it wrote; any other version is the one
// written or a later one, and the memory is dropped. It is never a source
// of safety (every write stays conditional on the version it was decided
// from), only of fewer conflicts.
type ownWrites[T client.Object] struct {
	mu      sync.Mutex
	objects map[string]*ownWrite[T]
}

type ownWrite[T client.Object] struct {
	object T
	// from are the versions this controller wrote the object from since
	// the cache last caught up: all older than object. "" is a create:
	// the cache showing no object is older too.
	from map[string]bool
}

// wrote records a successful write of an object from version from ("" for
// a create); written is the object as the API server returned it.
func (o *ownWrites[T]) wrote(from string, written T) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.objects == nil {
		o.objects = map[string]*ownWrite[T]{}
	}
	w := o.objects[written.GetName()]
	if w == nil {
		w = &ownWrite[T]{from: map[string]bool{}}
		o.objects[written.GetName()] = w
	}
	w.from[from] = true
	w.object = written.DeepCopyObject().(T)
}

// view is the newer of the cached object and this controller's last write
// of it. The cached object is returned as is; the remembered one as a
// copy, since the reconcile may keep it (neither is ever changed: a
// reconcile changes copies).
func (o *ownWrites[T]) view(cached T) T {
	o.mu.Lock()
	defer o.mu.Unlock()
	w := o.objects[cached.GetName()]
	if w == nil {
		return cached
	}
	if w.from[cached.GetResourceVersion()] {
		return w.object.DeepCopyObject().(T)
	}
	// The cache has caught up with the write, or moved past it.
	delete(o.objects, cached.GetName())
	return cached
}

// created is this controller's creation of the named object when the
// cache does not show it yet.
func (o *ownWrites[T]) created(name string) (T, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var none T
	w := o.objects[name]
	if w == nil || !w.from[""] {
		return none, false
	}
	return w.object.DeepCopyObject().(T), true
}

// isOwn says whether a version of an object is one this controller wrote
// and already decided on (an update event carrying it brings nothing new).
func (o *ownWrites[T]) isOwn(obj T) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	w := o.objects[obj.GetName()]
	return w != nil && w.object.GetResourceVersion() == obj.GetResourceVersion()
}

// forget drops what it remembers of the named object (gone, or its write
// refused because it is).
func (o *ownWrites[T]) forget(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.objects, name)
}

// forgetAllBut drops what it remembers of objects no longer in the cache.
func (o *ownWrites[T]) forgetAllBut(present func(name string) bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for name := range o.objects {
		if !present(name) {
			delete(o.objects, name)
		}
	}
}
