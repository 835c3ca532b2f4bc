package ip

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/agenthealth"
	"github.com/kubext/kubext/internal/cachetrim"
	"github.com/kubext/kubext/internal/controller/ippool"
	awsprov "github.com/kubext/kubext/internal/provider/aws"
	"github.com/kubext/kubext/internal/provider/aws/ec2double"
	"github.com/kubext/kubext/test/testenv"
)

const heartbeatNS = "kubext-system"

var (
	k8s client.WithWatch // direct, uncached

	// ec2d is the EC2 the controller's aws provider talks to: one VPC with
	// the nodes' subnet 10.0.0.0/16 and the BYOIP pool awsPublicPool.
	ec2d      *ec2double.Double
	awsSubnet string
	// awsOtherSubnet is a second subnet of the nodes' VPC.
	awsOtherSubnet string
	reconciler     *Reconciler
	// managerWrites are the IP controller's writes, by object name.
	managerWrites = &testenv.WriteLog{}
)

const awsPublicPool = "ipv4pool-ec2-0123456789abcdef0"

func TestMain(m *testing.M) {
	testenv.Main(m, startManager)
}

func startManager(ctx context.Context, env *testenv.Env) error {
	ec2d = ec2double.New()
	awsSubnet = ec2d.AddSubnet("vpc-1", "10.0.0.0/16")
	awsOtherSubnet = ec2d.AddSubnet("vpc-1", "10.1.0.0/16")
	ec2d.AddPool(awsPublicPool, "198.51.100.128/25")
	// The manager caches as deployed: Leases in the heartbeat namespace
	// only, Pods and Nodes trimmed to what the controllers read.
	opts := ctrl.Options{Cache: cachetrim.Options(heartbeatNS)}
	var err error
	k8s, _, err = env.RunManagerWith(ctx, opts, func(mgr ctrl.Manager) error {
		// The agents' namespace exists before the controller starts, as
		// deployed.
		c, err := client.New(mgr.GetConfig(), client.Options{})
		if err != nil {
			return err
		}
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: heartbeatNS}}); err != nil {
			return err
		}
		reconciler = &Reconciler{Client: testenv.RecordWrites(mgr.GetClient(), managerWrites.Record), Recorder: mgr.GetEventRecorder("ip-controller"),
			Health: agenthealth.NewTracker(ipv1.AgentComponent, heartbeatNS, mgr.GetAPIReader()), DeleteStalePods: true,
			AWS: awsprov.NewWithEC2(ec2d, awsprov.Options{})}
		if err := reconciler.SetupWithManager(ctx, mgr); err != nil {
			return err
		}
		return (&ippool.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("ippool"), AWS: true}).SetupWithManager(mgr)
	}, ipv1.AddToScheme)
	if err != nil {
		return err
	}
	// The IP finalizer policy, as `make deploy` installs it.
	if err := env.Apply(ctx, "config/policy/ip-finalizer.yaml"); err != nil {
		return err
	}
	return testenv.WaitIPFinalizerPolicy(ctx, k8s)
}
