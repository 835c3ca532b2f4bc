package crontab

import (
	"context"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	stablev1 "github.com/kubext/kubext/api/stable/v1"
	"github.com/kubext/kubext/test/testenv"
)

var (
	k8s client.Client // direct, uncached
	mgr ctrl.Manager  // its client reads from the cache the controller reads
)

func TestMain(m *testing.M) {
	testenv.Main(m, func(ctx context.Context, env *testenv.Env) (err error) {
		k8s, mgr, err = env.RunManager(ctx, func(mgr ctrl.Manager) error {
			return (&Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("crontab-controller")}).SetupWithManager(mgr)
		}, stablev1.AddToScheme)
		return err
	})
}
