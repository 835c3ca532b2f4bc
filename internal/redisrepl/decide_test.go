package redisrepl

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	. "github.com/onsi/gomega"
)

var errRefused = fmt.Errorf("dial tcp: %w", syscall.ECONNREFUSED)

// Shorthands for one member's observation: m0..m3 are at a0..a3.
func primary(i int, offset int64) Observation {
	return Observation{Member: member(i), State: State{Role: RolePrimary, Offset: offset}}
}

func replica(i, of int, up bool, offset int64) Observation {
	return Observation{Member: member(i), State: State{Role: RoleReplica, PrimaryAddr: addr(of), LinkUp: up, Offset: offset}}
}

func down(i int) Observation { return Observation{Member: member(i), Err: errRefused} }

func leaving(o Observation) Observation { o.Leaving = true; return o }

func drained(o Observation) Observation { o.Draining = "node n1 is cordoned"; return o }

func member(i int) Member { return Member{Name: fmt.Sprintf("m%d", i), Addr: addr(i)} }

func addr(i int) string { return fmt.Sprintf("a%d:6379", i) }

func follow(i, of int) Action {
	return Action{Kind: Follow, Member: fmt.Sprintf("m%d", i), Addr: addr(i), Primary: addr(of)}
}

func promote(i int) Action {
	return Action{Kind: Promote, Member: fmt.Sprintf("m%d", i), Addr: addr(i)}
}

