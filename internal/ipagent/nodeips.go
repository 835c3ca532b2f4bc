package ipagent

import (
	"sort"
	"strconv"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

// Fields of an IP that name a node, selectable on the API server (the
// CRD's selectableFields), so that an agent's watch carries only its own
// node's IPs.
const (
	fieldNode         = "status.node"
	fieldAttachedNode = "status.attachedNode"
)

// nodeIPs is the agent's view of the IPs: only those that name its node,
// in status.node (placed here: it may have to claim them) or in
// status.attachedNode (it may be answering for them: it must release them
// when they move, which is when status.node stops naming it). A field
// selector has no OR, so it is one informer per field, read as one.
// Nothing else of the cluster's IPs reaches the agent: at 10,000 IPs an
// agent holds its few, and a change to another node's IP wakes nobody but
// that node.
type nodeIPs struct {
	placed, attached cache.SharedIndexInformer
}

// newNodeIPs makes the two informers (not started).
func newNodeIPs(c Client, node string) (*nodeIPs, error) {
	var (
		v   nodeIPs
		err error
	)
	if v.placed, err = c.Informer(&ipv1.IP{}, "", fields.OneTermEqualSelector(fieldNode, node)); err != nil {
		return nil, err
	}
	if v.attached, err = c.Informer(&ipv1.IP{}, "", fields.OneTermEqualSelector(fieldAttachedNode, node)); err != nil {
		return nil, err
	}
	return &v, nil
}

func (v *nodeIPs) informers() []cache.SharedIndexInformer {
	return []cache.SharedIndexInformer{v.placed, v.attached}
}

// list is the union of both informers' stores, one entry per IP (the
// later version of the two when both have it), sorted by name. The IPs
// are the stores' own: read them, never change them.
func (v *nodeIPs) list() []*ipv1.IP {
	byName := map[string]*ipv1.IP{}
	for _, inf := range v.informers() {
		for _, o := range inf.GetStore().List() {
			ip, ok := o.(*ipv1.IP)
			if !ok {
				continue
			}
			if have, ok := byName[ip.Name]; !ok || newer(ip, have) {
				byName[ip.Name] = ip
			}
		}
	}
	out := make([]*ipv1.IP, 0, len(byName))
	for _, ip := range byName {
		out = append(out, ip)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// empty reports whether no IP names the node.
func (v *nodeIPs) empty() bool {
	for _, inf := range v.informers() {
		if len(inf.GetStore().ListKeys()) > 0 {
			return false
		}
	}
	return true
}

// newer reports whether a is a later version than b. Both informers watch
// the same resource of the same API server, whose resourceVersions are
// etcd revisions; should one not parse, either copy does: every write the
// agent makes is conditional on the version it read, so a stale copy
// costs a conflict and a re-read, never a wrong write.
func newer(a, b *ipv1.IP) bool {
	ra, errA := strconv.ParseUint(a.ResourceVersion, 10, 64)
	rb, errB := strconv.ParseUint(b.ResourceVersion, 10, 64)
	return errA == nil && errB == nil && ra > rb
}
