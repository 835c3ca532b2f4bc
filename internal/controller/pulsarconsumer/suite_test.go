package pulsarconsumer

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	pulsarv1 "github.com/kubext/kubext/api/pulsar/v1"
	"github.com/kubext/kubext/test/testenv"
)

var (
	k8s        client.Client // direct, uncached
	restConfig *rest.Config
	mgr        ctrl.Manager // its client reads from the cache the controller reads
	scheme     = runtime.NewScheme()
)

func TestMain(m *testing.M) {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(pulsarv1.AddToScheme(scheme))
	testenv.Main(m, startManager)
}

func startManager(ctx context.Context, env *testenv.Env) error {
	var err error
	restConfig = env.Config
	k8s, err = client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	mgr, err = ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		return err
	}
	r := &Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("pulsarconsumer-controller"), Image: testImage}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	testenv.StartManager(ctx, mgr)
	return nil
}

// waitFor is the patience of every Eventually in this package.
const waitFor = 20 * time.Second

// testImage stands for the manager's --pulsar-consumer-image.
const testImage = "registry.example.com/kubext/manager:v9.9.9"
