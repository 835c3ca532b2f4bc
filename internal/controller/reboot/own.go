package reboot

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// ownWrites remembers the nodes as this controller last wrote them, until
// the informer cache shows them: a reconcile that runs before the watch
// delivered the controller's own patch would otherwise decide from the
// version before it, and its next patch of that node would be a certain
// conflict (and a grant it made a moment ago would look unfinished).
//
// It only ever replaces a cached node with a newer version of the same
// node, as the API server returned it: the cache shows each node's versions
// in the API server's order, so a cached version this controller patched
// from is older than what it wrote; any other version is the one written
// or a later one, and the memory is dropped. It is never a source of
// safety (every write stays conditional on the version it was decided
// from), only of fewer conflicts.
type ownWrites struct {
	mu    sync.Mutex
	nodes map[string]*ownWrite
}

type ownWrite struct {
	node *corev1.Node
	// from are the versions this controller patched the node from since
	// the cache last caught up: all older than node.
	from map[string]bool
}

// wrote records a successful patch of a node from version from; written is
// the node as the API server returned it.
func (o *ownWrites) wrote(from string, written *corev1.Node) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.nodes == nil {
		o.nodes = map[string]*ownWrite{}
	}
	w := o.nodes[written.Name]
	if w == nil {
		w = &ownWrite{from: map[string]bool{}}
		o.nodes[written.Name] = w
	}
	w.from[from] = true
	w.node = written.DeepCopy()
}

// view is the newer of the cached node and this controller's last write of
// it. The cached node is returned as is (the cache hands out copies); the
// remembered one as a copy, since the reconcile may keep it.
func (o *ownWrites) view(cached *corev1.Node) *corev1.Node {
	o.mu.Lock()
	defer o.mu.Unlock()
	w := o.nodes[cached.Name]
	if w == nil {
		return cached
	}
	if w.from[cached.ResourceVersion] {
		return w.node.DeepCopy()
	}
	// The cache has caught up with the write, or moved past it.
	delete(o.nodes, cached.Name)
	return cached
}

// isOwn says whether a version of a node is one this controller wrote and
// already decided on (an update event carrying it brings nothing new).
func (o *ownWrites) isOwn(n *corev1.Node) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	w := o.nodes[n.Name]
	return w != nil && w.node.ResourceVersion == n.ResourceVersion
}

// forgetAllBut drops what it remembers of nodes no longer in the cache.
func (o *ownWrites) forgetAllBut(nodes map[string]*corev1.Node) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for name := range o.nodes {
		if _, ok := nodes[name]; !ok {
			delete(o.nodes, name)
		}
	}
}
