package ip

import (
	"sync"
	"time"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

// ownWrites remembers, per IP, the resourceVersion the controller's last
// write started from, until the cache has moved past it. A reconcile that
// reads the IP at that version from the cache (its informer has not seen
// the write yet: a pod or node event queued the IP meanwhile) would decide
// on a state the API server no longer has, and its write would only be
// refused as a conflict: a request spent through the manager's client,
// whose QPS bounds how fast IPs converge at scale. Such a reconcile waits
// for the write's own watch event instead.
type ownWrites struct{ m sync.Map } // IP name -> the resourceVersion written from

// recentWrite is how long a reconcile waits at most for the cache to show
// the controller's own write; the write's watch event normally brings the
// IP back sooner.
const recentWrite = 250 * time.Millisecond

// wrote records that a write changed the IP from resourceVersion from.
func (w *ownWrites) wrote(name, from, to string) {
	if from != "" && to != "" && from != to {
		w.m.Store(name, from)
	}
}

// stale reports whether ip, as read from the cache, predates the
// controller's own last write on it; once it does not, the record goes.
func (w *ownWrites) stale(ip *ipv1.IP) bool {
	from, ok := w.m.Load(ip.Name)
	if !ok {
		return false
	}
	if from == ip.ResourceVersion {
		return true
	}
	w.m.CompareAndDelete(ip.Name, from)
	return false
}

// forget drops what is known of an IP that is gone.
func (w *ownWrites) forget(name string) { w.m.Delete(name) }
