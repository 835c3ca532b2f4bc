// Package rebootlab watches a rolling reboot on the lab from the outside, as
// an auditor would: it sees every state of every node the API server
// reports (through a watch, not by polling), and from that counts each
// node's reboots (boot IDs) and the most nodes of each group unavailable at
// the same moment. The e2e tests and `make bench-reboot` judge the reboot
// controller with it.
package rebootlab

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/rebootplan"
)

// Observer records what it sees of the nodes.
type Observer struct {
	groupOf func(*corev1.Node) string

	mu         sync.Mutex
	nodes      map[string]*corev1.Node
	bootIDs    map[string][]string // every boot ID each node has had, in order
	maxUnavail map[string]int
	violations []string
	budgets    map[string]int
	times      map[string]*Times
}

// Times are the moments the observer first saw a node reach each step of
// its reboot (the observer's clock).
type Times struct {
	// Approved: the in-progress annotation appeared.
	Approved time.Time
	// Ordered: the reboot order (the now annotation) appeared.
	Ordered time.Time
	// Down: NotReady, after the approval.
	Down time.Time
	// BackReady: Ready with a boot ID other than the one it had when first
	// seen.
	BackReady time.Time
	// Finished: the controller released it (Finished).
	Finished time.Time
}

// Observe starts watching the nodes. groupOf names the group a node belongs
// to ("" to ignore the node); budgets are the groups' maxUnavailable, and
// every observed state over a budget is recorded as a violation.
func Observe(ctx context.Context, cs kubernetes.Interface, groupOf func(*corev1.Node) string, budgets map[string]int) (*Observer, error) {
	o := &Observer{
		groupOf: groupOf, nodes: map[string]*corev1.Node{}, bootIDs: map[string][]string{},
		maxUnavail: map[string]int{}, budgets: budgets, times: map[string]*Times{},
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	inf := factory.Core().V1().Nodes().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { o.saw(obj, false) },
		UpdateFunc: func(_, obj any) { o.saw(obj, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			o.saw(obj, true)
		},
	})
	if err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("the node watch did not sync")
	}
	return o, nil
}

func (o *Observer) saw(obj any, deleted bool) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if deleted {
		delete(o.nodes, n.Name)
	} else {
		o.nodes[n.Name] = n
		ids := o.bootIDs[n.Name]
		if b := n.Status.NodeInfo.BootID; b != "" && (len(ids) == 0 || ids[len(ids)-1] != b) {
			o.bootIDs[n.Name] = append(ids, b)
		}
		o.timeSteps(n)
	}
	down := map[string]int{}
	names := map[string][]string{}
	for _, m := range o.nodes {
		g := o.groupOf(m)
		if g == "" {
			continue
		}
		if rebootplan.NodeFrom(m).Unavailable() {
			down[g]++
			names[g] = append(names[g], m.Name)
		}
	}
	for g, c := range down {
		o.maxUnavail[g] = max(o.maxUnavail[g], c)
		if b, ok := o.budgets[g]; ok && c > b {
			o.violations = append(o.violations, fmt.Sprintf("%s: group %s had %d unavailable (budget %d): %v",
				time.Now().Format(time.RFC3339Nano), g, c, b, names[g]))
		}
	}
}

func (o *Observer) timeSteps(n *corev1.Node) {
	t := o.times[n.Name]
	if t == nil {
		t = &Times{}
		o.times[n.Name] = t
	}
	now := time.Now()
	pn := rebootplan.NodeFrom(n)
	if _, ok := n.Annotations[rebootv1.AnnotationInProgress]; ok && t.Approved.IsZero() {
		t.Approved = now
	}
	if _, ok := n.Annotations[rebootv1.AnnotationNow]; ok && !t.Approved.IsZero() && t.Ordered.IsZero() {
		t.Ordered = now
	}
	if !t.Approved.IsZero() && t.Down.IsZero() && pn.Ready != corev1.ConditionTrue {
		t.Down = now
	}
	if !t.Approved.IsZero() && t.BackReady.IsZero() && pn.Ready == corev1.ConditionTrue && o.reboots(n.Name) > 0 {
		t.BackReady = now
	}
	if !t.Approved.IsZero() && t.Finished.IsZero() && Finished(n) {
		t.Finished = now
	}
}

// reboots is Reboots for callers holding the lock.
func (o *Observer) reboots(node string) int { return max(len(o.bootIDs[node])-1, 0) }

// Times are the moments seen of the node's (first) reboot.
func (o *Observer) Times(node string) Times {
	o.mu.Lock()
	defer o.mu.Unlock()
	if t := o.times[node]; t != nil {
		return *t
	}
	return Times{}
}

// Reboots is how many times the node's boot ID changed while watched.
func (o *Observer) Reboots(node string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.reboots(node)
}

// MaxUnavailable is the most nodes of the group seen unavailable at once.
func (o *Observer) MaxUnavailable(group string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.maxUnavail[group]
}

// Violations lists every observed state with a group over its budget.
func (o *Observer) Violations() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.violations...)
}

// Node is the last state seen of a node (nil if deleted or never seen).
func (o *Observer) Node(name string) *corev1.Node {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.nodes[name]
}

// Finished says whether the node's reboot is verified and released: the
// controller removed every protocol annotation but rebooted-at (and the
// node's failed or retry-after marks, which the caller looks at itself).
func Finished(n *corev1.Node) bool {
	if n == nil {
		return false
	}
	for _, k := range []string{rebootv1.AnnotationNeeded, rebootv1.AnnotationInProgress, rebootv1.AnnotationNow,
		rebootv1.AnnotationBootID, rebootv1.AnnotationCordonedByUs} {
		if _, ok := n.Annotations[k]; ok {
			return false
		}
	}
	_, ok := n.Annotations[rebootv1.AnnotationRebootedAt]
	return ok
}
