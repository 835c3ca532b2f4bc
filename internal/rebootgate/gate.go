// Package rebootgate checks a RebootGroup's healthGates: what must be true
// of the cluster's workloads before the group's next node is approved. The
// reboot controller and `kubectl kubext reboot plan/status` ask it the same
// question with the same reads, so both name the same gate.
package rebootgate

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubectl/pkg/util/podutils"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/rebootplan"
)

// maxNamed bounds how many pods or budgets a message names.
const maxNamed = 3

// Check evaluates the gates of rg, in the order of the spec, and returns
// the first that fails (nil when all pass or none is set). last is the
// group's last completed drain (its status.lastDrain, or what the
// controller knows newer), for evictedPodsReady.
func Check(ctx context.Context, c client.Reader, rg *rebootv1.RebootGroup, last *rebootv1.DrainRecord) (*rebootplan.Hold, error) {
	g := rg.Spec.HealthGates
	if g == nil {
		return nil, nil
	}
	if g.EvictedPodsReady && last != nil {
		if h, err := evictedPodsReady(ctx, c, last); h != nil || err != nil {
			return h, err
		}
	}
	if g.PodDisruptionBudgets != nil {
		if h, err := budgetsAllow(ctx, c, &g.PodDisruptionBudgets.NamespaceSelector); h != nil || err != nil {
			return h, err
		}
	}
	if g.ReadyPods != nil {
		if h, err := podsReady(ctx, c, g.ReadyPods); h != nil || err != nil {
			return h, err
		}
	}
	return nil, nil
}

// evictedPodsReady: every running pod of each workload the last drain
// evicted pods of is Ready. A pod being deleted is not counted: its
// replacement is.
func evictedPodsReady(ctx context.Context, c client.Reader, last *rebootv1.DrainRecord) (*rebootplan.Hold, error) {
	byNamespace := map[string][]rebootv1.WorkloadRef{}
	for _, w := range last.Workloads {
		byNamespace[w.Namespace] = append(byNamespace[w.Namespace], w)
	}
	var notReady []string
	for _, ns := range sortedKeys(byNamespace) {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(ns)); err != nil {
			return nil, fmt.Errorf("listing pods in %s for healthGates.evictedPodsReady: %w", ns, err)
		}
		for _, w := range byNamespace[ns] {
			for i := range pods.Items {
				p := &pods.Items[i]
				ref := metav1.GetControllerOf(p)
				if ref == nil || ref.UID != types.UID(w.UID) || p.DeletionTimestamp != nil || finished(p) {
					continue
				}
				if !podutils.IsPodReady(p) {
					notReady = append(notReady, fmt.Sprintf("%s/%s (%s %s)", p.Namespace, p.Name, w.Kind, w.Name))
				}
			}
		}
	}
	if len(notReady) == 0 {
		return nil, nil
	}
	return &rebootplan.Hold{Reason: rebootv1.ReasonEvictedPodsNotReady,
		Message: fmt.Sprintf("pods of workloads evicted from node %s are not Ready: %s", last.Node, list(notReady))}, nil
}

// budgetsAllow: every PodDisruptionBudget in the selected namespaces
// allows a disruption.
func budgetsAllow(ctx context.Context, c client.Reader, nsSel *metav1.LabelSelector) (*rebootplan.Hold, error) {
	namespaces, all, err := selectNamespaces(ctx, c, nsSel)
	if err != nil {
		return nil, err
	}
	pdbs := &policyv1.PodDisruptionBudgetList{}
	if err := c.List(ctx, pdbs); err != nil {
		return nil, fmt.Errorf("listing PodDisruptionBudgets for healthGates.podDisruptionBudgets: %w", err)
	}
	var exhausted []string
	for _, pdb := range pdbs.Items {
		if !all && !namespaces[pdb.Namespace] {
			continue
		}
		// A budget its controller has not looked at since it changed
		// says nothing yet: held, as one that allows nothing.
		if pdb.Status.DisruptionsAllowed < 1 || pdb.Status.ObservedGeneration < pdb.Generation {
			exhausted = append(exhausted, fmt.Sprintf("%s/%s (%d of %d healthy, %d disruptions allowed)",
				pdb.Namespace, pdb.Name, pdb.Status.CurrentHealthy, pdb.Status.ExpectedPods, pdb.Status.DisruptionsAllowed))
		}
	}
	if len(exhausted) == 0 {
		return nil, nil
	}
	slices.Sort(exhausted)
	return &rebootplan.Hold{Reason: rebootv1.ReasonDisruptionsNotAllowed,
		Message: "PodDisruptionBudgets allow no disruption: " + list(exhausted)}, nil
}

