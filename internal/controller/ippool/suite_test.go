package ippool

import (
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/testenv"
)

var (
	k8s client.Client // direct, uncached
	// watcher watches, for tests that count writes.
	watcher client.WithWatch
	// binding is the ValidatingAdmissionPolicyBinding of
	// config/policy/ippool-delete.yaml, without server-set metadata.
	binding = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
)

func TestMain(m *testing.M) {
	testenv.Main(m, startManager)
}

func startManager(ctx context.Context, env *testenv.Env) error {
	var err error
	k8s, _, err = env.RunManager(ctx, func(mgr ctrl.Manager) error {
		return (&Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("ippool")}).SetupWithManager(mgr)
	}, ipv1.AddToScheme)
	if err != nil {
		return err
	}
	if watcher, err = client.NewWithWatch(env.Config, client.Options{Scheme: k8s.Scheme()}); err != nil {
		return err
	}
	// The admission policy, as `make deploy` installs it; the binding is kept
	// so that a test can lift it for a while.
	if err := env.Apply(ctx, "config/policy/ippool-delete.yaml"); err != nil {
		return err
	}
	if err := k8s.Get(ctx, client.ObjectKey{Name: "ippool-in-use.ip.kubext.io"}, binding); err != nil {
		return err
	}
	binding.ObjectMeta = metav1.ObjectMeta{Name: binding.Name}
	return nil
}
