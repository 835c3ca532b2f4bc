package redis

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
	"github.com/kubext/kubext/test/testenv"
)

var (
	k8s    client.Client // direct, uncached
	mgr    ctrl.Manager  // its client reads from the cache the controller reads
	scheme = runtime.NewScheme()
	// servers stands in for the members' Redis servers (see fakeRedis).
	servers = newFakeRedis()
)

func TestMain(m *testing.M) {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(cachev1.AddToScheme(scheme))
	testenv.Main(m, startManager)
}

func startManager(ctx context.Context, env *testenv.Env) error {
	var err error
	k8s, err = client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	mgr, err = ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		return err
	}
	if err := newReconciler(mgr.GetClient(), "redis-controller").SetupWithManager(mgr); err != nil {
		return err
	}
	testenv.StartManager(ctx, mgr)
	return nil
}

func newReconciler(c client.Client, recorder string) *Reconciler {
	return &Reconciler{Client: c, APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(recorder), Connect: servers.connect}
}

// waitFor is the patience of every Eventually in this package.
const waitFor = 20 * time.Second
