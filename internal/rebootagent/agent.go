package rebootagent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/procfs"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/agentkube"
)

// Defaults of the agent's settings.
const (
	// DefaultSentinelFile is where Debian and Ubuntu note that an update
	// needs a reboot.
	DefaultSentinelFile = "/var/run/reboot-required"
	// DefaultSentinelInterval is how often the sentinel file is looked for.
	DefaultSentinelInterval = 5 * time.Second
	// DefaultBootIDFile is where Linux reports the current boot's ID, the
	// one the kubelet copies into status.nodeInfo.bootID.
	DefaultBootIDFile = "/proc/sys/kernel/random/boot_id"

	// HeartbeatComponent names the agent's heartbeat Lease
	// (reboot-agent-<node>, internal/heartbeat): the reboot controller
	// approves only nodes whose agent renews it, since nothing else would
	// reboot an approved and drained node.
	HeartbeatComponent = "reboot-agent"
	// DefaultHeartbeatDuration and DefaultHeartbeatInterval: a renewal
	// every 10s (as a kubelet's node Lease) keeps a 1,000-node cluster at
	// 100 small writes a second; a dead agent is noticed within 40s.
	DefaultHeartbeatDuration = 40 * time.Second
	DefaultHeartbeatInterval = 10 * time.Second
)

// Event reasons of the agent, on its Node.
const (
	ReasonRebootRequested     = "RebootRequested"
	ReasonRebooting           = "Rebooting"
	ReasonRebootCommandFailed = "RebootCommandFailed"
	ReasonSentinelStale       = "SentinelStale"
	ReasonUntracedOrder       = "UntracedOrder"
)

// untracedRetry is how soon an order the ledger does not hold is looked at
// again (the ledger is read from the API server, so a retry sees a grant as
// soon as it is there; the controller writes it before the order).
const untracedRetry = 10 * time.Second

// Ledger is where an agent traces an order to the reboot controller: its
// approvals ledger (api/reboot/v1alpha1, ledger.go), read by name from the
// API server, never from a cache.
type Ledger struct {
	Reader    Reader
	Namespace string
	Name      string
}

// Reader reads an object from the API server (agentkube.Client).
type Reader interface {
	Get(ctx context.Context, namespace, name string, obj runtime.Object) error
}

// orders reports whether the ledger holds the order node shows (its slot
// records the same approval, order time and boot ID), and why not.
func (l *Ledger) orders(ctx context.Context, node *corev1.Node) (bool, string, error) {
	cm := &corev1.ConfigMap{}
	err := l.Reader.Get(ctx, l.Namespace, l.Name, cm)
	if apierrors.IsNotFound(err) {
		return false, "there is no ledger", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("reading the reboot ledger %s/%s: %w", l.Namespace, l.Name, err)
	}
	slots, err := rebootv1.ParseLedger(cm.Data)
	if err != nil {
		return false, err.Error(), nil
	}
	s, ok := slots[node.Name]
	switch {
	case !ok:
		return false, "it holds no slot for this node", nil
	case s.Approval != node.Annotations[rebootv1.AnnotationInProgress]:
		return false, fmt.Sprintf("its slot for this node was approved at %s, the node shows %q",
			s.Approval, node.Annotations[rebootv1.AnnotationInProgress]), nil
	case s.Order == "":
		return false, "its slot for this node records no order: the controller has not ordered this reboot (the node may still be draining)", nil
	case s.Order != node.Annotations[rebootv1.AnnotationNow] || s.BootID != node.Annotations[rebootv1.AnnotationBootID]:
		return false, fmt.Sprintf("its slot for this node records the order of %s for boot %s, the node shows %q for boot %q",
			s.Order, s.BootID, node.Annotations[rebootv1.AnnotationNow], node.Annotations[rebootv1.AnnotationBootID]), nil
	}
	return true, "", nil
}

// Agent is the reboot agent of one node. It watches only its own Node and
// acts only once its informer has synced.
type Agent struct {
	// Client writes to the API server and watches the Node.
	Client   *agentkube.Client
	Recorder agentkube.EventRecorder
	// Node is the name of the agent's node.
	Node string
	// Rebooter reboots the machine.
	Rebooter Rebooter
	// SentinelFile, when it exists, asks for a reboot ("" disables).
	SentinelFile string
	// SentinelInterval is how often SentinelFile is looked for.
	SentinelInterval time.Duration
	// BootIDFile holds the machine's current boot ID ("" trusts the Node's
	// status alone, as in the lab, where nodes have no kernel of their
	// own).
	BootIDFile string
	// BootTime returns when the machine booted, on the clock of file
	// modification times (nil when unknown: then no sentinel is stale).
	BootTime func() (time.Time, error)
	// Ledger, when set, is the reboot controller's approvals ledger: an
	// order is carried out only when the ledger records that order. nil trusts the node's annotations alone (the admission policy
	// config/policy/reboot-order.yaml is then the only guard).
	Ledger *Ledger

	mu    sync.Mutex
	tried attempts
	// staleReported is the modification time of the stale sentinel last
	// reported, so that it is reported once.
	staleReported time.Time
	// untracedReported is the order (approval and now) last reported as
	// untraced, with the reason, so that each is reported once.
	untracedReported string
	synced           atomic.Bool
	// nodes is the informer's store: this node's Node, if it exists.
	nodes cache.Store
}

