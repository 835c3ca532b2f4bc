// Package testenv starts an envtest control plane (kube-apiserver and etcd)
// from the binaries `make tools` builds, with kubext's CRDs installed. Each
// controller package starts one in its TestMain.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kubext/kubext/test/repo"
)

// Env is a running envtest control plane.
type Env struct {
	*envtest.Environment
	Config *rest.Config
}

// Start starts kube-apiserver and etcd and installs the CRDs in
// config/crd/bases. It fails with a clear message when the binaries have
// not been built.
func Start() (*Env, error) {
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(root, "bin", "k8s-"+repo.KubeVersion)
	if os.Getenv("TEST_ASSET_KUBE_APISERVER") == "" {
		if _, err := os.Stat(filepath.Join(bin, "kube-apiserver")); err != nil {
			return nil, fmt.Errorf("kube-apiserver not found in %s: run `make tools` (or `make test`)", bin)
		}
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: bin,
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
	}
	cfg, err := env.Start()
	if err != nil {
		// envtest leaves kube-apiserver and etcd running when a later step
		// (installing the CRDs) fails.
		_ = env.Stop()
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	return &Env{Environment: env, Config: cfg}, nil
}

// Apply creates or updates, with server-side apply, every object in the
// YAML files (paths relative to the repository root), e.g. the admission
// policies in config/policy.
func (e *Env) Apply(ctx context.Context, files ...string) error {
	root, err := repo.Root()
	if err != nil {
		return err
	}
	c, err := client.New(e.Config, client.Options{})
	if err != nil {
		return err
	}
	for _, f := range files {
		data, err := os.Open(filepath.Join(root, f))
		if err != nil {
			return err
		}
		dec := yaml.NewYAMLOrJSONDecoder(data, 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				data.Close()
				if errors.Is(err, io.EOF) {
					break
				}
				return fmt.Errorf("%s: %w", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("testenv"), client.ForceOwnership); err != nil {
				data.Close()
				return fmt.Errorf("%s: applying %s %s: %w", f, u.GetKind(), u.GetName(), err)
			}
		}
	}
	return nil
}

// WriteKubeconfig writes a kubeconfig for an administrator of the envtest
// API server into dir, for tests that run a command with --kubeconfig.
func (e *Env) WriteKubeconfig(dir string) (string, error) {
	admin, err := e.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	data, err := admin.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, os.WriteFile(path, data, 0o600)
}

// Main runs a package's tests against one envtest API server, the way each
// controller package's TestMain does: it starts the server, calls setup
// (clients, a manager started with ctx), runs the tests and stops it all.
// It does not return.
func Main(m *testing.M, setup func(ctx context.Context, env *Env) error) {
	SetLogger()
	env, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer func() { _ = env.Stop() }()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if err := setup(ctx, env); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// SetLogger makes controller-runtime log only what matters in a test run:
// optimistic-concurrency conflicts are routine and logged as errors.
// KUBEXT_TEST_VERBOSE=1 logs everything.
func SetLogger() {
	level := zapcore.DPanicLevel
	if os.Getenv("KUBEXT_TEST_VERBOSE") != "" {
		level = zapcore.DebugLevel
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr), zap.Level(level)))
}

// StartManager runs the manager in the background until ctx ends.
func StartManager(ctx context.Context, mgr ctrl.Manager) {
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
}

// RunManager is the controller manager of a controller package's tests:
// it makes one, has setup register the package's controllers with it, and
// runs it in the background until ctx ends. It returns it, whose client
// reads the cache its controllers read, and a client that reads and writes
// straight to the API server, for the tests to act and look. Both know
// client-go's kinds and those each addToScheme adds. The manager serves no
// metrics, so that packages testing at once do not compete for a port.
func (e *Env) RunManager(ctx context.Context, setup func(ctrl.Manager) error,
	addToScheme ...func(*runtime.Scheme) error) (client.WithWatch, ctrl.Manager, error) {
	return e.RunManagerWith(ctx, ctrl.Options{}, setup, addToScheme...)
}

// RunManagerWith is RunManager with opts for the manager (a cache limited
// to what the deployed component may see, say); RunManager sets the scheme
// and turns the metrics server off.
func (e *Env) RunManagerWith(ctx context.Context, opts ctrl.Options, setup func(ctrl.Manager) error,
	addToScheme ...func(*runtime.Scheme) error) (client.WithWatch, ctrl.Manager, error) {
	scheme := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme}, addToScheme...) {
		if err := add(scheme); err != nil {
			return nil, nil, err
		}
	}
	c, err := client.NewWithWatch(e.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, err
	}
	opts.Scheme, opts.Metrics = scheme, metricsserver.Options{BindAddress: "0"}
	mgr, err := ctrl.NewManager(e.Config, opts)
	if err != nil {
		return nil, nil, err
	}
	if err := setup(mgr); err != nil {
		return nil, nil, err
	}
	StartManager(ctx, mgr)
	return c, mgr, nil
}
