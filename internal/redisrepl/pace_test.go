package redisrepl

import (
	"context"
	"net"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestPace(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type round struct {
		obs []Observation
		at  time.Duration
		// After the round: the members Mark makes Unanswered, and whether
		// the primary "m0" must be observed again at once.
		unanswered []string
		urgent     bool
	}
	for name, rounds := range map[string][]round{
		"every member answers: nothing to hurry": {
			{obs: []Observation{primary(0, 9), replica(1, 0, true, 9)}, at: 0},
			{obs: []Observation{primary(0, 9), replica(1, 0, true, 9)}, at: time.Second},
		},
		"the primary stops answering: urgent until it answers again": {
			{obs: []Observation{primary(0, 9), replica(1, 0, true, 9)}, at: 0},
			{obs: []Observation{down(0), replica(1, 0, true, 9)}, at: time.Second,
				unanswered: []string{"m0"}, urgent: true},
			{obs: []Observation{down(0), replica(1, 0, true, 9)}, at: 1300 * time.Millisecond,
				unanswered: []string{"m0"}, urgent: true},
			{obs: []Observation{primary(0, 9), replica(1, 0, true, 9)}, at: 1600 * time.Millisecond},
		},
		"a primary silent for UrgentFor is observed at the usual pace": {
			{obs: []Observation{down(0), replica(1, 0, true, 9)}, at: 0,
				unanswered: []string{"m0"}, urgent: true},
			{obs: []Observation{down(0), replica(1, 0, true, 9)}, at: UrgentFor - time.Millisecond,
				unanswered: []string{"m0"}, urgent: true},
			{obs: []Observation{down(0), replica(1, 0, true, 9)}, at: UrgentFor,
				unanswered: []string{"m0"}},
			// Once it has answered, its next silence is urgent again.
			{obs: []Observation{primary(0, 9), replica(1, 0, true, 9)}, at: UrgentFor + time.Second},
			{obs: []Observation{down(0), replica(1, 0, true, 9)}, at: UrgentFor + 2*time.Second,
				unanswered: []string{"m0"}, urgent: true},
		},
		"a primary without an address is as silent": {
			{obs: []Observation{{Member: Member{Name: "m0"}}, replica(1, 0, true, 9)}, at: 0,
				unanswered: []string{"m0"}, urgent: true},
		},
		"a replica that does not answer is dialled briefly but hurries nothing": {
			{obs: []Observation{primary(0, 9), down(1), down(2)}, at: 0, unanswered: []string{"m1", "m2"}},
			{obs: []Observation{primary(0, 9), replica(1, 0, true, 9), down(2)}, at: time.Second, unanswered: []string{"m2"}},
		},
		"members no longer observed are forgotten": {
			{obs: []Observation{down(0), down(1), replica(2, 0, true, 9)}, at: 0,
				unanswered: []string{"m0", "m1"}, urgent: true},
			{obs: []Observation{replica(2, 0, true, 9)}, at: time.Second},
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			var p Pace
			for i, r := range rounds {
				p = p.After(r.obs, at(r.at))
				members := []Member{member(0), member(1), member(2), member(3)}
				var unanswered []string
				for _, m := range p.Mark(members) {
					if m.Unanswered {
						unanswered = append(unanswered, m.Name)
					}
				}
				g.Expect(unanswered).To(Equal(r.unanswered), "round %d: unanswered", i)
				g.Expect(p.Urgent("m0", at(r.at))).To(Equal(r.urgent), "round %d: urgent", i)
				g.Expect(members[0].Unanswered).To(BeFalse(), "Mark changes a copy")
			}
			g.Expect(p.Urgent("", at(rounds[len(rounds)-1].at))).To(BeFalse(), "no primary, nothing to hurry")
		})
	}
}

