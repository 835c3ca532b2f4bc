package redisrepl

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/redis/go-redis/v9"
)

// These tests run real redis-server processes on loopback (Debian package
// redis-server; .ci/run installs it). waitFor bounds every wait.
const waitFor = 20 * time.Second

// server is one redis-server process of a test.
type server struct {
	t        *testing.T
	name     string
	addr     string
	password string
	cmd      *exec.Cmd
}

// startServer starts a redis-server on a free loopback port, without
// persistence, in its own temporary directory; it is killed when the test
// ends.
func startServer(t *testing.T, name, password string) *server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		// Not a skip: these tests are the proof that replication works.
		t.Fatal("redis-server is not installed: run `make test-deps` as root, or apt-get install -y redis-server")
	}
	s := &server{t: t, name: name, password: password}
	s.start(t, bin, freePort(t))
	return s
}

func (s *server) start(t *testing.T, bin string, port int) {
	t.Helper()
	s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	dir := t.TempDir()
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"), "--daemonize", "no", "--loglevel", "notice",
		// Quick retries of a lost link keep the waits short.
		"--repl-timeout", "5", "--repl-diskless-sync-delay", "0"}
	if s.password != "" {
		args = append(args, "--requirepass", s.password)
	}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stderr = os.Stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmd, name := s.cmd, s.name
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			t.Logf("log of %s (%s):\n%s", name, s.addr, log)
		}
	})
	NewWithT(t).Eventually(func() error {
		return s.client().Ping(context.Background()).Err()
	}, waitFor, 20*time.Millisecond).Should(Succeed(), "redis-server %s did not start", s.name)
}

// kill stops the server at once, as a crashed pod.
func (s *server) kill() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// replace kills the server and starts a new, empty one of the same name
// on another port, as a pod recreated with a new IP address.
func (s *server) replace() {
	s.kill()
	bin, _ := exec.LookPath("redis-server")
	s.start(s.t, bin, freePort(s.t))
}

func (s *server) client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr, Password: s.password, Protocol: 2, DisableIdentity: true,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, MaxRetries: -1})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (s *server) member() Member { return Member{Name: s.name, Addr: s.addr} }

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// group is the servers of one test and the manager's view of them.
type group struct {
	t       *testing.T
	g       *WithT
	ctx     context.Context
	c       Client
	servers []*server
	primary string // what the caller remembers, as the controller's status
}

func newGroup(t *testing.T, n int, password string) *group {
	gr := &group{t: t, g: NewWithT(t), ctx: context.Background(), c: Redis{Password: password, Timeout: 500 * time.Millisecond}}
	for i := range n {
		gr.servers = append(gr.servers, startServer(t, fmt.Sprintf("redis-%d", i), password))
	}
	return gr
}

func (gr *group) members() []Member {
	var ms []Member
	for _, s := range gr.servers {
		ms = append(ms, s.member())
	}
	return ms
}

// reconcile runs one round and remembers the primary, as the controller
// does in its status.
func (gr *group) reconcile(members []Member) Result {
	gr.t.Helper()
	res := Reconcile(gr.ctx, gr.c, members, gr.primary)
	gr.g.Expect(res.Err).NotTo(HaveOccurred())
	if res.Plan.Primary != "" {
		gr.primary = res.Plan.Primary
	}
	return res
}

// converge runs rounds until every member reachable replicates from one
// primary with its link up, and returns the primary's name.
func (gr *group) converge(members []Member) string {
	gr.t.Helper()
	gr.g.Eventually(func(g Gomega) {
		res := gr.reconcile(members)
		g.Expect(res.Plan.Primary).NotTo(BeEmpty())
		g.Expect(res.Plan.Actions).To(BeEmpty(), "still acting")
		primaries := 0
		for _, o := range res.Observations {
			g.Expect(o.Err).NotTo(HaveOccurred())
			if o.State.Role == RolePrimary {
				primaries++
				continue
			}
			g.Expect(o.State.PrimaryAddr).To(Equal(res.Plan.PrimaryAddr), o.Name)
			g.Expect(o.State.LinkUp).To(BeTrue(), "%s link", o.Name)
		}
		g.Expect(primaries).To(Equal(1))
	}, waitFor, 100*time.Millisecond).Should(Succeed())
	return gr.primary
}

func (gr *group) server(name string) *server {
	for _, s := range gr.servers {
		if s.name == name {
			return s
		}
	}
	gr.t.Fatalf("no server %s", name)
	return nil
}

// replicated waits until key reads value on every named server.
func (gr *group) replicated(key, value string, names ...string) {
	gr.t.Helper()
	for _, n := range names {
		c := gr.server(n).client()
		gr.g.Eventually(func() (string, error) { return c.Get(gr.ctx, key).Result() }, waitFor, 20*time.Millisecond).
			Should(Equal(value), "%s on %s", key, n)
	}
}

