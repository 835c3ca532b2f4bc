// Package redisrepl keeps a group of Redis servers replicating from one
// primary: it observes each member (INFO replication), decides with pure
// logic which member is the primary and who must be repointed, and acts
// (REPLICAOF NO ONE, REPLICAOF host port). It knows nothing of Kubernetes:
// the Redis controller gives it the members' addresses.
package redisrepl

import (
	"fmt"
	"strings"
)

// Role is the replication role a Redis server reports.
type Role string

const (
	// RolePrimary is a server that accepts writes ("master" in Redis).
	RolePrimary Role = "master"
	// RoleReplica is a server that copies a primary ("slave" in Redis).
	RoleReplica Role = "slave"
)

// Member is one Redis server of the group, as the caller knows it.
type Member struct {
	// Name identifies the member (its pod's name).
	Name string
	// Addr is host:port; empty when the member has no address yet.
	Addr string
	// Leaving marks a member being removed (scale down): it is not made
	// primary while another member can be.
	Leaving bool
	// Draining says why the member is about to be evicted (its node is
	// cordoned for a drain, e.g. a planned reboot); empty otherwise. Like a
	// Leaving member it is not made primary while another member can be,
	// and a primary that is Draining hands over, but it stays a member.
	Draining string
	// Unanswered says the member did not answer its last observation (see
	// Pace): it is dialled with UnansweredDialTimeout, so that a member that
	// is gone costs each observation round little.
	Unanswered bool
}

// departing reports whether the member is going away: removed or drained.
func (m Member) departing() bool { return m.Leaving || m.Draining != "" }

// goingWhy says, after the member's name, why it is going away.
func (m Member) goingWhy() string {
	if m.Draining != "" && !m.Leaving {
		return "is about to be evicted (" + m.Draining + ")"
	}
	return "is being removed"
}

// State is what a member reports about its replication.
type State struct {
	Role Role
	// PrimaryAddr is, for a replica, the host:port it replicates from.
	PrimaryAddr string
	// LinkUp is, for a replica, whether its link to PrimaryAddr is up and
	// the initial copy done (master_link_status:up).
	LinkUp bool
	// Offset is how far into the replication stream the member is: the
	// amount of data it holds, comparable between members of one group.
	Offset int64
	// FailingOver is, for a primary, whether it is handing over to a
	// replica (a FAILOVER in progress: it holds its clients' writes).
	FailingOver bool
}

// Observation is a member and what it reported, or why it could not be
// asked.
type Observation struct {
	Member
	State State
	// Err is why the member could not be observed; nil when it was.
	Err error
}

// Reachable reports whether the member answered.
func (o Observation) Reachable() bool { return o.Addr != "" && o.Err == nil }

// ActionKind is what is done to a member.
type ActionKind string

const (
	// Promote makes a replica the primary: REPLICAOF NO ONE.
	Promote ActionKind = "promote"
	// Follow makes a member replicate from the primary: REPLICAOF host port.
	Follow ActionKind = "follow"
	// Handover makes the primary hand over to a replica once the replica
	// has caught up (FAILOVER TO host port): no acknowledged write is lost.
	Handover ActionKind = "handover"
)

// Action is one command for one member.
type Action struct {
	Kind   ActionKind
	Member string
	Addr   string
	// Primary is the address to follow, for Follow, or to hand over to,
	// for Handover.
	Primary string
}

func (a Action) String() string {
	switch a.Kind {
	case Follow:
		return fmt.Sprintf("%s (%s): replicate from %s", a.Member, a.Addr, a.Primary)
	case Handover:
		return fmt.Sprintf("%s (%s): hand over to %s", a.Member, a.Addr, a.Primary)
	}
	return fmt.Sprintf("%s (%s): become primary", a.Member, a.Addr)
}

// Change says how the primary was chosen.
type Change string

const (
	// Kept means the preferred primary is alive and stays primary.
	Kept Change = "Kept"
	// Elected means the preferred primary is not primary (or there was none),
	// and another member that already is primary was chosen.
	Elected Change = "Elected"
	// Promoted means no suitable primary was alive, so a replica is promoted:
	// the one with the most data.
	Promoted Change = "Promoted"
	// Lost means there is no primary and no member can be made one.
	Lost Change = "Lost"
	// HandingOver means the primary is being removed and hands over to a
	// replica: it stays primary until the replica has caught up and taken
	// over.
	HandingOver Change = "HandingOver"
)