func TestDecide(t *testing.T) {
	for name, tc := range map[string]struct {
		obs       []Observation
		preferred string
		primary   string
		change    Change
		actions   []Action
		why       string
	}{
		"fresh members: the first is primary": {
			obs:     []Observation{primary(0, 0), primary(1, 0), primary(2, 0)},
			primary: "m0", change: Elected, actions: []Action{follow(1, 0), follow(2, 0)},
			why: "there was no primary; m0 is primary",
		},
		"steady: nothing to do": {
			obs:       []Observation{primary(0, 90), replica(1, 0, true, 90), replica(2, 0, true, 80)},
			preferred: "m0", primary: "m0", change: Kept,
		},
		"a replica still syncing is left to sync": {
			obs:       []Observation{primary(0, 90), replica(1, 0, false, 0)},
			preferred: "m0", primary: "m0", change: Kept,
		},
		"a member made primary by hand follows again": {
			obs:       []Observation{primary(0, 90), replica(1, 0, true, 90), primary(2, 95)},
			preferred: "m0", primary: "m0", change: Kept, actions: []Action{follow(2, 0)},
		},
		"a replica of the wrong primary is repointed": {
			obs:       []Observation{primary(0, 90), replica(1, 2, true, 90), replica(2, 0, true, 90)},
			preferred: "m0", primary: "m0", change: Kept, actions: []Action{follow(1, 0)},
		},
		"new members at scale up follow": {
			obs:       []Observation{replica(0, 1, true, 50), primary(1, 50), primary(2, 0), {Member: Member{Name: "m3"}}},
			preferred: "m1", primary: "m1", change: Kept, actions: []Action{follow(2, 1)},
		},
		"primary gone: the replica with most data is promoted": {
			obs:       []Observation{down(0), replica(1, 0, false, 70), replica(2, 0, false, 90), replica(3, 0, false, 90)},
			preferred: "m0", primary: "m2", change: Promoted,
			actions: []Action{promote(2), follow(1, 2), follow(3, 2)},
			why:     "primary m0 is gone (connection refused) and no replica is connected to it; promoting m2, the replica with the most data (replication offset 90)",
		},
		"primary pod without an address: promoted likewise": {
			obs:       []Observation{{Member: Member{Name: "m0"}}, replica(1, 0, false, 70)},
			preferred: "m0", primary: "m1", change: Promoted, actions: []Action{promote(1)},
			why: "primary m0 is gone (no address) and no replica is connected to it; promoting m1, the replica with the most data (replication offset 70)",
		},
		"primary unreachable from here but replicas reach it: kept": {
			obs:       []Observation{down(0), replica(1, 0, true, 70), replica(2, 0, false, 90), primary(3, 0)},
			preferred: "m0", primary: "m0", change: Kept, actions: []Action{follow(3, 0)},
		},
		"primary restarted empty at a new address: not kept": {
			obs:       []Observation{primary(0, 0), replica(1, 9, false, 70), replica(2, 9, false, 60)},
			preferred: "m0", primary: "m1", change: Promoted, actions: []Action{promote(1), follow(0, 1), follow(2, 1)},
			why: "primary m0 restarted without its data (replication offset 0); promoting m1, the replica with the most data (replication offset 70)",
		},
		"a promotion already done, but not remembered": {
			obs:       []Observation{primary(0, 0), primary(1, 80), replica(2, 1, true, 80)},
			preferred: "m0", primary: "m1", change: Elected, actions: []Action{follow(0, 1)},
			why: "primary m0 restarted without its data (replication offset 0); m1 is primary",
		},
		"two primaries: the one followed wins": {
			obs:     []Observation{primary(0, 10), primary(1, 10), replica(2, 1, true, 10)},
			primary: "m1", change: Elected, actions: []Action{follow(0, 1)},
			why: "there was no primary; m1 is primary",
		},
		"preferred is no longer a member": {
			obs:       []Observation{primary(0, 10), replica(1, 0, true, 10)},
			preferred: "m7", primary: "m0", change: Elected,
			why: "primary m7 is no longer a member; m0 is primary",
		},
		"scale down removes the primary: it hands over to the linked replica with the most data": {
			obs:       []Observation{replica(0, 2, true, 40), replica(1, 2, true, 50), leaving(primary(2, 50))},
			preferred: "m2", primary: "m2", change: HandingOver,
			actions: []Action{{Kind: Handover, Member: "m2", Addr: addr(2), Primary: addr(1)}},
			why:     "primary m2 is being removed; handing over to m1 once it has caught up",
		},
		"scale down while the primary hands over: wait": {
			obs: []Observation{replica(0, 2, true, 40), replica(1, 2, true, 50),
				leaving(Observation{Member: member(2), State: State{Role: RolePrimary, Offset: 50, FailingOver: true}})},
			preferred: "m2", primary: "m2", change: HandingOver,
			why: "primary m2 is being removed and is handing over",
		},
		"scale down removes the primary, no replica linked to it: a staying replica is promoted": {
			obs:       []Observation{replica(0, 2, false, 40), replica(1, 2, false, 50), leaving(primary(2, 50))},
			preferred: "m2", primary: "m1", change: Promoted, actions: []Action{promote(1), follow(0, 1), follow(2, 1)},
			why: "primary m2 is being removed; promoting m1, the replica with the most data (replication offset 50)",
		},
		"scale down when only leaving members answer: keep the leaving primary": {
			obs:       []Observation{down(0), leaving(primary(1, 50)), leaving(replica(2, 1, true, 50))},
			preferred: "m1", primary: "m1", change: Elected,
			why: "primary m1 is being removed; m1 is primary",
		},
		"the primary's node is drained: it hands over to the linked staying replica with the most data": {
			obs:       []Observation{replica(0, 2, true, 40), drained(replica(1, 2, true, 50)), drained(primary(2, 50))},
			preferred: "m2", primary: "m2", change: HandingOver,
			actions: []Action{{Kind: Handover, Member: "m2", Addr: addr(2), Primary: addr(0)}},
			why:     "primary m2 is about to be evicted (node n1 is cordoned); handing over to m0 once it has caught up",
		},
		"the primary's node is drained, no replica caught up: it stays primary until one has": {
			obs:       []Observation{replica(0, 1, false, 40), replica(1, 2, false, 10), drained(primary(2, 50))},
			preferred: "m2", primary: "m2", change: Kept, actions: []Action{follow(0, 2)},
			why: "primary m2 is about to be evicted (node n1 is cordoned); it hands over once a replica has caught up",
		},
		"a drained primary restarted empty is not kept": {
			obs:       []Observation{replica(0, 2, false, 40), drained(primary(2, 0))},
			preferred: "m2", primary: "m0", change: Promoted, actions: []Action{promote(0), follow(2, 0)},
			why: "primary m2 restarted without its data (replication offset 0); promoting m0, the replica with the most data (replication offset 40)",
		},
		"the primary is gone and only a drained replica answers: it is promoted, not lost": {
			obs:       []Observation{down(0), drained(replica(1, 0, false, 50)), leaving(replica(2, 0, false, 60))},
			preferred: "m0", primary: "m1", change: Promoted, actions: []Action{promote(1), follow(2, 1)},
			why: "primary m0 is gone (connection refused) and no replica is connected to it; promoting m1, the replica with the most data (replication offset 50)",
		},
		"a drained replica is not promoted while a staying one answers": {
			obs:       []Observation{down(0), drained(replica(1, 0, false, 90)), replica(2, 0, false, 60)},
			preferred: "m0", primary: "m2", change: Promoted, actions: []Action{promote(2), follow(1, 2)},
			why: "primary m0 is gone (connection refused) and no replica is connected to it; promoting m2, the replica with the most data (replication offset 60)",
		},
		"nothing reachable: primary lost, nothing done": {
			obs:       []Observation{down(0), down(1), {Member: Member{Name: "m2"}}},
			preferred: "m0", change: Lost,
			why: "primary m0 is gone and no member can be promoted (m0: connection refused; m1: connection refused; m2: no address)",
		},
		"no members": {change: Lost, why: "no member is primary and there are no members"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			plan := Decide(tc.obs, tc.preferred)
			g.Expect(plan.Primary).To(Equal(tc.primary))
			g.Expect(plan.Change).To(Equal(tc.change))
			g.Expect(plan.Actions).To(Equal(tc.actions))
			g.Expect(plan.Why).To(Equal(tc.why))
		})
	}
}

