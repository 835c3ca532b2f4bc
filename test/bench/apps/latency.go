package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubext/kubext/test/bench/stats"
	"github.com/kubext/kubext/test/lab"
)

// changeTracker times spec changes through to the owned objects: each
// expected replica count is registered before the patch is sent, and the
// watch of Deployments and StatefulSets marks the moment it shows up.
type changeTracker struct {
	mu      sync.Mutex
	pending map[string]*change
}

// change is one spec change on its way to the owned object.
type change struct {
	want     int32
	returned time.Time // when the patch returned
	seen     time.Time // when the watch delivered the owned object with want
	done     chan struct{}
}

func newChangeTracker() *changeTracker { return &changeTracker{pending: map[string]*change{}} }

func changeKey(kind, name string) string { return kind + "/" + name }

// expect registers the replica count the owned object kind/name should
// take.
func (t *changeTracker) expect(kind, name string, want int32) *change {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := &change{want: want, done: make(chan struct{})}
	t.pending[changeKey(kind, name)] = c
	return c
}

func (t *changeTracker) returned(c *change, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c.returned = at
}

// latency is from the patch returning to the watch seeing the owned object
// follow; 0 when the watch was first (the object changed before the
// patch's answer arrived).
func (t *changeTracker) latency(c *change) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return max(c.seen.Sub(c.returned), 0)
}

func (t *changeTracker) observe(_, obj any) {
	now := time.Now()
	var key string
	var replicas *int32
	switch o := obj.(type) {
	case *appsv1.Deployment:
		key, replicas = changeKey("Deployment", o.Name), o.Spec.Replicas
	case *appsv1.StatefulSet:
		key, replicas = changeKey("StatefulSet", o.Name), o.Spec.Replicas
	default:
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.pending[key]
	if !ok || ptr.Deref(replicas, 1) != c.want {
		return
	}
	c.seen = now
	delete(t.pending, key)
	close(c.done)
}

// reconcileLatencies are the latencies in ms of the changes of each kind,
// and what the manager's own metrics say of them.
type reconcileLatencies struct {
	consumers, redis []float64
	// queueMs and reconcileMs are, per controller, the mean time an object
	// waited in the work queue and the mean reconcile time over the phase.
	queueMs, reconcileMs map[string]float64
}

// latencies makes n spec changes, one at a time, alternating between a
// PulsarConsumer scaled from 1 to 2 replicas through its scale subresource
// (what `kubectl scale` does) and a Redis whose size grows by one through
// a merge patch (the seed's `kubectl patch redis ... --type=merge`). The
// objects changed are spread over all of them. Each change waits until
// the one before has converged, pods and status included, so that it
// meets a steady manager rather than the previous change's aftermath.
func (b *bench) latencies(ctx context.Context, m *lab.Manager, n int) (lat reconcileLatencies, err error) {
	nc, nr := (n+1)/2, n/2
	if nc > len(b.consumers) || nr > len(b.redis) {
		return lat, fmt.Errorf("%d changes need %d PulsarConsumers and %d Redis", n, nc, nr)
	}
	before, err := stats.Scrape(ctx, m.MetricsURL)
	if err != nil {
		return lat, err
	}
	for i := range max(nc, nr) {
		if i < nc {
			pc := b.consumers[i*len(b.consumers)/nc]
			d, err := b.measure(ctx, "Deployment", pc.Name, 2, func(ctx context.Context) error {
				return b.c.SubResource("scale").Patch(ctx, pc.DeepCopy(),
					client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":2}}`)),
					client.WithSubResourceBody(&autoscalingv1.Scale{}))
			})
			if err != nil {
				return lat, err
			}
			lat.consumers = append(lat.consumers, d)
		}
		if i < nr {
			rd := b.redis[i*len(b.redis)/nr]
			size := rd.Spec.Size + 1
			d, err := b.measure(ctx, "StatefulSet", rd.Name, size, func(ctx context.Context) error {
				return b.c.Patch(ctx, rd.DeepCopy(), client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"size":%d}}`, size)))
			})
			if err != nil {
				return lat, err
			}
			lat.redis = append(lat.redis, d)
		}
	}
	after, err := stats.Scrape(ctx, m.MetricsURL)
	if err != nil {
		return lat, err
	}
	lat.queueMs, lat.reconcileMs = map[string]float64{}, map[string]float64{}
	for _, name := range []string{"pulsarconsumer", "redis"} {
		lat.queueMs[name] = meanMs(before, after, "workqueue_queue_duration_seconds", map[string]string{"name": name})
		lat.reconcileMs[name] = meanMs(before, after, "controller_runtime_reconcile_time_seconds", map[string]string{"controller": name})
	}
	return lat, nil
}

// measure sends one patch, waits for the owned object to follow, then for
// its owner to converge.
func (b *bench) measure(ctx context.Context, kind, name string, want int32, patch func(context.Context) error) (float64, error) {
	c := b.changes.expect(kind, name, want)
	reqCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := patch(reqCtx); err != nil {
		return 0, fmt.Errorf("changing the spec of %s's owner: %w", name, err)
	}
	b.changes.returned(c, time.Now())
	select {
	case <-c.done:
	case <-reqCtx.Done():
		return 0, fmt.Errorf("%s %s did not get %d replicas within 30 s of the spec change", kind, name, want)
	}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := b.stateOf(ctx, kind, name)
		return s == converged, err
	})
	if err != nil {
		return 0, fmt.Errorf("the owner of %s %s did not converge within a minute of its change: %w", kind, name, err)
	}
	return float64(b.changes.latency(c).Microseconds()) / 1000, nil
}

// percentile is the p-th percentile (nearest rank) of xs; 0 for none.
