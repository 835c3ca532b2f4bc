package crontab

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"go.uber.org/zap/zapcore"

	stablev1 "github.com/kubext/kubext/api/stable/v1"
	"github.com/kubext/kubext/test/testenv"
)

var (
	k8s    client.Client // direct, uncached
	mgr    ctrl.Manager  // its client reads from the cache the controller reads
	scheme = runtime.NewScheme()
)

func TestMain(m *testing.M) {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(stablev1.AddToScheme(scheme))
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
	mgr, err = ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		return err
	}
	r := &Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("crontab-controller")}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	return nil
}

// waitFor is the patience of every Eventually in this package.
const waitFor = 20 * time.Second
