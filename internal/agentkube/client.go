// Package agentkube is the node agents' Kubernetes plumbing: client-go's
// REST client, informers and work queue, over a scheme of only the API
// types an agent uses.
//
// An agent runs on every node, so what it links costs on every node.
// controller-runtime's client and manager, and client-go's typed
// clientset, link client-go's discovery, its OpenAPI and every API
// group's types: an agent built on them is resident at about 25 MiB
// before it does anything of its own, one built on this package at about
// 14 (docs/benchmarks.md, "The agents' memory"). The controllers in the
// manager, one per cluster, keep controller-runtime.
package agentkube

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Client reaches the API server with one REST client per group version,
// all over one HTTP client and its connections.
type Client struct {
	scheme *runtime.Scheme
	codecs serializer.CodecFactory
	params runtime.ParameterCodec
	cfg    *rest.Config
	http   *http.Client

	mu   sync.Mutex
	rest map[schema.GroupVersion]rest.Interface
}

// New makes a Client for the types registered in scheme.
func New(cfg *rest.Config, scheme *runtime.Scheme) (*Client, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		// The binary's name leads: the API server takes it as the field
		// manager of what the agent writes (managedFields), and it is
		// what an audit log or a flow schema tells the agents by. The
		// user agent is set by the HTTP client's transport, so it must
		// be known before that is made.
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &Client{
		scheme: scheme,
		codecs: serializer.NewCodecFactory(scheme),
		params: runtime.NewParameterCodec(scheme),
		cfg:    cfg,
		http:   hc,
		rest:   map[schema.GroupVersion]rest.Interface{},
	}, nil
}

// Scheme is the scheme the Client knows its types from.
func (c *Client) Scheme() *runtime.Scheme { return c.scheme }

// REST is the REST client of gv.
func (c *Client) REST(gv schema.GroupVersion) (rest.Interface, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rc, ok := c.rest[gv]; ok {
		return rc, nil
	}
	cfg := rest.CopyConfig(c.cfg)
	cfg.GroupVersion = &gv
	cfg.APIPath = "/apis"
	if gv.Group == "" {
		cfg.APIPath = "/api"
	}
	cfg.NegotiatedSerializer = c.codecs.WithoutConversion()
	if c.protobuf(gv) {
		// Built-in kinds travel as protobuf, as controller-runtime sends
		// them: several times cheaper than JSON to encode on the API
		// server and to decode here (a Node is a few kB), for every
		// event of every agent's watch.
		cfg.ContentType = runtime.ContentTypeProtobuf
		cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	}
	rc, err := rest.RESTClientForConfigAndClient(cfg, c.http)
	if err != nil {
		return nil, err
	}
	c.rest[gv] = rc
	return rc, nil
}

// protobufType is what a kind needs to travel as protobuf: the built-in
// API types implement it, custom resources do not.
type protobufType interface {
	MarshalToSizedBuffer([]byte) (int, error)
	Unmarshal([]byte) error
}

// protobuf reports whether every kind of gv in the scheme, besides the
// meta/v1 kinds every group version has (options, WatchEvent, Status),
// can travel as protobuf: a built-in group version, not a custom
// resource's.
func (c *Client) protobuf(gv schema.GroupVersion) bool {
	found := false
	for _, t := range c.scheme.KnownTypes(gv) {
		if t.PkgPath() == metaPkgPath {
			continue
		}
		if !reflect.PointerTo(t).Implements(reflect.TypeFor[protobufType]()) {
			return false
		}
		found = true
	}
	return found
}

var metaPkgPath = reflect.TypeFor[metav1.Status]().PkgPath()

// resource is the REST client and the resource (plural) of obj's kind; obj
// may be an object or a list of them.
func (c *Client) resource(obj runtime.Object) (rest.Interface, string, error) {
	rc, res, _, err := c.kindResource(obj)
	return rc, res, err
}

