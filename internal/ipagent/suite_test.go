package ipagent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/agentkube"
	"github.com/kubext/kubext/internal/netconf"
	"github.com/kubext/kubext/test/testenv"
)

const (
	// thisNode is the node the agent under test runs on.
	thisNode = "node-a"
	// otherNode is any other node.
	otherNode = "node-b"
	// uplink is the interface the agent is configured with.
	uplink = "eth-test"
	// resync is short so that drift (a removal the kernel has not finished)
	// is re-checked within a test's patience.
	resync = 200 * time.Millisecond
)

var (
	k8s   client.Client // direct, uncached
	agent *Reconciler
	dp    = newFakeDataplane(thisNode)
	lease = &fakeLease{}
	// witnesses is the agent's peer in the witness protocol, as the tests
	// want it.
	witnesses = newFakeWitnesses()
	// testEnv is the API server, for tests that need their own clients.
	testEnv *testenv.Env
	// agentScheme is the agent's (Scheme).
	agentScheme *runtime.Scheme
)

func TestMain(m *testing.M) {
	testenv.Main(m, func(ctx context.Context, env *testenv.Env) error {
		testEnv = env
		return startAgent(ctx, env)
	})
}

// startAgent runs the agent of thisNode as cmd/ip-agent wires it, with a
// fake kernel and a Lease the tests hold or drop.
func startAgent(ctx context.Context, env *testenv.Env) error {
	// The tests' own client knows every built-in kind; the agent only its.
	all := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, ipv1.AddToScheme} {
		if err := add(all); err != nil {
			return err
		}
	}
	var err error
	if k8s, err = client.New(env.Config, client.Options{Scheme: all}); err != nil {
		return err
	}
	if agentScheme, err = Scheme(); err != nil {
		return err
	}
	c, err := agentkube.New(env.Config, agentScheme)
	if err != nil {
		return err
	}
	recorder := c.NewRecorder("ip-agent", logr.Discard())
	go func() { _ = recorder.Run(ctx) }()
	lease.held.Store(true)
	agent = &Reconciler{
		Client:    checkedClient{Client: c, d: dp},
		Recorder:  recorder,
		Log:       ctrl.Log.WithName("ip-agent").WithValues("node", thisNode),
		Node:      thisNode,
		Dataplane: dp,
		Lease:     lease,
		Interface: uplink,
		Resync:    resync,
		// IPs that name witnesses are held on their word (witness_test.go).
		Witness: &WitnessConfig{Peer: witnesses, Port: 7946, Nodes: c},
	}
	if err := agent.Setup(); err != nil {
		return err
	}
	go func() {
		if err := agent.Run(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "agent:", err)
		}
	}()
	return nil
}

// agentHas is the IP name as the agent's informers have it, or nil.
func agentHas(name string) *ipv1.IP {
	for _, ip := range agent.ips.list() {
		if ip.Name == name {
			return ip.DeepCopy()
		}
	}
	return nil
}

// fakeLease is the heartbeat as the tests want it.
type fakeLease struct{ held atomic.Bool }

func (l *fakeLease) Held() bool { return l.held.Load() }

// fakeDataplane stands in for the node's kernel: Current reports what
// Apply programmed, except where a test makes the kernel misbehave. It
// also checks the agent's protocol as it goes, against the API server
// itself (not a cache): every address an Apply programs is claimed by the
// node in attachedNode, every attachedPod written is forwarded to by the
// kernel, and every release finds nothing of the address left.
type fakeDataplane struct {
	node    string
	mu      sync.Mutex
	kernel  map[netip.Addr]netconf.Assignment
	applied [][]netconf.Assignment // desired of every Apply, in order
	flushes int
	fenced  bool
	// violations of the protocol seen so far.
	violations []string
	// onRefresh is called by every Refresh.
	onRefresh func()

	// failing addresses cannot be programmed: Apply reports the error.
	failing map[netip.Addr]error
	// lingering addresses stay in the kernel after Apply removed them,
	// until released (a removal that has not completed).
	lingering map[netip.Addr]bool
	// wrongPod addresses are programmed to forward to another pod address
	// than asked (a partial programming).
	wrongPod map[netip.Addr]netip.Addr
}