// Plan is what Decide wants done.
type Plan struct {
	// Primary is the member that is primary once the actions are done;
	// empty when Change is Lost.
	Primary     string
	PrimaryAddr string
	Change      Change
	// Why explains a change of primary (Elected, Promoted, Lost) in a
	// sentence; empty when Kept.
	Why string
	// Actions, in order: the promotion first, then the members to repoint.
	Actions []Action
}

// Decide chooses the primary and the commands that make every reachable
// member replicate from it. It prefers, in order:
//
//  1. preferred (the current primary), while it is alive: it answers as a
//     primary, or replicas that answer have their link up to it;
//  2. another live primary: the one most replicas follow, then the one with
//     the most data, then the first given;
//  3. the reachable replica with the most data (highest offset), promoted
//     (a Draining one only when no staying one is reachable);
//  4. a leaving primary, when no other member can be primary.
//
// A primary no replica follows while a replica holds more data than it has
// restarted empty: it is not chosen, so that its replicas do not copy its
// empty data set. Members that are Leaving or Draining are chosen only by
// rule 4. After
// the actions no reachable member but the chosen one is a primary.
func Decide(obs []Observation, preferred string) Plan {
	byAddr := map[string]int{}
	for i, o := range obs {
		if o.Addr != "" {
			byAddr[o.Addr] = i
		}
	}
	// linked[i] counts the reachable replicas whose link to obs[i] is up.
	linked := make([]int, len(obs))
	var mostData int64 = -1 // highest offset of a staying, reachable replica
	for _, o := range obs {
		if !o.Reachable() || o.State.Role != RoleReplica {
			continue
		}
		if j, ok := byAddr[o.State.PrimaryAddr]; ok && o.State.LinkUp {
			linked[j]++
		}
		// A drained replica still holds its data (a removed one will not).
		if !o.Leaving {
			mostData = max(mostData, o.State.Offset)
		}
	}
	alive := func(i int) bool {
		if obs[i].Reachable() {
			return obs[i].State.Role == RolePrimary
		}
		return linked[i] > 0
	}
	restartedEmpty := func(i int) bool {
		return obs[i].Reachable() && linked[i] == 0 && obs[i].State.Offset < mostData
	}
	candidate := func(i int) bool { return alive(i) && !obs[i].departing() && !restartedEmpty(i) }

	if plan, ok := handover(obs, preferred); ok {
		return plan
	}
	pick, change := -1, Kept
	// A drained primary that had no caught-up replica to hand over to
	// stays primary meanwhile: promoting a replica behind its back would
	// lose what the replica has not received, and its eviction waits for
	// the handover (the Redis's PodDisruptionBudget of its primary).
	drainedWaits := false
	if i := indexOf(obs, preferred); i >= 0 && (candidate(i) ||
		alive(i) && !obs[i].Leaving && obs[i].Draining != "" && !restartedEmpty(i)) {
		pick, drainedWaits = i, !candidate(i)
	}
	if pick < 0 {
		change = Elected
		for i := range obs {
			if candidate(i) && (pick < 0 || linked[i] > linked[pick] ||
				linked[i] == linked[pick] && obs[i].State.Offset > obs[pick].State.Offset) {
				pick = i
			}
		}
	}
	if pick < 0 {
		change = Promoted
		// A staying replica first; else a drained one, which is still
		// there until its eviction (a removed one never is promoted).
		for _, ok := range []func(Observation) bool{
			func(o Observation) bool { return !o.departing() },
			func(o Observation) bool { return !o.Leaving },
		} {
			for i, o := range obs {
				if o.Reachable() && o.State.Role == RoleReplica && ok(o) &&
					(pick < 0 || o.State.Offset > obs[pick].State.Offset) {
					pick = i
				}
			}
			if pick >= 0 {
				break
			}
		}
	}
	if pick < 0 {
		change = Elected
		for i := range obs {
			if alive(i) {
				pick = i
				break
			}
		}
	}
	if pick < 0 {
		return Plan{Change: Lost, Why: lostWhy(obs, preferred)}
	}

	p := obs[pick]
	plan := Plan{Primary: p.Name, PrimaryAddr: p.Addr, Change: change}
	if change != Kept {
		plan.Why = changeWhy(obs, preferred, pick, change, restartedEmpty)
	}
	if drainedWaits {
		plan.Why = fmt.Sprintf("primary %s %s; it hands over once a replica has caught up", p.Name, p.goingWhy())
	}
	if p.Reachable() && p.State.Role == RoleReplica {
		plan.Actions = append(plan.Actions, Action{Kind: Promote, Member: p.Name, Addr: p.Addr})
	}
	plan.Actions = append(plan.Actions, repoint(obs, pick)...)
	return plan
}

