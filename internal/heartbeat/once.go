package heartbeat

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// LeasesGetter is what a Heartbeat asks of the API server: the methods of
// client-go's typed Lease client it uses, declared here so that an agent
// need not link the typed clientset (with it come discovery, OpenAPI and
// every API group's types: about 10 MiB resident on every node,
// docs/benchmarks.md). heartbeattest.Typed adapts a typed client.
type LeasesGetter interface {
	Leases(namespace string) LeaseInterface
}

// LeaseInterface is the Lease client of one namespace.
type LeaseInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*coordinationv1.Lease, error)
}

// SendOnce is the Lease client a Heartbeat should be given: c is a REST
// client of coordination.k8s.io/v1, and each request a Heartbeat makes is
// sent once. client-go's typed clients try a request refused with 429 and
// a Retry-After again, up to ten times, until their context ends; the
// Heartbeat has a pace and a backoff of its own, and those hidden retries
// defeated it. At 1,000 nodes, with the API server's priority level for
// service accounts full, every renewal became several requests, each
// attempt ran into its deadline, and the agents' Lease traffic grew while
// fewer renewals landed (make bench-scale). A refused request is now an
// error at once, and the Heartbeat decides when to try again.
func SendOnce(c rest.Interface) LeasesGetter { return onceLeases{c} }

type onceLeases struct{ c rest.Interface }

func (o onceLeases) Leases(namespace string) LeaseInterface {
	return onceLease{c: o.c, namespace: namespace}
}

type onceLease struct {
	c         rest.Interface
	namespace string
}

func (o onceLease) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := o.c.Get().MaxRetries(0).
		Namespace(o.namespace).Resource("leases").Name(name).
		VersionedParams(&opts, metav1.ParameterCodec).
		Do(ctx).Into(out)
	return out, err
}

func (o onceLease) Create(ctx context.Context, l *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := o.c.Post().MaxRetries(0).
		Namespace(o.namespace).Resource("leases").
		VersionedParams(&opts, metav1.ParameterCodec).
		Body(l).Do(ctx).Into(out)
	return out, err
}

func (o onceLease) Update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := o.c.Put().MaxRetries(0).
		Namespace(o.namespace).Resource("leases").Name(l.Name).
		VersionedParams(&opts, metav1.ParameterCodec).
		Body(l).Do(ctx).Into(out)
	return out, err
}

func (o onceLease) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := o.c.Patch(pt).MaxRetries(0).
		Namespace(o.namespace).Resource("leases").Name(name).SubResource(subresources...).
		VersionedParams(&opts, metav1.ParameterCodec).
		Body(data).Do(ctx).Into(out)
	return out, err
}
