package reboot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/kubectl/pkg/drain"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/rebootgate"
)

const (
	// drainRetry is the pause between two drain attempts of one node
	// (after an error other than a PodDisruptionBudget refusal, which the
	// drain library retries itself).
	drainRetry = 2 * time.Second
	// evictRetry is how soon an eviction refused by a PodDisruptionBudget is
	// tried again.
	evictRetry = 2 * time.Second
	// DefaultDrainBackoff is how long a node whose drain timed out waits
	// before it is approved again, the first time; the wait doubles with
	// each consecutive timeout, up to maxBackoff.
	DefaultDrainBackoff = time.Minute
	maxBackoff          = 30 * time.Minute
)

// drainOutcome is the last drain of a group, for its DrainBlocked condition.
type drainOutcome struct {
	node    string
	blocked string // "" when it completed
	// evicted are the workloads whose pods a completed drain evicted.
	evicted []rebootv1.WorkloadRef
}

// drainer runs node drains in the background: a drain can take minutes and
// must not hold up decisions for other nodes. Each drain belongs to one
// approval (the in-progress timestamp), so a drain left over from an earlier
// approval of the same node is never taken for the current one.
type drainer struct {
	kube kubernetes.Interface
	wake func()
	// timeouts is each node's wait after its consecutive timed-out drains
	// (safe for concurrent use on its own).
	timeouts *flowcontrol.Backoff

	mu   sync.Mutex
	runs map[string]*drainRun
}

type drainRun struct {
	approval string
	cancel   context.CancelFunc
	finished bool
	err      error
	took     time.Duration
	// evicted are the workloads whose pods the drain evicted (or tried
	// to).
	evicted []rebootv1.WorkloadRef
}

func newDrainer(kube kubernetes.Interface, firstBackoff time.Duration, wake func()) *drainer {
	if firstBackoff <= 0 {
		firstBackoff = DefaultDrainBackoff
	}
	// Doubling from the first wait, at most 32 times it and at most
	// maxBackoff.
	timeouts := flowcontrol.NewBackOff(firstBackoff, min(firstBackoff<<5, maxBackoff))
	// A node's backoff lasts until its reboot is verified (reset), however
	// long it waited: its next drain is as likely to time out as the last.
	timeouts.HasExpiredFunc = func(time.Time, time.Time, time.Duration) bool { return false }
	return &drainer{kube: kube, wake: wake, timeouts: timeouts, runs: map[string]*drainRun{}}
}

// start drains the node unless a drain for this approval already runs or
// ran.
func (d *drainer) start(node, approval string, spec rebootv1.DrainSpec, timeLeft time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if run, ok := d.runs[node]; ok {
		if run.approval == approval {
			return
		}
		run.cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeLeft)
	run := &drainRun{approval: approval, cancel: cancel}
	d.runs[node] = run
	go func() {
		start := time.Now()
		evicted, err := d.drain(ctx, node, spec)
		cancel()
		d.mu.Lock()
		run.finished, run.err, run.took, run.evicted = true, err, time.Since(start), evicted
		d.mu.Unlock()
		d.wake()
	}()
}

// result reports on the drain of this approval of the node; known is false
// when none was started (e.g. by a previous leader).
func (d *drainer) result(node, approval string) (res drainRun, known bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	run, ok := d.runs[node]
	if !ok || run.approval != approval {
		return drainRun{}, false
	}
	return *run, true
}

// forget drops a finished drain; a drain that timed out counts towards the
// node's backoff (see backoff).
func (d *drainer) forget(node string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if run, ok := d.runs[node]; ok {
		run.cancel()
		delete(d.runs, node)
	}
}

// forgetAllBut stops the drains of nodes that no longer hold a slot: their
// reboot was released, or the Node was deleted.
func (d *drainer) forgetAllBut(keep map[string]bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for node, run := range d.runs {
		if !keep[node] {
			run.cancel()
			delete(d.runs, node)
		}
	}
}