func (gr *group) set(name, key, value string) {
	gr.t.Helper()
	gr.g.Expect(gr.server(name).client().Set(gr.ctx, key, value, 0).Err()).To(Succeed())
}

func (gr *group) offset(name string) int64 {
	gr.t.Helper()
	st, err := gr.c.Observe(gr.ctx, gr.server(name).member())
	gr.g.Expect(err).NotTo(HaveOccurred())
	return st.Offset
}

func TestInitialSetup(t *testing.T) {
	gr := newGroup(t, 3, "")
	// Three fresh servers are three primaries: the first one stays.
	res := gr.reconcile(gr.members())
	gr.g.Expect(res.Plan.Primary).To(Equal("redis-0"))
	gr.g.Expect(res.Plan.Change).To(Equal(Elected))
	gr.g.Expect(res.Done).To(HaveLen(2))

	gr.g.Expect(gr.converge(gr.members())).To(Equal("redis-0"))
	gr.set("redis-0", "greeting", "hello")
	gr.replicated("greeting", "hello", "redis-1", "redis-2")
	err := gr.server("redis-1").client().Set(gr.ctx, "k", "v", 0).Err()
	gr.g.Expect(err).To(MatchError(ContainSubstring("READONLY")), "replicas refuse writes")

	// Nothing to change: nothing done.
	res = gr.reconcile(gr.members())
	gr.g.Expect(res.Plan.Change).To(Equal(Kept))
	gr.g.Expect(res.Done).To(BeEmpty())
}

func TestPrimaryKilledPromotesTheReplicaWithMostData(t *testing.T) {
	gr := newGroup(t, 4, "")
	gr.g.Expect(gr.converge(gr.members())).To(Equal("redis-0"))
	gr.set("redis-0", "before", "1")
	gr.replicated("before", "1", "redis-1", "redis-2", "redis-3")

	// redis-1 falls behind: its link is down (to an address where nobody
	// listens) while the primary takes more writes.
	dead := strconv.Itoa(freePort(t))
	gr.g.Expect(gr.server("redis-1").client().ReplicaOf(gr.ctx, "127.0.0.1", dead).Err()).To(Succeed())
	for i := range 100 {
		gr.set("redis-0", fmt.Sprintf("key-%d", i), "x")
	}
	gr.replicated("key-99", "x", "redis-2", "redis-3")
	gr.g.Eventually(func() int64 { return gr.offset("redis-2") }, waitFor).Should(Equal(gr.offset("redis-0")))
	gr.g.Eventually(func() int64 { return gr.offset("redis-3") }, waitFor).Should(Equal(gr.offset("redis-0")))
	gr.server("redis-0").kill()

	res := gr.reconcile(gr.members())
	gr.g.Expect(res.Plan.Change).To(Equal(Promoted), res.Plan.Why)
	// redis-2 and redis-3 hold the same data, more than redis-1: the first wins.
	gr.g.Expect(res.Plan.Primary).To(Equal("redis-2"), res.Plan.Why)
	gr.g.Expect(res.Plan.Why).To(ContainSubstring("primary redis-0 is gone (connection refused)"))
	gr.g.Expect(res.Done[0]).To(Equal(Action{Kind: Promote, Member: "redis-2", Addr: gr.server("redis-2").addr}))

	alive := gr.members()[1:]
	gr.g.Expect(gr.converge(alive)).To(Equal("redis-2"))
	gr.replicated("key-99", "x", "redis-1", "redis-3")
	gr.set("redis-2", "after", "2")
	gr.replicated("after", "2", "redis-1", "redis-3")
}

func TestPrimaryRestartedEmptyIsNotKept(t *testing.T) {
	gr := newGroup(t, 3, "")
	gr.g.Expect(gr.converge(gr.members())).To(Equal("redis-0"))
	gr.set("redis-0", "precious", "data")
	gr.replicated("precious", "data", "redis-1", "redis-2")

	// The primary's pod is recreated before anyone noticed: same name, new
	// address, no data (no persistence).
	gr.server("redis-0").replace()
	res := gr.reconcile(gr.members())
	gr.g.Expect(res.Plan.Change).To(Equal(Promoted), res.Plan.Why)
	gr.g.Expect(res.Plan.Primary).To(Equal("redis-1"))
	gr.g.Expect(res.Plan.Why).To(ContainSubstring("restarted without its data"))
	gr.g.Expect(gr.converge(gr.members())).To(Equal("redis-1"))
	gr.replicated("precious", "data", "redis-0", "redis-2")
}

