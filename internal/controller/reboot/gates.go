package reboot

import (
	"context"
	"time"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/rebootgate"
	"github.com/kubext/kubext/internal/rebootplan"
)

// gateRecheck is how often a held gate is looked at again: pods and
// PodDisruptionBudgets are not watched (a cache of every pod would cost
// the manager more than a few reads while a rollout waits).
const gateRecheck = 5 * time.Second

// checkGates evaluates the healthGates of each group that has a node
// waiting to be approved (in d, the decision before the gates), and
// returns the groups a gate holds.
func (r *Reconciler) checkGates(ctx context.Context, s *state, d rebootplan.Decision, next *deadlines) (map[string]rebootplan.Hold, error) {
	var held map[string]rebootplan.Hold
	for i := range s.groups {
		rg := &s.groups[i]
		if rg.Spec.HealthGates == nil {
			continue
		}
		if gd := d.Group(rg.Name); gd == nil || len(gd.Waiting)+len(gd.Approved) == 0 {
			continue
		}
		h, err := rebootgate.Check(ctx, r.APIReader, rg, r.lastDrain(rg))
		if err != nil {
			return nil, err
		}
		if h == nil {
			continue
		}
		if held == nil {
			held = map[string]rebootplan.Hold{}
		}
		held[rg.Name] = *h
		next.at(next.now.Add(gateRecheck))
	}
	return held, nil
}

// lastDrain is the group's last completed drain: the one this controller
// saw complete, or else the one its status records (from an earlier
// leader).
func (r *Reconciler) lastDrain(rg *rebootv1.RebootGroup) *rebootv1.DrainRecord {
	if o, ok := r.drainOutcome[rg.Name]; ok && o.blocked == "" {
		return &rebootv1.DrainRecord{Node: o.node, Workloads: o.evicted}
	}
	return rg.Status.LastDrain
}