// backoff is how long a node waits after a timed-out drain: the first backoff,
// doubling with each consecutive timeout, at most maxBackoff.
func (d *drainer) backoff(node string) time.Duration {
	d.timeouts.Next(node, d.timeouts.Clock.Now())
	return d.timeouts.Get(node)
}

// reset clears a node's backoff after a verified reboot.
func (d *drainer) reset(node string) {
	d.timeouts.Reset(node)
}

// drain evicts the node's pods through the Eviction API, so that
// PodDisruptionBudgets hold, leaving DaemonSet pods alone; it tries until
// the context's deadline, then names what blocked it. It returns the
// workloads whose pods it evicted, for healthGates.evictedPodsReady.
func (d *drainer) drain(ctx context.Context, node string, spec rebootv1.DrainSpec) ([]rebootv1.WorkloadRef, error) {
	helper := &drain.Helper{
		Ctx:                  ctx,
		Client:               d.kube,
		IgnoreAllDaemonSets:  true,
		DeleteEmptyDirData:   spec.DeleteEmptyDirData == nil || *spec.DeleteEmptyDirData,
		GracePeriodSeconds:   -1,
		EvictErrorRetryDelay: evictRetry,
		Out:                  io.Discard,
		ErrOut:               io.Discard,
	}
	if spec.GracePeriodSeconds != nil {
		helper.GracePeriodSeconds = int(*spec.GracePeriodSeconds)
	}
	var last error
	var evicted []corev1.Pod
	// Try again drainRetry after each failed attempt until the context's
	// deadline; each attempt may use what is left of it. An attempt is
	// drain.RunNodeDrain, noting the pods it is about to evict.
	err := wait.PollUntilContextCancel(ctx, drainRetry, true, func(context.Context) (bool, error) {
		if helper.Timeout = remaining(ctx); helper.Timeout <= 0 {
			return false, context.DeadlineExceeded
		}
		list, errs := helper.GetPodsForDeletion(node)
		if errs != nil {
			last = utilerrors.NewAggregate(errs)
			return false, nil
		}
		evicted = append(evicted, list.Pods()...)
		last = helper.DeleteOrEvictPods(list.Pods())
		return last == nil, nil
	})
	workloads := rebootgate.Workloads(evicted)
	if err == nil {
		return workloads, nil
	}
	if errors.Is(context.Cause(ctx), context.Canceled) {
		return workloads, errors.New("drain cancelled")
	}
	return workloads, d.blocker(node, last)
}

func remaining(ctx context.Context) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return time.Hour
	}
	return time.Until(dl)
}

// blocker explains a timed-out drain: the PodDisruptionBudget that allows
// no disruption of a pod still on the node, or else the pods left and the
// last error.
func (d *drainer) blocker(node string, last error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods, err := d.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return fmt.Errorf("%w (and listing its pods failed: %v)", orTimeout(last), err)
	}
	var left []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if isDaemonSetPod(p) || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		left = append(left, p.Namespace+"/"+p.Name)
		pdbs, err := d.kube.PolicyV1().PodDisruptionBudgets(p.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, pdb := range pdbs.Items {
			sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(p.Labels)) {
				continue
			}
			if pdb.Status.DisruptionsAllowed == 0 {
				return fmt.Errorf("PodDisruptionBudget %s/%s allows no disruption of pod %s/%s",
					pdb.Namespace, pdb.Name, p.Namespace, p.Name)
			}
		}
	}
	if len(left) == 0 {
		return orTimeout(last)
	}
	if len(left) > 5 {
		left = append(left[:5], fmt.Sprintf("and %d more", len(left)-5))
	}
	return fmt.Errorf("pods still on the node: %s (%v)", strings.Join(left, ", "), orTimeout(last))
}

func orTimeout(err error) error {
	if err == nil {
		return errors.New("timed out")
	}
	return err
}

func isDaemonSetPod(p *corev1.Pod) bool {
	ref := metav1.GetControllerOf(p)
	return ref != nil && ref.Kind == "DaemonSet"
}