func TestScaleUpAndDown(t *testing.T) {
	gr := newGroup(t, 2, "")
	gr.g.Expect(gr.converge(gr.members())).To(Equal("redis-0"))
	gr.set("redis-0", "k", "v")

	// Two new, empty members: they replicate from the primary.
	gr.servers = append(gr.servers, startServer(t, "redis-2", ""), startServer(t, "redis-3", ""))
	res := gr.reconcile(gr.members())
	gr.g.Expect(res.Plan.Change).To(Equal(Kept))
	gr.g.Expect(res.Done).To(ConsistOf(
		Action{Kind: Follow, Member: "redis-2", Addr: gr.server("redis-2").addr, Primary: gr.server("redis-0").addr},
		Action{Kind: Follow, Member: "redis-3", Addr: gr.server("redis-3").addr, Primary: gr.server("redis-0").addr}))
	gr.converge(gr.members())
	gr.replicated("k", "v", "redis-2", "redis-3")

	// Down to 3: redis-3 is removed; the others go on.
	members := gr.members()[:3]
	gr.server("redis-3").kill()
	gr.g.Expect(gr.converge(members)).To(Equal("redis-0"))

	// Down to 1 while the primary is the member being removed: a staying
	// member takes over first.
	gr.primary = "redis-2"
	gr.g.Expect(gr.server("redis-2").client().ReplicaOf(gr.ctx, "NO", "ONE").Err()).To(Succeed())
	gr.converge(members)
	gr.g.Expect(gr.primary).To(Equal("redis-2"))
	members[1].Leaving, members[2].Leaving = true, true
	// Writes keep coming to the primary while it hands over: every one it
	// acknowledged is on the new primary, none is lost.
	writer := gr.server("redis-2").client()
	acked := make(chan int, 1)
	go func() {
		n := 0
		for ; n < 100000; n++ {
			if writer.Set(gr.ctx, fmt.Sprintf("seq-%d", n), n, 0).Err() != nil {
				break // READONLY: it is a replica now
			}
		}
		acked <- n
	}()
	time.Sleep(50 * time.Millisecond)
	res = gr.reconcile(members)
	gr.g.Expect(res.Plan.Change).To(Equal(HandingOver), res.Plan.Why)
	gr.g.Expect(res.Plan.Primary).To(Equal("redis-2"), "primary until the replica has taken over")
	gr.g.Expect(res.Plan.Why).To(Equal("primary redis-2 is being removed; handing over to redis-0 once it has caught up"))
	gr.g.Expect(res.Done).To(Equal([]Action{{Kind: Handover, Member: "redis-2", Addr: gr.server("redis-2").addr, Primary: gr.server("redis-0").addr}}))
	var n int
	gr.g.Eventually(acked, waitFor).Should(Receive(&n))
	gr.g.Expect(n).To(BeNumerically(">", 0))
	gr.g.Expect(gr.converge(members)).To(Equal("redis-0"))
	gr.replicated(fmt.Sprintf("seq-%d", n-1), strconv.Itoa(n-1), "redis-0")
	gr.g.Expect(gr.server("redis-0").client().DBSize(gr.ctx).Val()).To(BeNumerically(">=", n+1))
	gr.set("redis-0", "after", "handover")
	gr.replicated("after", "handover", "redis-1", "redis-2")
}

// A primary being removed with no replica linked to it is not handed over
// (nobody could catch up): a staying member is promoted as before.
func TestLeavingPrimaryWithoutLinkedReplica(t *testing.T) {
	gr := newGroup(t, 2, "")
	gr.primary = "redis-1"
	gr.g.Expect(gr.converge(gr.members())).To(Equal("redis-1"))
	dead := strconv.Itoa(freePort(t))
	gr.g.Expect(gr.server("redis-0").client().ReplicaOf(gr.ctx, "127.0.0.1", dead).Err()).To(Succeed())
	members := gr.members()
	members[1].Leaving = true
	res := gr.reconcile(members)
	gr.g.Expect(res.Plan.Change).To(Equal(Promoted), res.Plan.Why)
	gr.g.Expect(res.Plan.Primary).To(Equal("redis-0"))
}

func TestPrimaryMadeByHandIsRepointed(t *testing.T) {
	gr := newGroup(t, 3, "")
	gr.g.Expect(gr.converge(gr.members())).To(Equal("redis-0"))

	// Someone runs REPLICAOF NO ONE on a replica and writes to it.
	rogue := gr.server("redis-2").client()
	gr.g.Expect(rogue.ReplicaOf(gr.ctx, "NO", "ONE").Err()).To(Succeed())
	gr.g.Expect(rogue.Set(gr.ctx, "stray", "write", 0).Err()).To(Succeed())

	res := gr.reconcile(gr.members())
	gr.g.Expect(res.Plan.Change).To(Equal(Kept))
	gr.g.Expect(res.Plan.Primary).To(Equal("redis-0"))
	gr.g.Expect(res.Done).To(Equal([]Action{{Kind: Follow, Member: "redis-2", Addr: gr.server("redis-2").addr, Primary: gr.server("redis-0").addr}}))
	gr.g.Expect(gr.converge(gr.members())).To(Equal("redis-0"))
	// It holds the primary's data again, not the stray write.
	gr.g.Eventually(func() error { return rogue.Get(gr.ctx, "stray").Err() }, waitFor).Should(MatchError(redis.Nil))
}

