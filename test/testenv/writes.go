package testenv

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// CountWrites wraps c, counting in writes every write made through it
// (create, update, patch, apply, delete, and those of subresources such as
// status), for tests that a reconcile with nothing to change writes
// nothing. Reads go to c, so a manager's client still reads its cache.
func CountWrites(c client.Client, writes *atomic.Int64) client.Client {
	return RecordWrites(c, func(string, string) { writes.Add(1) })
}

// WriteLog is, per object name, the writes made through a client that
// RecordWrites wraps, in order ("patch", "patch status", "create", ...),
// for tests that bound what one object costs.
type WriteLog struct {
	mu     sync.Mutex
	byName map[string][]string
}

// Record adds a write; it is RecordWrites's record function.
func (l *WriteLog) Record(verb, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byName == nil {
		l.byName = map[string][]string{}
	}
	l.byName[name] = append(l.byName[name], verb)
}

// Of returns the writes made so far on the objects named name.
func (l *WriteLog) Of(name string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.byName[name]...)
}

// RecordWrites wraps c, calling record with each write's verb (with the
// subresource: "patch status") and the name of the object written, before
// it is made. Reads go to c, so a manager's client still reads its cache.
func RecordWrites(c client.Client, record func(verb, name string)) client.Client {
	applied := func(o runtime.ApplyConfiguration) string {
		if n, ok := o.(interface{ GetName() *string }); ok && n.GetName() != nil {
			return *n.GetName()
		}
		return ""
	}
	return interceptor.NewClient(withoutWatch{c}, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			record("create", o.GetName())
			return c.Create(ctx, o, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			record("update", o.GetName())
			return c.Update(ctx, o, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			record("patch", o.GetName())
			return c.Patch(ctx, o, p, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, o runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			record("apply", applied(o))
			return c.Apply(ctx, o, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			record("delete", o.GetName())
			return c.Delete(ctx, o, opts...)
		},
		DeleteAllOf: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteAllOfOption) error {
			record("deletecollection", "")
			return c.DeleteAllOf(ctx, o, opts...)
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, o, subResource client.Object, opts ...client.SubResourceCreateOption) error {
			record("create "+sub, o.GetName())
			return c.SubResource(sub).Create(ctx, o, subResource, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, o client.Object, opts ...client.SubResourceUpdateOption) error {
			record("update "+sub, o.GetName())
			return c.SubResource(sub).Update(ctx, o, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			record("patch "+sub, o.GetName())
			return c.SubResource(sub).Patch(ctx, o, p, opts...)
		},
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, o runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			record("apply "+sub, applied(o))
			return c.SubResource(sub).Apply(ctx, o, opts...)
		},
	})
}

// withoutWatch lets a client without Watch, such as a manager's, be
// wrapped by interceptor.NewClient. Controllers watch through their
// manager's cache, never through their client.
type withoutWatch struct{ client.Client }

func (withoutWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("not supported")
}