// Run runs the agent until ctx ends: it watches its own Node (no other:
// the agent neither needs nor should see them), reboots the node when
// ordered, and looks for the sentinel file.
func (a *Agent) Run(ctx context.Context) error {
	if a.Rebooter == nil {
		return errors.New("rebootagent: no way to reboot")
	}
	if a.SentinelInterval <= 0 {
		a.SentinelInterval = DefaultSentinelInterval
	}
	inf, err := a.Client.Informer(&corev1.Node{}, "", fields.OneTermEqualSelector("metadata.name", a.Node))
	if err != nil {
		return err
	}
	a.nodes = inf.GetStore()
	// One reboot at a time, and the memory of attempts stays simple.
	loop := agentkube.NewLoop("reboot-agent", logr.FromContextOrDiscard(ctx))
	if _, err := inf.AddEventHandler(loop.Handler()); err != nil {
		return err
	}
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil // stopping
	}
	a.synced.Store(true)
	go a.watchSentinel(ctx)
	loop.Run(ctx, a.reconcile)
	return nil
}

// Ready is a readiness check: the agent is ready once its informer has
// synced.
func (a *Agent) Ready() error {
	if !a.synced.Load() {
		return errors.New("the node cache has not synced")
	}
	return nil
}

// node is the agent's Node as the informer last saw it (shared: read it,
// never change it), or nil.
func (a *Agent) node() *corev1.Node {
	o, ok, err := a.nodes.GetByKey(a.Node)
	if err != nil || !ok {
		return nil
	}
	n, _ := o.(*corev1.Node)
	return n
}

// reconcile reboots the node when the controller ordered it for the
// current boot, once per boot; it returns when to look again.
func (a *Agent) reconcile(ctx context.Context) (time.Duration, error) {
	log := logr.FromContextOrDiscard(ctx)
	node := a.node()
	if node == nil {
		return 0, nil
	}
	local, err := a.localBootID()
	if err != nil {
		return 0, err
	}
	order, ok, why := RebootOrder(node, local)
	if !ok {
		if _, now := node.Annotations[rebootv1.AnnotationNow]; now {
			log.V(1).Info("Not rebooting", "why", why)
		}
		return 0, nil
	}
	if a.Ledger != nil {
		traced, why, err := a.Ledger.orders(ctx, node)
		if err != nil {
			return 0, err
		}
		if !traced {
			a.reportUntraced(ctx, node, why)
			return untracedRetry, nil
		}
	}
	a.mu.Lock()
	run, retryIn := a.tried.due(order.BootID, time.Now())
	a.mu.Unlock()
	if !run {
		return retryIn, nil
	}

	log.Info("Rebooting node", "bootID", order.BootID, "with", a.Rebooter.String())
	a.Recorder.Eventf(node, nil, corev1.EventTypeNormal, ReasonRebooting, "Reboot",
		"Rebooting node (boot ID %s, as ordered at %s)", order.BootID, node.Annotations[rebootv1.AnnotationNow])
	out, err := a.Rebooter.Reboot(ctx)
	if ctx.Err() != nil {
		// Stopping; the command goes on without us.
		return 0, nil
	}
	a.mu.Lock()
	retryIn = a.tried.record(order.BootID, err, time.Now())
	a.mu.Unlock()
	if err != nil {
		log.Error(err, "Reboot failed", "with", a.Rebooter.String(), "retryIn", retryIn)
		a.Recorder.Eventf(node, nil, corev1.EventTypeWarning, ReasonRebootCommandFailed, "Reboot",
			"Reboot by %s failed, retrying in %s: %v", a.Rebooter, retryIn, err)
		return retryIn, nil
	}
	// On a real machine the agent is stopped by the reboot about now.
	// Where the command returns after the whole reboot (the lab's simulated
	// one), the agent carries on as one restarted after the boot would; the
	// controller verifies.
	log.Info("Reboot started", "output", out)
	return 0, nil
}

// reportUntraced says once per order and reason that it is not carried
// out: an order the reboot controller's ledger does not record was written
// by someone else.
func (a *Agent) reportUntraced(ctx context.Context, node *corev1.Node, why string) {
	key := node.Annotations[rebootv1.AnnotationInProgress] + "/" + node.Annotations[rebootv1.AnnotationNow] + "/" + why
	a.mu.Lock()
	first := a.untracedReported != key
	a.untracedReported = key
	a.mu.Unlock()
	logr.FromContextOrDiscard(ctx).Info("Not rebooting: the order is not in the reboot controller's approvals ledger",
		"ledger", a.Ledger.Namespace+"/"+a.Ledger.Name, "why", why)
	if first {
		a.Recorder.Eventf(node, nil, corev1.EventTypeWarning, ReasonUntracedOrder, "Reboot",
			"Not rebooting: the reboot order on this node (approved at %q, now %q) is not in the reboot controller's approvals ledger %s/%s (%s); "+
				"reboots are ordered by the reboot controller only: ask with `kubectl kubext reboot NODE`",
			node.Annotations[rebootv1.AnnotationInProgress], node.Annotations[rebootv1.AnnotationNow], a.Ledger.Namespace, a.Ledger.Name, why)
	}
}

