package redis

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
	"github.com/kubext/kubext/internal/cachetrim"
	"github.com/kubext/kubext/test/testenv"
)

var (
	k8s client.Client // direct, uncached
	mgr ctrl.Manager  // its client reads from the cache the controller reads
	// servers stands in for the members' Redis servers (see fakeRedis).
	servers = newFakeRedis()
	// apiServer is the test API server's admin config.
	apiServer *rest.Config
	suiteEnv  *testenv.Env
)

func TestMain(m *testing.M) {
	testenv.Main(m, func(ctx context.Context, env *testenv.Env) (err error) {
		apiServer, suiteEnv = env.Config, env
		// The manager's cache as deployed: Pods trimmed to what the
		// controllers read (the Redis controller reads its members').
		opts := ctrl.Options{Cache: cachetrim.Options("kubext-system")}
		// The namespace of the manager run under its deployed identity
		// (redis_deployed_test.go) is that manager's alone.
		opts.Cache.DefaultFieldSelector = fields.OneTermNotEqualSelector("metadata.namespace", deployedNS)
		for o, by := range opts.Cache.ByObject {
			if _, ok := o.(*corev1.Node); ok {
				// Nodes have no namespace to select on.
				by.Field = fields.Everything()
				opts.Cache.ByObject[o] = by
			}
		}
		k8s, mgr, err = env.RunManagerWith(ctx, opts, func(mgr ctrl.Manager) error {
			return newReconciler(mgr, mgr.GetClient(), "redis-controller").SetupWithManager(mgr)
		}, cachev1.AddToScheme)
		return err
	})
}

// newReconciler is the Reconciler of mgr's, writing through c.
func newReconciler(mgr ctrl.Manager, c client.Client, recorder string) *Reconciler {
	return &Reconciler{Client: c, APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(recorder), Connect: servers.connect}
}
