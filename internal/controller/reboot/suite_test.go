package reboot

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/agenthealth"
	"github.com/kubext/kubext/internal/rebootagent"
	"github.com/kubext/kubext/test/testenv"
)

var (
	k8s    client.Client // direct, uncached: what the tests (and the simulated agents) use
	scheme = runtime.NewScheme()
	// writes counts the controller's API writes (patches, creates, updates,
	// deletes, status patches); Events are not counted.
	writes atomic.Int64
	// clock is the controller's clock: real time plus an offset a test can
	// move forward to reach a deadline without waiting for it.
	clock = &testClock{}
	// kube is a clientset of the test API server (heartbeat Leases).
	kube kubernetes.Interface
	// agentHealth is the controller's view of the agents' heartbeats.
	agentHealth *agenthealth.Tracker
)

type testClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

func TestMain(m *testing.M) {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(rebootv1.AddToScheme(scheme))
	testenv.Main(m, startManager)
}

func startManager(ctx context.Context, env *testenv.Env) error {
	var err error
	k8s, err = client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		return err
	}
	kube, err = kubernetes.NewForConfig(env.Config)
	if err != nil {
		return err
	}
	agentHealth = agenthealth.NewTracker(rebootagent.HeartbeatComponent, "default", mgr.GetAPIReader())
	r := &Reconciler{
		Client:    countingClient{mgr.GetClient()},
		APIReader: mgr.GetAPIReader(),
		Kube:      kube,
		Recorder:  mgr.GetEventRecorder("reboot-controller"),
		Now:       clock.Now,
		// The approvals ledger lives in the manager's namespace when
		// deployed; any namespace does here.
		LedgerNamespace: "default",
		// As deployed: only nodes whose agent renews its heartbeat are
		// approved (makeNode runs one per node).
		Agents: agentHealth,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	testenv.StartManager(ctx, mgr)
	return nil
}

// waitFor is the patience of every wait in this package.
const waitFor = 30 * time.Second

// countingClient counts the writes going through it.
type countingClient struct{ client.Client }

func (c countingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	writes.Add(1)
	return c.Client.Create(ctx, obj, opts...)
}

func (c countingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	writes.Add(1)
	return c.Client.Update(ctx, obj, opts...)
}

func (c countingClient) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	writes.Add(1)
	return c.Client.Patch(ctx, obj, p, opts...)
}

func (c countingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	writes.Add(1)
	return c.Client.Delete(ctx, obj, opts...)
}

func (c countingClient) Status() client.SubResourceWriter { return countingStatus{c.Client.Status()} }

type countingStatus struct{ client.SubResourceWriter }

func (s countingStatus) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
	writes.Add(1)
	return s.SubResourceWriter.Patch(ctx, obj, p, opts...)
}

func (s countingStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	writes.Add(1)
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}
