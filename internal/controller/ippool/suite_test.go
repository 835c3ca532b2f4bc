package ippool

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/testenv"
)

// waitFor is the patience of every Eventually in this package.
const waitFor = 20 * time.Second

var (
	k8s    client.Client // direct, uncached
	scheme = runtime.NewScheme()
	// binding is the ValidatingAdmissionPolicyBinding of
	// config/policy/ippool-delete.yaml, as written there.
	binding = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
)

func TestMain(m *testing.M) {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(ipv1.AddToScheme(scheme))
	env, err := testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer func() { _ = env.Stop() }()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if err := startManager(ctx, env); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

func startManager(ctx context.Context, env *testenv.Env) error {
	level := zapcore.DPanicLevel // conflicts are routine and logged as errors
	if os.Getenv("KUBEXT_TEST_VERBOSE") != "" {
		level = zapcore.DebugLevel
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr), zap.Level(level)))
	var err error
	k8s, err = client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	if err := applyDeletePolicy(ctx); err != nil {
		return err
	}
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
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	return nil
}

// applyDeletePolicy installs config/policy/ippool-delete.yaml, as `make
// deploy` does.
func applyDeletePolicy(ctx context.Context) error {
	f, err := os.Open(filepath.Join("..", "..", "..", "config", "policy", "ippool-delete.yaml"))
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	for _, doc := range []struct {
		obj  client.Object
		kind string
	}{{policy, "ValidatingAdmissionPolicy"}, {binding, "ValidatingAdmissionPolicyBinding"}} {
		if err := dec.Decode(doc.obj); err != nil {
			return fmt.Errorf("ippool-delete.yaml: %w", err)
		}
		if kind := doc.obj.GetObjectKind().GroupVersionKind().Kind; kind != doc.kind {
			return fmt.Errorf("ippool-delete.yaml: found a %s where a %s was expected", kind, doc.kind)
		}
		if err := k8s.Create(ctx, doc.obj.DeepCopyObject().(client.Object)); err != nil {
			return err
		}
	}
	return nil
}
