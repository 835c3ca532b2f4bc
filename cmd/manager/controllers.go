package main

import (
	"context"
	"flag"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	pulsarv1 "github.com/kubext/kubext/api/pulsar/v1"
	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	stablev1 "github.com/kubext/kubext/api/stable/v1"
	"github.com/kubext/kubext/internal/agenthealth"
	"github.com/kubext/kubext/internal/controller/crontab"
	ipcontroller "github.com/kubext/kubext/internal/controller/ip"
	"github.com/kubext/kubext/internal/controller/ippool"
	"github.com/kubext/kubext/internal/controller/pulsarconsumer"
	"github.com/kubext/kubext/internal/controller/reboot"
	rediscontroller "github.com/kubext/kubext/internal/controller/redis"
	"github.com/kubext/kubext/internal/rebootagent"
	"github.com/kubext/kubext/internal/redisrepl"
	"github.com/kubext/kubext/internal/witnesskey"
)

// options are the controllers' own flags.
type options struct {
	// heartbeatNamespace holds the node agents' heartbeat Leases.
	heartbeatNamespace string
	ipDeleteStalePods  bool
	ipWorkers          int
	rebootDrainBackoff time.Duration
	rebootLedgerName   string
	// rebootRequireAgent: approve only nodes whose reboot-agent renews its
	// heartbeat Lease in heartbeatNamespace.
	rebootRequireAgent bool

	// pulsarConsumerImage is what PulsarConsumers run unless their spec
	// names an image.
	pulsarConsumerImage string

	// aws configures the aws provider of static IPs (see aws.go).
	aws awsOptions
}

func (o *options) bindFlags(fs *flag.FlagSet) {
	o.aws.bindFlags(fs)
	fs.StringVar(&o.pulsarConsumerImage, "pulsar-consumer-image", pulsarconsumer.DefaultImage(),
		"Image the PulsarConsumers' pods run /pulsar-consumer from, unless their spec.image says otherwise. Pin a tag or digest.")
	fs.StringVar(&o.heartbeatNamespace, "heartbeat-namespace", "kubext-system",
		"Namespace of the node agents' heartbeat Leases and of the reboot controller's approvals ledger.")
	fs.BoolVar(&o.ipDeleteStalePods, "ip-delete-stale-pods", false,
		"Delete pods that claim an IP on a node whose agent is lost when no standby can take over, "+
			"so that they are recreated elsewhere at once instead of after the 5-minute eviction.")
	fs.IntVar(&o.ipWorkers, "ip-workers", 8,
		"IPs reconciled at once. Each reconcile mostly waits on the API server; with thousands of IPs, more workers (and --kube-api-qps) converge faster.")
	fs.StringVar(&o.rebootLedgerName, "reboot-ledger-name", reboot.DefaultLedgerName,
		"Name of the reboot controller's approvals ledger, a ConfigMap in --heartbeat-namespace (the manager's Role grants it by name).")
	fs.BoolVar(&o.rebootRequireAgent, "reboot-require-agent-heartbeat", false,
		"Approve a node's reboot only while its reboot-agent renews its heartbeat Lease reboot-agent-<node> in --heartbeat-namespace "+
			"(the agents' --heartbeat-namespace); otherwise the node waits (reason AgentNotAlive). The installed manifests turn it on.")
	fs.DurationVar(&o.rebootDrainBackoff, "reboot-drain-backoff", reboot.DefaultDrainBackoff,
		"How long a node whose drain timed out waits before it is tried again; doubles with each further timeout, up to 30m.")
}

// controller is one entry of --controllers: the API types it needs in the
// scheme and the function that registers it with the manager.
type controller struct {
	name        string
	addToScheme func(*runtime.Scheme) error
	setup       func(context.Context, ctrl.Manager, *options) error
}

// controllers lists every controller the manager can run, in start order.
var controllers = []controller{
	{name: "ip", addToScheme: ipv1.AddToScheme, setup: setupIP},
	{name: "ippool", addToScheme: ipv1.AddToScheme, setup: setupIPPool},
	{name: "crontab", addToScheme: stablev1.AddToScheme, setup: setupCronTab},
	{name: "pulsarconsumer", addToScheme: pulsarv1.AddToScheme, setup: setupPulsarConsumer},
	{name: "reboot", addToScheme: rebootv1.AddToScheme, setup: setupReboot},
	{name: "redis", addToScheme: cachev1.AddToScheme, setup: setupRedis},
}

func setupIP(ctx context.Context, mgr ctrl.Manager, o *options) error {
	r := &ipcontroller.Reconciler{
		Client:          mgr.GetClient(),
		Recorder:        mgr.GetEventRecorder("ip-controller"),
		Health:          agenthealth.NewTracker(ipv1.AgentComponent, o.heartbeatNamespace, mgr.GetAPIReader()),
		DeleteStalePods: o.ipDeleteStalePods,
		Workers:         o.ipWorkers,
	}
	aws, err := o.aws.provider(ctx)
	if err != nil {
		return err
	}
	if aws != nil {
		r.AWS = aws
	}
	// The ip-agents' witness key: made once, never replaced.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		return wait.PollUntilContextCancel(ctx, 5*time.Second, true, func(ctx context.Context) (bool, error) {
			if err := witnesskey.Ensure(ctx, mgr.GetAPIReader(), mgr.GetClient(), o.heartbeatNamespace, witnessKeySecret); err != nil {
				ctrl.Log.Error(err, "Providing the ip-agents' witness key")
				return false, nil
			}
			return true, nil
		})
	})); err != nil {
		return err
	}
	return r.SetupWithManager(ctx, mgr)
}

// witnessKeySecret is the Secret config/ip-agent mounts into the agents.
const witnessKeySecret = "kubext-witness-key"

func setupIPPool(_ context.Context, mgr ctrl.Manager, o *options) error {
	return (&ippool.Reconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("ippool-controller"),
		AWS:      o.aws.enabled,
	}).SetupWithManager(mgr)
}

func setupCronTab(_ context.Context, mgr ctrl.Manager, _ *options) error {
	return (&crontab.Reconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("crontab-controller"),
	}).SetupWithManager(mgr)
}

func setupPulsarConsumer(_ context.Context, mgr ctrl.Manager, o *options) error {
	return (&pulsarconsumer.Reconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("pulsarconsumer-controller"),
		Image:    o.pulsarConsumerImage,
	}).SetupWithManager(mgr)
}

func setupReboot(_ context.Context, mgr ctrl.Manager, o *options) error {
	kube, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	r := &reboot.Reconciler{
		Client:          mgr.GetClient(),
		APIReader:       mgr.GetAPIReader(),
		Kube:            kube,
		Recorder:        mgr.GetEventRecorder("reboot-controller"),
		DrainBackoff:    o.rebootDrainBackoff,
		LedgerNamespace: o.heartbeatNamespace,
		LedgerName:      o.rebootLedgerName,
	}
	if o.rebootRequireAgent {
		r.Agents = agenthealth.NewTracker(rebootagent.HeartbeatComponent, o.heartbeatNamespace, mgr.GetAPIReader())
	}
	return r.SetupWithManager(mgr)
}

func setupRedis(_ context.Context, mgr ctrl.Manager, _ *options) error {
	return (&rediscontroller.Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("redis-controller"),
		Connect:   func(password string) redisrepl.Client { return redisrepl.Redis{Password: password} },
	}).SetupWithManager(mgr)
}
