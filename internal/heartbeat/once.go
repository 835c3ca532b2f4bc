package heartbeat

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// SendOnce is the Lease client a Heartbeat should be given: c, except
// that the requests a Heartbeat makes (Get, Create, Update, Patch) are sent once
// each. client-go's typed clients try a request refused with 429 and a
// Retry-After again, up to ten times, until their context ends; the
// Heartbeat has a pace and a backoff of its own, and those hidden retries
// defeated it. At 1,000 nodes, with the API server's priority level for
// service accounts full, every renewal became several requests, each
// attempt ran into its deadline, and the agents' Lease traffic grew while
// fewer renewals landed (make bench-scale). A refused request is now an
// error at once, and the Heartbeat decides when to try again.
func SendOnce(c coordinationclient.CoordinationV1Interface) coordinationclient.LeasesGetter {
	return onceLeases{c}
}

type onceLeases struct {
	coordinationclient.CoordinationV1Interface
}

func (o onceLeases) Leases(namespace string) coordinationclient.LeaseInterface {
	return onceLease{LeaseInterface: o.CoordinationV1Interface.Leases(namespace), c: o.CoordinationV1Interface, namespace: namespace}
}

type onceLease struct {
	coordinationclient.LeaseInterface
	c         coordinationclient.CoordinationV1Interface
	namespace string
}

func (o onceLease) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := o.c.RESTClient().Get().MaxRetries(0).
		Namespace(o.namespace).Resource("leases").Name(name).
		VersionedParams(&opts, scheme.ParameterCodec).
		Do(ctx).Into(out)
	return out, err
}

func (o onceLease) Create(ctx context.Context, l *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := o.c.RESTClient().Post().MaxRetries(0).
		Namespace(o.namespace).Resource("leases").
		VersionedParams(&opts, scheme.ParameterCodec).
		Body(l).Do(ctx).Into(out)
	return out, err
}

func (o onceLease) Update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := o.c.RESTClient().Put().MaxRetries(0).
		Namespace(o.namespace).Resource("leases").Name(l.Name).
		VersionedParams(&opts, scheme.ParameterCodec).
		Body(l).Do(ctx).Into(out)
	return out, err
}

func (o onceLease) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*coordinationv1.Lease, error) {
	out := &coordinationv1.Lease{}
	err := o.c.RESTClient().Patch(pt).MaxRetries(0).
		Namespace(o.namespace).Resource("leases").Name(name).SubResource(subresources...).
		VersionedParams(&opts, scheme.ParameterCodec).
		Body(data).Do(ctx).Into(out)
	return out, err
}