func newFakeDataplane(node string) *fakeDataplane {
	return &fakeDataplane{
		node:      node,
		kernel:    map[netip.Addr]netconf.Assignment{},
		failing:   map[netip.Addr]error{},
		lingering: map[netip.Addr]bool{},
		wrongPod:  map[netip.Addr]netip.Addr{},
	}
}

func (d *fakeDataplane) Apply(ctx context.Context, desired []netconf.Assignment) (netconf.Report, error) {
	d.checkClaimed(ctx, desired)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.applied = append(d.applied, slices.Clone(desired))
	report := netconf.Report{Errors: map[netip.Addr]error{}}
	next := map[netip.Addr]netconf.Assignment{}
	for addr, a := range d.kernel {
		if d.lingering[addr] {
			next[addr] = a
		}
	}
	for _, a := range desired {
		if d.fenced {
			report.Errors[a.Address] = errors.New("fenced")
			continue
		}
		if err := d.failing[a.Address]; err != nil {
			report.Errors[a.Address] = err
			continue
		}
		if p, ok := d.wrongPod[a.Address]; ok {
			a.PodIP = p
		}
		next[a.Address] = a
	}
	d.kernel = next
	return report, nil
}

func (d *fakeDataplane) Current() ([]netconf.Assignment, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Collect(maps.Values(d.kernel)), nil
}

func (d *fakeDataplane) Fence(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.flushes++
	d.fenced = true
	d.kernel = map[netip.Addr]netconf.Assignment{}
	return nil
}

// Refresh calls the test's hook, if any, as the kernel's gate would read
// its deadline (the agent's HoldDeadline) at that moment.
func (d *fakeDataplane) Refresh() error {
	d.mu.Lock()
	hook := d.onRefresh
	d.mu.Unlock()
	if hook != nil {
		hook()
	}
	return nil
}

// setOnRefresh sets the hook Refresh calls.
func (d *fakeDataplane) setOnRefresh(hook func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.onRefresh = hook
}

func (d *fakeDataplane) Unfence() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fenced = false
}

func (d *fakeDataplane) violate(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.violations = append(d.violations, fmt.Sprintf(format, args...))
}

// protocolViolations are the violations seen so far.
func (d *fakeDataplane) protocolViolations() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.violations)
}

// checkClaimed records a violation for every desired address whose IP
// does not name this node in attachedNode on the API server. An IP that is
// gone is not checked (the cache may still have it; it had a claim).
func (d *fakeDataplane) checkClaimed(ctx context.Context, desired []netconf.Assignment) {
	if len(desired) == 0 {
		return
	}
	ips := &ipv1.IPList{}
	// The agent may cancel the Apply (a fence while it runs); the check
	// is the test's, and runs anyway.
	if err := k8s.List(context.WithoutCancel(ctx), ips); err != nil {
		d.violate("listing IPs: %v", err)
		return
	}
	for _, a := range desired {
		found, claimed := false, false
		for _, ip := range ips.Items {
			if programmedAddr(&ip) == a.Address.String() {
				found = true
				claimed = claimed || ip.Status.AttachedNode == d.node
			}
		}
		if found && !claimed {
			d.violate("%s programmed before %s claimed it", a.Address, d.node)
		}
	}
}

// checkedClient is the agent's client, with its status writes checked
// by d (checkAttachedPod) before they are sent.
type checkedClient struct {
	Client
	d *fakeDataplane
}

// Patch checks what obj, the IP as the agent wants it, says before the
// patch is sent; obj then receives the answer.
func (c checkedClient) Patch(ctx context.Context, namespace, name string, pt types.PatchType, data []byte, obj runtime.Object, subresource ...string) error {
	if ip, ok := obj.(*ipv1.IP); ok && slices.Equal(subresource, []string{"status"}) {
		c.d.checkAttachedPod(ctx, ip)
		n := statusWrites.inFlight.Add(1)
		defer statusWrites.inFlight.Add(-1)
		raiseTo(&statusWrites.most, n)
		time.Sleep(time.Duration(statusWrites.delay.Load()))
	}
	return c.Client.Patch(ctx, namespace, name, pt, data, obj, subresource...)
}

