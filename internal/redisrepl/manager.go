package redisrepl

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Client talks to the members of one group. Redis is the implementation
// that talks to real Redis servers.
type Client interface {
	// Observe asks member m, at m.Addr, for its replication state. A member
	// that did not answer its last observation (m.Unanswered) may be given
	// less time to answer the dial.
	Observe(ctx context.Context, m Member) (State, error)
	// Promote makes the member at addr a primary.
	Promote(ctx context.Context, addr string) error
	// Follow makes the member at addr replicate from primary (host:port).
	Follow(ctx context.Context, addr, primary string) error
	// Handover makes the primary at addr hand over to its replica at to
	// (host:port) once the replica has caught up.
	Handover(ctx context.Context, addr, to string) error
}

// Result is what one Reconcile observed, decided and did.
type Result struct {
	Observations []Observation
	Plan         Plan
	// Done are the actions that succeeded.
	Done []Action
	// Err joins the errors of the actions that failed.
	Err error
}

// Primary is the member that is primary after the actions: the plan's,
// unless promoting it failed.
func (r Result) Primary() string {
	if len(r.Plan.Actions) > 0 && r.Plan.Actions[0].Kind == Promote && (len(r.Done) == 0 || r.Done[0] != r.Plan.Actions[0]) {
		return ""
	}
	return r.Plan.Primary
}

// Reconcile observes every member at once, decides with Decide and carries
// out the plan: the promotion first, so that the others follow a primary.
// It never waits longer than the client's timeouts per step; members it
// cannot reach are reported in the observations and left alone.
func Reconcile(ctx context.Context, c Client, members []Member, preferred string) Result {
	res := Result{Observations: Observe(ctx, c, members)}
	res.Plan = Decide(res.Observations, preferred)
	var errs []error
	for i, a := range res.Plan.Actions {
		var err error
		switch a.Kind {
		case Promote:
			err = c.Promote(ctx, a.Addr)
		case Handover:
			err = c.Handover(ctx, a.Addr, a.Primary)
		default:
			err = c.Follow(ctx, a.Addr, a.Primary)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a, err))
			if i == 0 && a.Kind == Promote {
				// Nobody follows a replica that failed to become primary.
				break
			}
			continue
		}
		res.Done = append(res.Done, a)
	}
	res.Err = errors.Join(errs...)
	return res
}

// Observe asks every member with an address for its state: first, all at
// once, those that did not answer their last observation (Unanswered),
// then, all at once, the others. While a primary does not answer, its
// replicas are thus asked after its dial has failed, not before: their
// word that their link to it is down is the freshest the round can have
// (it comes as soon as a whole second of silence has passed, see
// replicationState), and it is evidence gathered after the primary was
// found unreachable, never before.
func Observe(ctx context.Context, c Client, members []Member) []Observation {
	obs := make([]Observation, len(members))
	for i, m := range members {
		obs[i].Member = m
	}
	for _, unanswered := range []bool{true, false} {
		var wg sync.WaitGroup
		for i, m := range members {
			if m.Addr != "" && m.Unanswered == unanswered {
				wg.Go(func() { obs[i].State, obs[i].Err = c.Observe(ctx, m) })
			}
		}
		wg.Wait()
	}
	return obs
}
