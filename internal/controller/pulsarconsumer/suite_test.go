package pulsarconsumer

import (
	"context"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pulsarv1 "github.com/kubext/kubext/api/pulsar/v1"
	"github.com/kubext/kubext/test/testenv"
)

var (
	k8s client.Client // direct, uncached
	mgr ctrl.Manager  // its client reads from the cache the controller reads
)

// testImage stands for the manager's --pulsar-consumer-image.
const testImage = "registry.example.com/kubext/manager:v9.9.9"

func TestMain(m *testing.M) {
	testenv.Main(m, func(ctx context.Context, env *testenv.Env) (err error) {
		k8s, mgr, err = env.RunManager(ctx, func(mgr ctrl.Manager) error {
			r := &Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("pulsarconsumer-controller"), Image: testImage}
			return r.SetupWithManager(mgr)
		}, pulsarv1.AddToScheme)
		return err
	})
}