// raiseTo makes most at least n.
func raiseTo(most *atomic.Int32, n int32) {
	for {
		m := most.Load()
		if n <= m || most.CompareAndSwap(m, n) {
			return
		}
	}
}

// statusWrites counts the agent's status writes in flight, and the most
// at once since reset; delay holds each back (a slow API server).
var statusWrites struct {
	inFlight, most atomic.Int32
	delay          atomic.Int64
}

// checkAttachedPod: attachedPod is written only once the kernel forwards
// the address to that pod, and a release only once the kernel has nothing
// of the address.
func (d *fakeDataplane) checkAttachedPod(ctx context.Context, ip *ipv1.IP) {
	addr, _ := netip.ParseAddr(programmedAddr(ip))
	have, present := d.programmed(addr), d.present(addr)
	switch {
	case ip.Status.AttachedNode == "" && present:
		d.violate("%s released while the kernel has %v", ip.Name, have)
	case ip.Status.AttachedPod != "":
		ns, name, _ := strings.Cut(ip.Status.AttachedPod, "/")
		pod := &corev1.Pod{}
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pod)
		if apierrors.IsNotFound(err) {
			// Deleted since the agent's cache showed it (a test's cleanup
			// deletes its pods first): nothing to compare with, and the
			// next reconcile releases the address, which is checked.
			return
		}
		if err != nil {
			d.violate("%s: attachedPod %s: %v", ip.Name, ip.Status.AttachedPod, err)
			return
		}
		if have.PodIP.String() != pod.Status.PodIP {
			d.violate("%s: attachedPod %s (%s) written while the kernel has %v", ip.Name, ip.Status.AttachedPod, pod.Status.PodIP, have)
		}
	}
}

func (d *fakeDataplane) present(addr netip.Addr) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.kernel[addr]
	return ok
}

// lastApplied is what the last Apply was asked to program.
func (d *fakeDataplane) lastApplied() []netconf.Assignment {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.applied) == 0 {
		return nil
	}
	return d.applied[len(d.applied)-1]
}

// everApplied reports whether any Apply was asked to program addr.
func (d *fakeDataplane) everApplied(addr netip.Addr) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, desired := range d.applied {
		for _, a := range desired {
			if a.Address == addr {
				return true
			}
		}
	}
	return false
}

// programmed is what the kernel has for addr (zero if nothing).
func (d *fakeDataplane) programmed(addr netip.Addr) netconf.Assignment {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.kernel[addr]
}

func (d *fakeDataplane) flushCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.flushes
}

// fail makes Apply fail to program addr until the test ends or the
// returned function is called.
func (d *fakeDataplane) fail(t *testing.T, addr netip.Addr, err error) (fix func()) {
	return d.misbehave(t, func() { d.failing[addr] = err }, func() { delete(d.failing, addr) })
}

// linger keeps addr in the kernel after Apply removed it, until the test
// ends or the returned function is called.
func (d *fakeDataplane) linger(t *testing.T, addr netip.Addr) (release func()) {
	return d.misbehave(t, func() { d.lingering[addr] = true }, func() { delete(d.lingering, addr) })
}

// forwardElsewhere makes Apply program addr to forward to pod instead of
// the holder's address, until the test ends or the returned function is
// called.
func (d *fakeDataplane) forwardElsewhere(t *testing.T, addr, pod netip.Addr) (fix func()) {
	return d.misbehave(t, func() { d.wrongPod[addr] = pod }, func() { delete(d.wrongPod, addr) })
}

func (d *fakeDataplane) misbehave(t *testing.T, start, stop func()) func() {
	d.mu.Lock()
	start()
	d.mu.Unlock()
	var once sync.Once
	undo := func() {
		once.Do(func() {
			d.mu.Lock()
			stop()
			d.mu.Unlock()
		})
	}
	t.Cleanup(undo)
	return undo
}

// programmedAddr is the address the node programs for ip: status.address,
// or for an Elastic IP (aws public mode) the private IP EC2 associates it
// with.
func programmedAddr(ip *ipv1.IP) string {
	if st := ip.Status.AWS; st != nil && st.PublicIPv4Pool != "" {
		return st.PrivateIP
	}
	return ip.Status.Address
}
