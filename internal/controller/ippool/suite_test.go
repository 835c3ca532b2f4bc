package ippool

import (
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/testenv"
)

var (
	k8s    client.Client // direct, uncached
	scheme = runtime.NewScheme()
	// binding is the ValidatingAdmissionPolicyBinding of
	// config/policy/ippool-delete.yaml, without server-set metadata.
	binding = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
)

func TestMain(m *testing.M) {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(ipv1.AddToScheme(scheme))
	testenv.Main(m, startManager)
}

func startManager(ctx context.Context, env *testenv.Env) error {
	var err error
	k8s, err = client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
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
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	if err != nil {
		return err
	}
	if err := (&Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("ippool")}).SetupWithManager(mgr); err != nil {
		return err
	}
	testenv.StartManager(ctx, mgr)
	return nil
}