// FuzzDecide checks, on any topology, what a user relies on: after the
// plan is carried out no two reachable members are primaries, every other
// reachable member replicates from the one primary, at most one member is
// promoted, and there is a primary whenever a staying member answers.
func FuzzDecide(f *testing.F) {
	f.Add([]byte{3, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add([]byte{4, 1, 255, 0, 7, 64, 3, 200, 9, 1, 2, 130, 77, 5, 6, 9, 11, 99, 4, 40})
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() int {
			if len(data) == 0 {
				return 0
			}
			b := int(data[0])
			data = data[1:]
			return b
		}
		n := next()%6 + 1
		preferred := fmt.Sprintf("m%d", next()%(n+1))
		obs := make([]Observation, n)
		for i := range obs {
			flags, of, offset := next(), next()%(n+1), int64(next()%4)
			o := Observation{Member: member(i)}
			switch {
			case flags&3 == 0:
				o.Addr = ""
			case flags&3 == 1:
				o.Err = errors.New("unreachable")
			case flags&4 == 0:
				o.State = State{Role: RolePrimary, Offset: offset}
			default:
				o.State = State{Role: RoleReplica, PrimaryAddr: addr(of), LinkUp: flags&8 != 0, Offset: offset}
			}
			o.Leaving = flags&16 != 0
			if flags&32 != 0 {
				o.Draining = "cordoned"
			}
			obs[i] = o
		}

		plan := Decide(obs, preferred)
		after := make([]Observation, n)
		copy(after, obs)
		promotions := 0
		for _, a := range plan.Actions {
			i := indexOf(after, a.Member)
			if i < 0 || !after[i].Reachable() {
				t.Fatalf("action on a member that cannot be reached: %v", a)
			}
			switch a.Kind {
			case Handover:
				// The primary stays primary until its replica has caught
				// up; the swap happens after the plan.
			case Promote:
				promotions++
				after[i].State = State{Role: RolePrimary}
			default:
				after[i].State = State{Role: RoleReplica, PrimaryAddr: a.Primary}
			}
		}
		if promotions > 1 {
			t.Fatalf("%d promotions: %v", promotions, plan.Actions)
		}
		staying := false
		for _, o := range after {
			if !o.Reachable() {
				continue
			}
			staying = staying || !o.Leaving
			if plan.Primary == "" {
				continue
			}
			if o.Name == plan.Primary {
				if o.State.Role != RolePrimary {
					t.Fatalf("primary %s is a replica after the plan %v", o.Name, plan.Actions)
				}
				continue
			}
			if o.State.Role != RoleReplica || o.State.PrimaryAddr != plan.PrimaryAddr {
				t.Fatalf("%s does not replicate from primary %s after the plan %v: %+v", o.Name, plan.Primary, plan.Actions, o.State)
			}
		}
		if staying && plan.Primary == "" {
			t.Fatalf("no primary though a staying member answers: %+v", obs)
		}
		if (plan.Primary == "") != (plan.Change == Lost) {
			t.Fatalf("primary %q with change %s", plan.Primary, plan.Change)
		}
	})
}

