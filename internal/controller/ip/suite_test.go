package ip

import (
	"context"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/controller/ippool"
	"github.com/kubext/kubext/internal/heartbeat"
	awsprov "github.com/kubext/kubext/internal/provider/aws"
	"github.com/kubext/kubext/internal/provider/aws/ec2double"
	"github.com/kubext/kubext/test/testenv"
)

const heartbeatNS = "kubext-system"

var (
	k8s    client.WithWatch // direct, uncached
	scheme = runtime.NewScheme()

	// ec2d is the EC2 the controller's aws provider talks to: one VPC with
	// the nodes' subnet 10.0.0.0/16 and the BYOIP pool awsPublicPool.
	ec2d       *ec2double.Double
	awsSubnet  string
	reconciler *Reconciler
)

const awsPublicPool = "ipv4pool-ec2-0123456789abcdef0"

func TestMain(m *testing.M) {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(ipv1.AddToScheme(scheme))
	testenv.Main(m, startManager)
}

func startManager(ctx context.Context, env *testenv.Env) error {
	var err error
	k8s, err = client.NewWithWatch(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: heartbeatNS}}); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{heartbeatNS: {}}},
		}},
	})
	if err != nil {
		return err
	}
	ec2d = ec2double.New()
	awsSubnet = ec2d.AddSubnet("vpc-1", "10.0.0.0/16")
	ec2d.AddPool(awsPublicPool, "198.51.100.128/25")
	r := &Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("ip-controller"),
		Health: heartbeat.NewTracker(ipv1.AgentComponent, heartbeatNS, mgr.GetAPIReader()), DeleteStalePods: true,
		AWS: awsprov.NewWithEC2(ec2d, awsprov.Options{})}
	reconciler = r
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	if err := (&ippool.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("ippool"), AWS: true}).SetupWithManager(mgr); err != nil {
		return err
	}
	testenv.StartManager(ctx, mgr)
	return nil
}