func (a *Agent) localBootID() (string, error) {
	if a.BootIDFile == "" {
		return "", nil
	}
	data, err := os.ReadFile(a.BootIDFile)
	if err != nil {
		return "", fmt.Errorf("reading the machine's boot ID: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// watchSentinel looks for the sentinel file every SentinelInterval; Run
// starts it once the informer has synced (deciding from an empty cache
// would request reboots the node already asked for).
func (a *Agent) watchSentinel(ctx context.Context) {
	if a.SentinelFile == "" {
		return
	}
	// Non-sliding: one look every interval, however long a look took (a
	// request waits for the cache to show it).
	wait.NonSlidingUntilWithContext(ctx, func(ctx context.Context) {
		if err := a.checkSentinel(ctx); err != nil && ctx.Err() == nil {
			logr.FromContextOrDiscard(ctx).Error(err, "Checking the sentinel file", "file", a.SentinelFile)
		}
	}, a.SentinelInterval)
}

func (a *Agent) checkSentinel(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx)
	s, err := statSentinel(a.SentinelFile)
	if err != nil {
		return err
	}
	if !s.Present {
		return nil
	}
	node := a.node()
	if node == nil {
		return fmt.Errorf("node %s does not exist", a.Node)
	}
	var booted time.Time
	if a.BootTime != nil {
		if booted, err = a.BootTime(); err != nil {
			return fmt.Errorf("reading the machine's boot time: %w", err)
		}
	}
	switch SentinelDecision(node, s, booted) {
	case SentinelRequest:
		return a.request(ctx, node)
	case SentinelStale:
		if !s.Modified.Equal(a.staleReported) {
			a.staleReported = s.Modified
			log.Info("Sentinel file predates the current boot; not asking for another reboot",
				"file", a.SentinelFile, "modified", s.Modified, "booted", booted)
			a.Recorder.Eventf(node, nil, corev1.EventTypeWarning, ReasonSentinelStale, "RequestReboot",
				"Sentinel file %s was last modified at %s, before the node booted at %s: the reboot it asks for has happened; remove the file",
				a.SentinelFile, s.Modified.UTC().Format(time.RFC3339), booted.UTC().Format(time.RFC3339))
		}
	case SentinelNothing:
	}
	return nil
}

// request sets reboot.kubext.io/needed=true on the node, and nothing else,
// then waits until the cache shows it so that the next look at the
// sentinel does not ask again.
func (a *Agent) request(ctx context.Context, cached *corev1.Node) error {
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"true"}}}`, rebootv1.AnnotationNeeded)
	// A fresh object: Patch writes the answer into it, and the cached
	// one must not change.
	if err := a.Client.Patch(ctx, "", a.Node, types.MergePatchType, patch, &corev1.Node{}); err != nil {
		return fmt.Errorf("asking for a reboot: %w", err)
	}
	logr.FromContextOrDiscard(ctx).Info("Sentinel file present, reboot requested", "file", a.SentinelFile)
	a.Recorder.Eventf(cached, nil, corev1.EventTypeNormal, ReasonRebootRequested, "RequestReboot",
		"Sentinel file %s present, reboot requested", a.SentinelFile)
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		n := a.node()
		return n != nil && rebootv1.Needed(n.Annotations), nil
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("the request was sent, but the node cache did not show it within 10s: %w", err)
	}
	return nil
}

func statSentinel(path string) (Sentinel, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Sentinel{}, nil
	}
	if err != nil {
		return Sentinel{}, err
	}
	return Sentinel{Present: true, Modified: fi.ModTime()}, nil
}

// HostBootTime reads when the machine booted from /proc/stat (btime), on the
// same clock as file modification times. /proc/stat is not namespaced, so
// in a container it is the host's boot.
func HostBootTime() (time.Time, error) { return bootTimeFrom(procfs.DefaultMountPoint) }

// bootTimeFrom reads btime from the stat file of the proc file system
// mounted at mount.
func bootTimeFrom(mount string) (time.Time, error) {
	proc, err := procfs.NewFS(mount)
	if err != nil {
		return time.Time{}, err
	}
	st, err := proc.Stat()
	if err != nil {
		return time.Time{}, fmt.Errorf("reading %s/stat: %w", mount, err)
	}
	if st.BootTime == 0 {
		return time.Time{}, fmt.Errorf("no btime in %s/stat", mount)
	}
	return time.Unix(int64(st.BootTime), 0), nil
}

// Scheme has the API types the agent reads and writes: its Node, the
// ledger's ConfigMap, its heartbeat Lease and its Events.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, coordinationv1.AddToScheme, eventsv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}