// repoint makes every other reachable member replicate from obs[pick]: the
// other primaries, and the replicas of anything else.
func repoint(obs []Observation, pick int) []Action {
	var out []Action
	p := obs[pick]
	for i, o := range obs {
		if i == pick || !o.Reachable() {
			continue
		}
		if o.State.Role == RolePrimary || o.State.PrimaryAddr != p.Addr {
			out = append(out, Action{Kind: Follow, Member: o.Name, Addr: o.Addr, Primary: p.Addr})
		}
	}
	return out
}

// handover plans the planned switchover of a primary being removed (scale
// down) or drained (its node cordoned, e.g. for a reboot): while it answers as primary and a staying replica has its link up
// to it, it hands over to the one with the most data (FAILOVER waits for
// that replica to catch up, then swaps their roles), instead of a replica
// being promoted behind its back, which would lose the writes the replica
// had not received yet.
func handover(obs []Observation, preferred string) (Plan, bool) {
	i := indexOf(obs, preferred)
	if i < 0 || !obs[i].departing() || !obs[i].Reachable() || obs[i].State.Role != RolePrimary {
		return Plan{}, false
	}
	p := obs[i]
	plan := Plan{Primary: p.Name, PrimaryAddr: p.Addr, Change: HandingOver}
	// Members that follow something else (another primary, e.g. one that
	// restarted) are repointed first, as outside a handover.
	plan.Actions = repoint(obs, i)
	if p.State.FailingOver {
		plan.Why = fmt.Sprintf("primary %s %s and is handing over", p.Name, p.goingWhy())
		return plan, true
	}
	to := -1
	for j, o := range obs {
		if o.Reachable() && !o.departing() && o.State.Role == RoleReplica && o.State.PrimaryAddr == p.Addr && o.State.LinkUp &&
			(to < 0 || o.State.Offset > obs[to].State.Offset) {
			to = j
		}
	}
	if to < 0 {
		return Plan{}, false
	}
	plan.Why = fmt.Sprintf("primary %s %s; handing over to %s once it has caught up", p.Name, p.goingWhy(), obs[to].Name)
	plan.Actions = append(plan.Actions, Action{Kind: Handover, Member: p.Name, Addr: p.Addr, Primary: obs[to].Addr})
	return plan, true
}

func indexOf(obs []Observation, name string) int {
	for i, o := range obs {
		if name != "" && o.Name == name {
			return i
		}
	}
	return -1
}

// changeWhy says in a sentence why obs[pick] becomes or stays primary
// instead of preferred.
func changeWhy(obs []Observation, preferred string, pick int, change Change, restartedEmpty func(int) bool) string {
	var before string
	switch i := indexOf(obs, preferred); {
	case preferred == "":
		before = "there was no primary"
	case i < 0:
		before = fmt.Sprintf("primary %s is no longer a member", preferred)
	case restartedEmpty(i):
		before = fmt.Sprintf("primary %s restarted without its data (replication offset %d)", preferred, obs[i].State.Offset)
	case obs[i].departing():
		before = fmt.Sprintf("primary %s %s", preferred, obs[i].goingWhy())
	case obs[i].Reachable():
		before = fmt.Sprintf("%s is not primary", preferred)
	default:
		before = fmt.Sprintf("primary %s is gone (%s) and no replica is connected to it", preferred, unreachableWhy(obs[i]))
	}
	p := obs[pick]
	if change == Promoted {
		return fmt.Sprintf("%s; promoting %s, the replica with the most data (replication offset %d)", before, p.Name, p.State.Offset)
	}
	return fmt.Sprintf("%s; %s is primary", before, p.Name)
}

func lostWhy(obs []Observation, preferred string) string {
	var down []string
	for _, o := range obs {
		down = append(down, fmt.Sprintf("%s: %s", o.Name, unreachableWhy(o)))
	}
	who := "no member is primary"
	if preferred != "" {
		who = fmt.Sprintf("primary %s is gone", preferred)
	}
	if len(down) == 0 {
		return who + " and there are no members"
	}
	return fmt.Sprintf("%s and no member can be promoted (%s)", who, strings.Join(down, "; "))
}

func unreachableWhy(o Observation) string {
	switch {
	case o.Addr == "":
		return "no address"
	case o.Err != nil:
		return Describe(o.Err)
	default:
		return "being removed"
	}
}