// podsReady: at least one pod is selected, and every selected pod is
// Ready (pods that ran to completion are not counted).
func podsReady(ctx context.Context, c client.Reader, gate *rebootv1.PodsGate) (*rebootplan.Hold, error) {
	sel, err := metav1.LabelSelectorAsSelector(&gate.PodSelector)
	if err != nil {
		return nil, fmt.Errorf("spec.healthGates.readyPods.podSelector: %w", err)
	}
	namespaces, all, err := selectNamespaces(ctx, c, gate.NamespaceSelector)
	if err != nil {
		return nil, err
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("listing pods for healthGates.readyPods: %w", err)
	}
	selected := 0
	var notReady []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if !all && !namespaces[p.Namespace] || finished(p) {
			continue
		}
		selected++
		if !podutils.IsPodReady(p) || p.DeletionTimestamp != nil {
			notReady = append(notReady, p.Namespace+"/"+p.Name)
		}
	}
	switch {
	case selected == 0:
		return &rebootplan.Hold{Reason: rebootv1.ReasonSelectedPodsNotReady,
			Message: fmt.Sprintf("no pod matches healthGates.readyPods (%s)", sel)}, nil
	case len(notReady) > 0:
		slices.Sort(notReady)
		return &rebootplan.Hold{Reason: rebootv1.ReasonSelectedPodsNotReady,
			Message: fmt.Sprintf("%d of %d selected pods are not Ready: %s", len(notReady), selected, list(notReady))}, nil
	}
	return nil, nil
}

// selectNamespaces resolves a namespace selector; all is true when it
// selects every namespace (unset or empty), without listing them.
func selectNamespaces(ctx context.Context, c client.Reader, nsSel *metav1.LabelSelector) (map[string]bool, bool, error) {
	if nsSel == nil {
		return nil, true, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(nsSel)
	if err != nil {
		return nil, false, fmt.Errorf("namespaceSelector: %w", err)
	}
	if sel.Empty() {
		return nil, true, nil
	}
	nss := &corev1.NamespaceList{}
	if err := c.List(ctx, nss, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, false, fmt.Errorf("listing namespaces matching %s: %w", sel, err)
	}
	out := map[string]bool{}
	for _, ns := range nss.Items {
		out[ns.Name] = true
	}
	return out, false, nil
}

// Workloads are the controllers of pods (the drained node's evictable
// pods), each once, in order, at most 100 (the status's limit).
func Workloads(pods []corev1.Pod) []rebootv1.WorkloadRef {
	var out []rebootv1.WorkloadRef
	seen := map[types.UID]bool{}
	for i := range pods {
		ref := metav1.GetControllerOf(&pods[i])
		if ref == nil || seen[ref.UID] || len(out) == 100 {
			continue
		}
		seen[ref.UID] = true
		out = append(out, rebootv1.WorkloadRef{Namespace: pods[i].Namespace, Kind: ref.Kind, Name: ref.Name, UID: string(ref.UID)})
	}
	slices.SortFunc(out, func(a, b rebootv1.WorkloadRef) int {
		return strings.Compare(a.Namespace+"/"+a.Kind+"/"+a.Name, b.Namespace+"/"+b.Kind+"/"+b.Name)
	})
	return out
}

// Needed says whether any group sets a gate, so that callers read nothing
// for clusters that use none.
func Needed(groups []rebootv1.RebootGroup) bool {
	return slices.ContainsFunc(groups, func(g rebootv1.RebootGroup) bool { return g.Spec.HealthGates != nil })
}

// finished says the pod ran to its end (a Job's): it will never be Ready
// and is not expected to be.
func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func list(items []string) string {
	if len(items) > maxNamed {
		return strings.Join(items[:maxNamed], ", ") + fmt.Sprintf(" and %d more", len(items)-maxNamed)
	}
	return strings.Join(items, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