// kindResource is resource, and the kind of the objects.
func (c *Client) kindResource(obj runtime.Object) (rest.Interface, string, schema.GroupVersionKind, error) {
	gvks, _, err := c.scheme.ObjectKinds(obj)
	if err != nil {
		return nil, "", schema.GroupVersionKind{}, err
	}
	gvk := gvks[0]
	if meta.IsListType(obj) {
		gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	}
	// The kinds an agent uses are all regular plurals (nodes, leases,
	// ips...); an agent has no discovery to ask.
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	rc, err := c.REST(gvk.GroupVersion())
	return rc, plural.Resource, gvk, err
}

// Get reads the object namespace/name ("" namespace: cluster-scoped) from
// the API server into obj.
func (c *Client) Get(ctx context.Context, namespace, name string, obj runtime.Object) error {
	rc, res, err := c.resource(obj)
	if err != nil {
		return err
	}
	return rc.Get().NamespaceIfScoped(namespace, namespace != "").Resource(res).Name(name).Do(ctx).Into(obj)
}

// Patch patches the object namespace/name (or its subresource) and reads
// the answer into obj, whose kind says what is patched.
func (c *Client) Patch(ctx context.Context, namespace, name string, pt types.PatchType, data []byte, obj runtime.Object, subresource ...string) error {
	rc, res, err := c.resource(obj)
	if err != nil {
		return err
	}
	return rc.Patch(pt).NamespaceIfScoped(namespace, namespace != "").Resource(res).Name(name).SubResource(subresource...).
		Body(data).Do(ctx).Into(obj)
}

// Create creates obj in its namespace and reads the answer into it;
// dryRun (metav1.DryRunAll) only asks whether the API server would.
func (c *Client) Create(ctx context.Context, obj runtime.Object, dryRun ...string) error {
	rc, res, err := c.resource(obj)
	if err != nil {
		return err
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	ns := m.GetNamespace()
	return rc.Post().NamespaceIfScoped(ns, ns != "").Resource(res).
		VersionedParams(&metav1.CreateOptions{DryRun: dryRun}, c.params).
		Body(obj).Do(ctx).Into(obj)
}

// ListWatch lists and watches the objects of obj's kind in namespace (""
// for all, or cluster-scoped) that fieldSelector selects (nil for all).
func (c *Client) ListWatch(obj runtime.Object, namespace string, fieldSelector fields.Selector) (cache.ListerWatcher, error) {
	rc, res, gvk, err := c.kindResource(obj)
	if err != nil {
		return nil, err
	}
	listKind := gvk.GroupVersion().WithKind(gvk.Kind + "List")
	if _, err := c.scheme.New(listKind); err != nil {
		return nil, fmt.Errorf("no list kind for %s: %w", gvk, err)
	}
	sel := ""
	if fieldSelector != nil {
		sel = fieldSelector.String()
	}
	request := func(o metav1.ListOptions) *rest.Request {
		o.FieldSelector = sel
		return rc.Get().NamespaceIfScoped(namespace, namespace != "").Resource(res).VersionedParams(&o, c.params)
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list, err := c.scheme.New(listKind)
			if err != nil {
				return nil, err
			}
			return list, request(o).Do(ctx).Into(list)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.Watch = true
			return request(o).Watch(ctx)
		},
	}, nil
}

// Informer is an informer of the objects of obj's kind in namespace that
// fieldSelector selects, without their managedFields (nobody here reads
// them, and they are often the larger part of an object). Run it, and
// wait for it to sync before trusting what its store says is absent.
func (c *Client) Informer(obj runtime.Object, namespace string, fieldSelector fields.Selector) (cache.SharedIndexInformer, error) {
	lw, err := c.ListWatch(obj, namespace, fieldSelector)
	if err != nil {
		return nil, err
	}
	inf := cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{})
	if err := inf.SetTransform(stripManagedFields); err != nil {
		return nil, err
	}
	return inf, nil
}

func stripManagedFields(in any) (any, error) {
	if m, err := meta.Accessor(in); err == nil {
		m.SetManagedFields(nil)
	}
	return in, nil
}