func TestDescribe(t *testing.T) {
	for err, want := range map[error]string{
		fmt.Errorf("dial tcp 10.0.0.1:6379: %w", syscall.ECONNREFUSED):         "connection refused",
		fmt.Errorf("dial tcp 10.0.0.1:6379: %w", syscall.EHOSTUNREACH):         "no route to host",
		fmt.Errorf("dial tcp: %w", context.DeadlineExceeded):                   "timed out",
		errors.New("WRONGPASS invalid username-password pair"):                 "wrong password",
		errors.New("NOAUTH Authentication required"):                           "password required",
		errors.New(`redis: can't parse map reply: "HTTP/1.1 400 Bad Request"`): "not a Redis server",
		errors.New("ERR something else"):                                       "ERR something else",
	} {
		NewWithT(t).Expect(Describe(err)).To(Equal(want))
	}
}

func TestReplicationState(t *testing.T) {
	g := NewWithT(t)
	s, err := replicationState(map[string]string{"role": "slave", "master_host": "10.0.0.5", "master_port": "6379",
		"master_link_status": "up", "slave_repl_offset": "1234", "master_repl_offset": "1300"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s).To(Equal(State{Role: RoleReplica, PrimaryAddr: "10.0.0.5:6379", LinkUp: true, Offset: 1234}))
	s, err = replicationState(map[string]string{"role": "master", "connected_slaves": "0", "master_repl_offset": "77"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s).To(Equal(State{Role: RolePrimary, Offset: 77}))
	s, err = replicationState(map[string]string{"role": "master", "master_repl_offset": "77", "master_failover_state": "waiting-for-sync"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.FailingOver).To(BeTrue())
	// A replica that never synced holds nothing.
	s, err = replicationState(map[string]string{"role": "slave", "master_host": "127.0.0.1", "master_port": "1",
		"master_link_status": "down", "slave_repl_offset": "1", "master_repl_offset": "0"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Offset).To(BeZero())
	// A primary silent for longer than MaxLinkSilence: the link is down.
	replica := func(silence string) map[string]string {
		return map[string]string{"role": "slave", "master_host": "10.0.0.5", "master_port": "6379",
			"master_link_status": "up", "master_last_io_seconds_ago": silence, "slave_repl_offset": "9"}
	}
	s, err = replicationState(replica("2"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.LinkUp).To(BeFalse())
	s, err = replicationState(replica("1"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.LinkUp).To(BeTrue())
	_, err = replicationState(map[string]string{"role": "sentinel"})
	g.Expect(err).To(MatchError(`INFO replication: unknown role "sentinel"`))
	_, err = replicationState(map[string]string{"role": "master"})
	g.Expect(err).To(MatchError(ContainSubstring("master_repl_offset")))
	_, err = replicationState(nil)
	g.Expect(err).To(HaveOccurred(), "no Replication section")
}