// A member that did not answer its last observation costs a round
// UnansweredDialTimeout, one that did DialTimeout, however long the
// command timeout.
func TestUnansweredMemberIsDialledBriefly(t *testing.T) {
	g := NewWithT(t)
	gone := Member{Name: "m0", Addr: unansweringAddr(t)}
	c := Redis{Timeout: 5 * time.Second}
	took := func(m Member) time.Duration {
		start := time.Now()
		_, err := c.Observe(context.Background(), m)
		g.Expect(err).To(HaveOccurred())
		g.Expect(Describe(err)).To(Equal("timed out"))
		return time.Since(start)
	}
	g.Expect(took(gone)).To(BeNumerically("~", DialTimeout, 300*time.Millisecond))
	gone.Unanswered = true
	g.Expect(took(gone)).To(BeNumerically("~", UnansweredDialTimeout, 150*time.Millisecond))

	// The dial is short, not the command: a live Redis that is busy (a
	// script running for 600 ms, longer than the dial timeout) is waited
	// for.
	busy := startServer(t, "busy", "")
	script := make(chan error, 1)
	go func() {
		script <- busy.client().Eval(context.Background(), `local s = redis.call('TIME')
			repeat local n = redis.call('TIME') until (n[1] - s[1]) * 1000000 + n[2] - s[2] > 600000
			return 1`, nil).Err()
	}()
	time.Sleep(100 * time.Millisecond) // the script has started
	start := time.Now()
	st, err := c.Observe(context.Background(), Member{Name: "busy", Addr: busy.addr, Unanswered: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Role).To(Equal(RolePrimary))
	g.Expect(time.Since(start)).To(BeNumerically(">", UnansweredDialTimeout), "the script held the answer")
	g.Expect(<-script).To(Succeed())
}

// unansweringAddr returns a local address whose dials go unanswered, as a
// lost node's: a socket listening with a backlog of 0 whose accept queue is
// already full (one connection never accepted), so that the kernel drops
// every further SYN.
func unansweringAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	// Fill the accept queue; stop at the first dial that gets no answer.
	for range 4 {
		conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return addr
		}
		t.Cleanup(func() { conn.Close() })
	}
	t.Skip("the kernel accepts connections beyond a full backlog here: no address to time out on")
	return ""
}

// timeline is a Client that records when each observation starts and
// ends; a member that did not answer last time takes 50 ms to fail again.
type timeline struct {
	mu     sync.Mutex
	events []string
}

func (c *timeline) log(e string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, e)
}

func (c *timeline) Observe(_ context.Context, m Member) (State, error) {
	c.log("ask " + m.Name)
	if m.Unanswered {
		time.Sleep(50 * time.Millisecond)
		c.log("no answer from " + m.Name)
		return State{}, errRefused
	}
	c.log(m.Name + " answers")
	return State{Role: RoleReplica, PrimaryAddr: addr(0)}, nil
}

func (c *timeline) Promote(context.Context, string) error          { return nil }
func (c *timeline) Follow(context.Context, string, string) error   { return nil }
func (c *timeline) Handover(context.Context, string, string) error { return nil }

// The replicas of a primary that did not answer last time are asked once
// its dial has failed again: their word on their link is the freshest the
// round can have, and comes after the primary was found unreachable.
func TestUnansweredMembersAreAskedFirst(t *testing.T) {
	g := NewWithT(t)
	c := &timeline{}
	m0 := member(0)
	m0.Unanswered = true
	obs := Observe(context.Background(), c, []Member{member(1), m0, member(2), {Name: "m3"}})
	g.Expect(c.events[:2]).To(Equal([]string{"ask m0", "no answer from m0"}))
	g.Expect(c.events[2:]).To(ConsistOf("ask m1", "m1 answers", "ask m2", "m2 answers"))
	g.Expect(obs[1].Err).To(MatchError(errRefused))
	g.Expect(obs[0].State.PrimaryAddr).To(Equal(addr(0)))
	g.Expect(obs[3].Reachable()).To(BeFalse(), "no address, not asked")

	// Without a member to hurry, all are asked at once.
	c = &timeline{}
	Observe(context.Background(), c, []Member{member(1), member(2)})
	g.Expect(c.events).To(HaveLen(4))
}
