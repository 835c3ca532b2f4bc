package ipagent

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

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
// selector has no OR, so it is one informer per field, in caches of their
// own, read as one. Nothing else of the cluster's IPs reaches the agent:
// at 10,000 IPs an agent holds its few, and a change to another node's IP
// wakes nobody but that node.
type nodeIPs struct {
	placed, attached cache.Cache
}

// newNodeIPs makes the two caches and has mgr run them (with its other
// caches: synced before any controller starts).
func newNodeIPs(mgr ctrl.Manager, node string) (*nodeIPs, error) {
	mk := func(field string) (cache.Cache, error) {
		c, err := cache.New(mgr.GetConfig(), cache.Options{
			Scheme: mgr.GetScheme(),
			Mapper: mgr.GetRESTMapper(),
			ByObject: map[client.Object]cache.ByObject{
				&ipv1.IP{}: {Field: fields.OneTermEqualSelector(field, node)},
			},
			DefaultTransform: cache.TransformStripManagedFields(),
			// These caches are for IPs only: a read of anything else is
			// a mistake, not a reason to watch the whole kind.
			ReaderFailOnMissingInformer: true,
		})
		if err != nil {
			return nil, fmt.Errorf("making the cache of IPs with %s=%s: %w", field, node, err)
		}
		// Created now, so that the cache starts it and waits for it.
		if _, err := c.GetInformer(context.Background(), &ipv1.IP{}); err != nil {
			return nil, err
		}
		return c, mgr.Add(c)
	}
	var (
		v   nodeIPs
		err error
	)
	if v.placed, err = mk(fieldNode); err != nil {
		return nil, err
	}
	if v.attached, err = mk(fieldAttachedNode); err != nil {
		return nil, err
	}
	return &v, nil
}

// sources are the two informers' events, each mapped by h.
func (v *nodeIPs) sources(h handler.EventHandler) []source.Source {
	return []source.Source{
		source.Kind[client.Object](v.placed, &ipv1.IP{}, h),
		source.Kind[client.Object](v.attached, &ipv1.IP{}, h),
	}
}

// list is the union of both caches, one entry per IP (the later version
// of the two when both have it), sorted by name.
func (v *nodeIPs) list(ctx context.Context, opts ...client.ListOption) ([]ipv1.IP, error) {
	byName := map[string]ipv1.IP{}
	for _, c := range []cache.Cache{v.placed, v.attached} {
		l := &ipv1.IPList{}
		if err := c.List(ctx, l, opts...); err != nil {
			return nil, err
		}
		for _, ip := range l.Items {
			if have, ok := byName[ip.Name]; !ok || newer(&ip, &have) {
				byName[ip.Name] = ip
			}
		}
	}
	out := make([]ipv1.IP, 0, len(byName))
	for _, ip := range byName {
		out = append(out, ip)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// get is the IP from whichever cache has it (the later version if both).
func (v *nodeIPs) get(ctx context.Context, key client.ObjectKey, ip *ipv1.IP, opts ...client.GetOption) error {
	var found *ipv1.IP
	for _, c := range []cache.Cache{v.placed, v.attached} {
		o := &ipv1.IP{}
		err := c.Get(ctx, key, o, opts...)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		if found == nil || newer(o, found) {
			found = o
		}
	}
	if found == nil {
		return apierrors.NewNotFound(ipv1.GroupVersion.WithResource("ips").GroupResource(), key.Name)
	}
	*ip = *found
	return nil
}

// empty reports whether no IP names the node.
func (v *nodeIPs) empty(ctx context.Context) (bool, error) {
	for _, c := range []cache.Cache{v.placed, v.attached} {
		l := &ipv1.IPList{}
		if err := c.List(ctx, l, client.Limit(1)); err != nil {
			return false, err
		}
		if len(l.Items) > 0 {
			return false, nil
		}
	}
	return true, nil
}

// newer reports whether a is a later version than b. Both caches watch the
// same resource of the same API server, whose resourceVersions are etcd
// revisions; should one not parse, either copy does: every write the agent
// makes is conditional on the version it read, so a stale copy costs a
// conflict and a re-read, never a wrong write.
func newer(a, b *ipv1.IP) bool {
	ra, errA := strconv.ParseUint(a.ResourceVersion, 10, 64)
	rb, errB := strconv.ParseUint(b.ResourceVersion, 10, 64)
	return errA == nil && errB == nil && ra > rb
}

// nodeIPsClient is the agent's client: IPs are read from nodeIPs, all else
// as the client it wraps reads it.
type nodeIPsClient struct {
	client.Client
	ips *nodeIPs
}

// Get reads an IP from the node's IPs; anything else from the wrapped
// client.
func (c nodeIPsClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if ip, ok := obj.(*ipv1.IP); ok {
		return c.ips.get(ctx, key, ip, opts...)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// List lists the node's IPs; anything else from the wrapped client.
func (c nodeIPsClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if l, ok := list.(*ipv1.IPList); ok {
		items, err := c.ips.list(ctx, opts...)
		if err != nil {
			return err
		}
		l.Items = items
		return nil
	}
	return c.Client.List(ctx, list, opts...)
}