func TestWithPassword(t *testing.T) {
	gr := newGroup(t, 3, "s3cret pass")
	gr.g.Expect(gr.converge(gr.members())).To(Equal("redis-0"))
	gr.set("redis-0", "k", "v")
	gr.replicated("k", "v", "redis-1", "redis-2")

	gr.server("redis-0").kill()
	gr.g.Expect(gr.converge(gr.members()[1:])).To(Equal("redis-1"))
	gr.set("redis-1", "k", "v2")
	gr.replicated("k", "v2", "redis-2")

	// Without the password a member cannot be observed, and says why.
	_, err := Redis{}.Observe(gr.ctx, gr.server("redis-1").member())
	gr.g.Expect(err).To(HaveOccurred())
	gr.g.Expect(Describe(err)).To(Equal("password required"))
	_, err = Redis{Password: "wrong"}.Observe(gr.ctx, gr.server("redis-1").member())
	gr.g.Expect(Describe(err)).To(Equal("wrong password"))
}

func TestUnreachableMembersDoNotBlock(t *testing.T) {
	gr := newGroup(t, 2, "")
	// 192.0.2.1 (TEST-NET-1) does not answer; a closed local port refuses.
	members := append(gr.members(),
		Member{Name: "redis-2", Addr: "192.0.2.1:6379"},
		Member{Name: "redis-3", Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))},
		Member{Name: "redis-4"})
	start := time.Now()
	res := gr.reconcile(members)
	gr.g.Expect(time.Since(start)).To(BeNumerically("<", 3*time.Second), "one timeout, not one per member")
	gr.g.Expect(res.Plan.Primary).To(Equal("redis-0"))
	// Where no route leads out, the documentation address is refused.
	gr.g.Expect(Describe(res.Observations[2].Err)).To(BeElementOf("timed out", "no route to host", "connection refused"))
	gr.g.Expect(Describe(res.Observations[3].Err)).To(Equal("connection refused"))
	gr.g.Expect(res.Observations[4].Reachable()).To(BeFalse())
	gr.converge(members[:2])
}

func TestNoMemberReachable(t *testing.T) {
	res := Reconcile(context.Background(), Redis{Timeout: 200 * time.Millisecond},
		[]Member{{Name: "redis-0", Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))}, {Name: "redis-1"}}, "redis-0")
	g := NewWithT(t)
	g.Expect(res.Plan.Change).To(Equal(Lost))
	g.Expect(res.Plan.Why).To(Equal("primary redis-0 is gone and no member can be promoted (redis-0: connection refused; redis-1: no address)"))
	g.Expect(res.Done).To(BeEmpty())
}

// A handover holds the primary's writes only as long as its target takes
// to acknowledge them, not until the target's next once-a-second ACK:
// Handover asks the target for it (REPLCONF GETACK, after AUTH).
func TestHandoverIsHurried(t *testing.T) {
	gr := newGroup(t, 2, "s3cret pass")
	gr.g.Expect(gr.converge(gr.members())).To(Equal("redis-0"))
	// As the operator starts its members (--masterauth): a primary that
	// hands over follows its target, which wants the password.
	for _, s := range gr.servers {
		gr.g.Expect(s.client().ConfigSet(gr.ctx, "masterauth", s.password).Err()).To(Succeed())
	}
	for i, to := range []string{"redis-1", "redis-0", "redis-1"} {
		from := gr.primary
		// Writes keep coming, so that the target has something to catch up.
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			w := gr.server(from).client()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if w.Set(gr.ctx, fmt.Sprintf("k-%d-%d", i, n), n, 0).Err() != nil {
					return // READONLY once it has handed over
				}
			}
		}()
		time.Sleep(50 * time.Millisecond)
		start := time.Now()
		gr.g.Expect(gr.c.Handover(gr.ctx, gr.server(from).addr, gr.server(to).addr)).To(Succeed())
		gr.g.Eventually(func() Role {
			st, err := gr.c.Observe(gr.ctx, gr.server(to).member())
			gr.g.Expect(err).NotTo(HaveOccurred())
			return st.Role
		}, waitFor, 5*time.Millisecond).Should(Equal(RolePrimary))
		took := time.Since(start)
		close(stop)
		<-done
		gr.g.Expect(took).To(BeNumerically("<", 300*time.Millisecond), "handover %d from %s to %s", i+1, from, to)
		gr.g.Expect(gr.converge(gr.members())).To(Equal(to))
	}
}
