package netconf

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Assignment is one static IP this node must answer for.
type Assignment struct {
	// Address is the static IP.
	Address netip.Addr
	// PodIP is the holder pod's address on this node: traffic to Address is
	// DNATed to it, and traffic from it leaves with Address as its source.
	PodIP netip.Addr
	// Interface is the uplink the address is added to and announced on. ""
	// means the interface of the main routing table's route to Address (or
	// of the default route).
	Interface string
	// NoAnnounce: send no gratuitous ARP or unsolicited neighbour
	// advertisement for Address. For networks where the fabric, not the
	// neighbours' caches, decides which node receives an address (an EC2
	// VPC routes a secondary private IP to the ENI that holds it).
	NoAnnounce bool
}

// String renders a as address->pod@interface.
func (a Assignment) String() string {
	return fmt.Sprintf("%s->%s@%s", a.Address, a.PodIP, a.Interface)
}

// Defaults of Options.
const (
	DefaultTableName      = "kubext"
	DefaultRouteTableBase = 0x6b780000 // "kx" in the high bytes: easy to spot in "ip rule"
	DefaultRulePriority   = 500
)

// AddressProtocol marks the addresses (IFA_PROTO) and routes (RTPROT)
// kubext adds: 107, an ASCII "k".
const AddressProtocol = 0x6b

const (
	// routeTableSpan is how many table ids kubext owns from RouteTableBase:
	// one per possible uplink interface index.
	routeTableSpan       = 1 << 16
	maxAnnouncements     = 16
	maxAnnouncementDelay = time.Minute
)

// defaultAnnouncements: at once, then twice more within a second, in case
// the first frame is lost or a switch is still learning the port.
var defaultAnnouncements = []time.Duration{0, 250 * time.Millisecond, time.Second}

// Options configure a Dataplane. The zero value is usable.
type Options struct {
	// NetNSPath is the network namespace to program, as a path (for example
	// /run/netns/node1). Empty means the namespace of the thread calling
	// New, which for an agent started inside the node's namespace (a
	// hostNetwork pod, or a process started with nsenter) is that namespace.
	NetNSPath string

	// TableName is the nftables table (family inet) kubext owns. Default
	// "kubext".
	TableName string

	// RouteTableBase is the first of the routing table ids kubext owns: the
	// table of the uplink with interface index i is RouteTableBase+i, for i
	// below 65536. Default DefaultRouteTableBase.
	RouteTableBase int

	// RulePriority is the priority of the "from <pod> lookup <table>" rules:
	// after the local table (0), before main (32766) and before the per-pod
	// rules of common CNIs. Default DefaultRulePriority.
	RulePriority int

	// ExcludeSNAT are the destinations that pod traffic reaches with its own
	// source address and the node's normal routing, typically the cluster's
	// pod and service ranges.
	ExcludeSNAT []netip.Prefix

	// Announcements are the delays after an address is added at which it is
	// announced (gratuitous ARP, unsolicited neighbour advertisement). The
	// first must be 0: that announcement is sent before Apply returns. At
	// most 16, ascending, up to one minute. Default 0, 250ms, 1s.
	Announcements []time.Duration

	// AddressLifetime, when set (whole seconds), makes the kernel itself
	// remove kubext's addresses, and the elements of its NAT maps, that
	// long after they were last added or refreshed (Refresh). The agent
	// refreshes on every heartbeat renewal, so an agent killed or frozen
	// without the chance to fence (SIGKILL, OOM, SIGSTOP, CPU starvation)
	// stops answering and stops translating on its own instead of keeping
	// the address for ever. Zero keeps them until they are removed.
	AddressLifetime time.Duration

	// HoldDeadline, when set with AddressLifetime, bounds every lifetime
	// written: no address and no NAT element is given a lifetime that ends
	// after the time it returns (the end of the agent's heartbeat hold, less
	// the kernel's lag in removing expired addresses). Lifetimes are whole
	// seconds, so a write that would get less than one second is not made
	// (ErrHoldEnding) and waits for the next renewal. With it, a frozen
	// agent's node is silent by the time the controller can confirm the
	// agent lost, however late the freeze came.
	HoldDeadline func() time.Time

	// GateDeadline, when set, is enforced to the millisecond by nftables
	// (the hold gate, gate.go): from then on the node drops ARP as, traffic
	// to and traffic from every address kubext programmed, although the
	// address may still be on the interface, until a Refresh or Apply with
	// a later deadline. The address lifetimes (HoldDeadline) stay the
	// coarse backstop. Announcements stop at the earlier of the two.
	GateDeadline func() time.Time

	// GateLateLimit is how long a write of the hold gate may take to
	// commit after its timeouts were computed. The kernel counts a
	// timeout from the commit, so a write held up in between (the agent
	// stopped, frozen or starved of CPU) would keep the gate open past
	// GateDeadline by as long; beyond this limit the gate is closed at
	// once and the write reports ErrLapsed (a refresh opens it again).
	// It is what the caller's timing leaves for the gate's own lateness
	// (the ip-agent: half the witnesses' fence slack). Default 50ms.
	GateLateLimit time.Duration

	// Log receives what the Dataplane changes. Default: discard.
	Log logr.Logger
}

// withDefaults fills in defaults and validates o.
func (o Options) withDefaults() (Options, error) {
	if o.TableName == "" {
		o.TableName = DefaultTableName
	}
	if len(o.TableName) > 255 {
		return o, fmt.Errorf("table name %q is longer than 255 characters", o.TableName)
	}
	if o.RouteTableBase == 0 {
		o.RouteTableBase = DefaultRouteTableBase
	}
	if o.RouteTableBase <= unix.RT_TABLE_LOCAL || o.RouteTableBase > math.MaxUint32-routeTableSpan {
		return o, fmt.Errorf("route table base %d must be above %d and at most %d", o.RouteTableBase, unix.RT_TABLE_LOCAL, math.MaxUint32-routeTableSpan)
	}
	if o.RulePriority == 0 {
		o.RulePriority = DefaultRulePriority
	}
	if o.RulePriority < 1 || o.RulePriority > 32765 {
		return o, fmt.Errorf("rule priority %d must be between 1 and 32765 (before the main table)", o.RulePriority)
	}
	for _, p := range o.ExcludeSNAT {
		if !p.IsValid() || p != p.Masked() || p.Addr().Is4In6() {
			return o, fmt.Errorf("ExcludeSNAT entry %s must be a canonical prefix with no bits set after its length", p)
		}
	}
	if o.AddressLifetime < 0 || o.AddressLifetime%time.Second != 0 || o.AddressLifetime > math.MaxUint32*time.Second {
		return o, fmt.Errorf("address lifetime %s must be a whole, positive number of seconds", o.AddressLifetime)
	}
	if o.GateLateLimit < 0 {
		return o, fmt.Errorf("gate late limit %s must not be negative", o.GateLateLimit)
	}
	if o.GateLateLimit == 0 {
		o.GateLateLimit = defaultGateLateLimit
	}
	if len(o.Announcements) == 0 {
		o.Announcements = defaultAnnouncements
	}
	if len(o.Announcements) > maxAnnouncements {
		return o, fmt.Errorf("at most %d announcements, got %d", maxAnnouncements, len(o.Announcements))
	}
	if o.Announcements[0] != 0 {
		return o, errors.New("the first announcement must be at 0: an address is announced at once")
	}
	for i := 1; i < len(o.Announcements); i++ {
		if o.Announcements[i] <= o.Announcements[i-1] || o.Announcements[i] > maxAnnouncementDelay {
			return o, fmt.Errorf("announcements must ascend and stay within %s, got %v", maxAnnouncementDelay, o.Announcements)
		}
	}
	return o, nil
}

// Report says what an Apply changed. Added, Updated, Removed and Unchanged
// hold the assignments as programmed (Interface resolved); Removed holds
// them as they were found.
type Report struct {
	// Added are addresses this node did not answer for before.
	Added []Assignment
	// Updated are addresses that were already there, but whose pod,
	// interface or some other part of the programming had to be changed or
	// repaired. They are announced again.
	Updated []Assignment
	// Removed are addresses kubext had programmed (fully or partly) that
	// are no longer desired.
	Removed []Assignment
	// Unchanged are desired addresses that were already fully programmed.
	Unchanged []Assignment
	// Errors holds, per address, why it is not as desired: invalid input
	// (its kernel state is then left as it was), an address someone else
	// configured, or a kernel error. An address whose programming failed is
	// in no other list, and the next Apply tries again; one that was
	// programmed but could not be announced is also in Added, Updated or
	// Unchanged, and the next Apply announces it again.
	Errors map[netip.Addr]error
}

// Changed reports whether the Apply changed anything.
func (r Report) Changed() bool {
	return len(r.Added)+len(r.Updated)+len(r.Removed) > 0
}

// Dataplane programs the static IPs of one node into one network namespace.
// Its methods may be called from several goroutines. Applies and Currents
// run one at a time; Refresh, Flush and Fence never wait for them (see
// fence.go).
type Dataplane struct {
	// kernel holds the connections of Apply and Current.
	*kernel
	// refresher and fencer have connections of their own, so that Refresh
	// and Fence run while an Apply is under way.
	refresher, fencer *kernel
	gate              fenceGate
	// refreshMu keeps Refresh's read-then-rewrite apart from Apply's
	// removals and NAT changes: a refresh that read an address or map
	// element before Apply removed or changed it would otherwise put the
	// old one back.
	refreshMu sync.Mutex
	flushMu   sync.Mutex
	// wanted is how many addresses the last Apply meant to have on the
	// node; Refresh reports ErrLapsed when it finds fewer.
	wanted atomic.Int32
	closed atomic.Bool

	mu sync.Mutex
	// applied is false until the first Apply: a fresh process cannot know
	// whether the one before it finished announcing, so the first Apply
	// announces every address again.
	applied bool
	// unannounced are addresses whose announcement failed; the next Apply
	// retries them.
	unannounced map[netip.Addr]bool
	announcing  map[netip.Addr]*announcement
	bg          context.Context
	stopBG      context.CancelFunc
	wg          sync.WaitGroup
	// beforeWrites, when set (tests), runs in Apply after the kernel was
	// read and before anything is written.
	beforeWrites func()
}

// kernel is one set of connections to the namespace's kernel. Each user
// that may run at the same time as another (Apply, Refresh, Fence) has
// its own: netlink sockets and an nftables.Conn are not safe for
// concurrent use.
type kernel struct {
	opts Options
	log  logr.Logger
	ns   netns.NsHandle // owned by the Dataplane
	nl   *netlink.Handle
	// rt is a raw route netlink socket: the netlink library neither sets
	// nor reports the address protocol (IFA_PROTO).
	rt  map[int]*nl.SocketHandle
	nft *nftables.Conn
	// egress is shared by the Dataplane's kernels (egress.go).
	egress *egressSupport
	// beforeGateFlush, when set (tests), runs just before a batch with
	// gate elements is sent: a pause there is an agent stopped between
	// computing a timeout and committing it.
	beforeGateFlush func()
}

// defaultGateLateLimit is Options.GateLateLimit's default.
const defaultGateLateLimit = 50 * time.Millisecond

// New opens the network namespace and the netlink and nftables connections.
// It changes nothing in the kernel.
func New(opts Options) (*Dataplane, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("netconf: %w", err)
	}
	ns, err := openNS(opts.NetNSPath)
	if err != nil {
		return nil, fmt.Errorf("netconf: open network namespace: %w", err)
	}
	d := &Dataplane{
		unannounced: map[netip.Addr]bool{},
		announcing:  map[netip.Addr]*announcement{},
	}
	d.bg, d.stopBG = context.WithCancel(context.Background())
	egress := newEgressSupport()
	for _, k := range []**kernel{&d.kernel, &d.refresher, &d.fencer} {
		if *k, err = openKernel(opts, ns, egress); err != nil {
			d.closeHandles()
			_ = ns.Close()
			return nil, err
		}
	}
	return d, nil
}

func openKernel(opts Options, ns netns.NsHandle, egress *egressSupport) (*kernel, error) {
	k := &kernel{opts: opts, log: opts.Log, ns: ns, egress: egress}
	var err error
	if k.nl, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE, unix.NETLINK_NETFILTER); err != nil {
		return nil, fmt.Errorf("netconf: netlink: %w", err)
	}
	sock, err := nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		k.close()
		return nil, fmt.Errorf("netconf: route netlink socket: %w", err)
	}
	k.rt = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: {Socket: sock}}
	var nftOpts []nftables.ConnOption
	if ns.IsOpen() {
		nftOpts = append(nftOpts, nftables.WithNetNSFd(int(ns)))
	}
	if k.nft, err = nftables.New(nftOpts...); err != nil {
		k.close()
		return nil, fmt.Errorf("netconf: nftables: %w", err)
	}
	return k, nil
}

// onOneSocket runs fn with every nftables request on one netlink socket
// (a lasting connection), closed when fn returns. Otherwise each request
// opens a socket of its own in the node's namespace, and a refresh, which
// runs on every witness vouch, is a dozen of them: about half its CPU
// (BenchmarkRefresh; figures in docs/benchmarks.md, "The ip-agent's
// floor"). The socket serves one attempt only, so a
// reply or acknowledgement that a failed request left unread on it never
// reaches a later request (google/nftables does not match replies to
// requests by sequence number). Only for a kernel used by one goroutine
// at a time (the refresher, under Dataplane.refreshMu): k.nft is swapped.
func (k *kernel) onOneSocket(fn func() error) error {
	opts := []nftables.ConnOption{nftables.AsLasting()}
	if k.ns.IsOpen() {
		opts = append(opts, nftables.WithNetNSFd(int(k.ns)))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	perRequest := k.nft
	k.nft = c
	defer func() {
		k.nft = perRequest
		_ = c.CloseLasting()
	}()
	return fn()
}

func (k *kernel) close() {
	if k.nl != nil {
		k.nl.Close()
	}
	if sh, ok := k.rt[unix.NETLINK_ROUTE]; ok {
		sh.Socket.Close()
	}
	if k.nft != nil {
		_ = k.nft.CloseLasting()
	}
}

// Close stops pending announcements and releases the connections. It
// leaves the kernel as it is: a restarted agent finds its state there.
func (d *Dataplane) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.stopBG()
	d.wg.Wait()
	// Wait for whatever is still using the connections.
	d.mu.Lock()
	d.refreshMu.Lock()
	d.flushMu.Lock()
	defer d.mu.Unlock()
	defer d.refreshMu.Unlock()
	defer d.flushMu.Unlock()
	ns := d.ns
	d.closeHandles()
	if ns.IsOpen() {
		_ = ns.Close()
	}
	return nil
}

func (d *Dataplane) closeHandles() {
	for _, k := range []*kernel{d.kernel, d.refresher, d.fencer} {
		if k != nil {
			k.close()
		}
	}
}

func (d *Dataplane) isClosed() bool { return d.closed.Load() }

var errClosed = errors.New("netconf: dataplane is closed")

// ErrHoldEnding is returned for a write that Options.HoldDeadline leaves
// less than a second of lifetime: it waits for the next renewal.
var ErrHoldEnding = errors.New("netconf: the heartbeat hold ends in less than a second; writing after the next renewal")

// ErrLapsed is returned by Refresh when something kubext should have on the
// node is missing (it expired while renewals stalled, or a write waited
// for the hold): the caller should Apply again. While an Apply runs at the
// same time it may be said needlessly, which costs one more Apply.
var ErrLapsed = errors.New("netconf: some static IPs lapsed or are waiting to be written; apply again")

// lifetime is the lifetime to give an address or NAT element written now:
// Options.AddressLifetime, bounded by Options.HoldDeadline.
func (k *kernel) lifetime() (time.Duration, error) {
	l := k.opts.AddressLifetime
	if l == 0 || k.opts.HoldDeadline == nil {
		return l, nil
	}
	left := time.Until(k.opts.HoldDeadline()).Truncate(time.Second)
	if left < time.Second {
		return 0, ErrHoldEnding
	}
	return min(l, left), nil
}

// Refresh restarts the lifetime of every address kubext has on the node,
// and the timeout of every element of its NAT maps (see
// Options.AddressLifetime). It changes nothing else, never waits for an
// Apply, and adds nothing once the dataplane is fenced.
func (d *Dataplane) Refresh() error {
	if d.opts.AddressLifetime == 0 && d.opts.GateDeadline == nil {
		return nil
	}
	return d.refreshing(func(adm pass) error {
		owned, err := d.refresher.refresh(adm)
		if err != nil {
			return err
		}
		if owned < int(d.wanted.Load()) {
			return ErrLapsed
		}
		return nil
	})
}

// refreshing runs a refresh on the refresher, one at a time, with a pass
// issued before it reads anything: a Fence after that voids its rewrites.
func (d *Dataplane) refreshing(refresh func(adm pass) error) error {
	if d.isClosed() {
		return errClosed
	}
	d.refreshMu.Lock()
	defer d.refreshMu.Unlock()
	adm := d.gate.issue(context.Background())
	if err := adm.valid(); err != nil {
		return err
	}
	return refresh(adm)
}

// RefreshGate moves the hold gate's deadline to Options.GateDeadline and
// does nothing else: the part of Refresh that follows a hold to the
// millisecond, for a caller that refreshes far more often than the
// whole-second lifetimes need (the ip-agent as its witnesses vouch, with
// a full Refresh a few times a second). Like Refresh it never waits for an
// Apply and adds nothing once the dataplane is fenced; unlike it, it does
// not say whether something lapsed.
func (d *Dataplane) RefreshGate() error {
	if d.opts.GateDeadline == nil {
		return nil
	}
	return d.refreshing(func(adm pass) error {
		if err := d.refresher.refreshGate(adm); err != nil {
			return fmt.Errorf("netconf: %w", err)
		}
		return nil
	})
}

// refresh rewrites what it finds, as it finds it; each rewrite is an add.
// It returns how many of kubext's addresses it found.
func (k *kernel) refresh(adm pass) (int, error) {
	links, err := k.links()
	if err != nil {
		return 0, fmt.Errorf("netconf: %w", err)
	}
	addrs, err := k.listAddresses(links)
	if err != nil {
		return 0, fmt.Errorf("netconf: %w", err)
	}
	_, holdErr := k.lifetime()
	var errs []error
	owned := 0
	for _, a := range addrs {
		link, ok := links.byIndex[a.LinkIndex]
		if !a.owned || !ok {
			continue
		}
		owned++
		if holdErr != nil {
			continue // each keeps its earlier, shorter lifetime
		}
		if err := adm.add(func() error { return k.writeAddress(a.IP, link, true) }); err != nil {
			errs = append(errs, fmt.Errorf("refresh %s on %s: %w", a.IP, link.Name, err))
		}
	}
	errs = append(errs, k.refreshNAT(adm), k.refreshGate(adm))
	if err := errors.Join(errs...); err != nil {
		return owned, fmt.Errorf("netconf: %w", err)
	}
	return owned, nil
}

// Apply converges the kernel to desired: it adds what is missing, removes
// what kubext programmed that is not desired, announces addresses that are
// new here, and deletes the conntrack entries of addresses that were added,
// changed or removed. It is idempotent: when the kernel is already as
// desired it writes nothing. The error is non-nil when anything is not as
// desired; the Report says what, per address. Addresses in desired must be
// unique, and so must pod IPs. Once ctx ends, or the dataplane is fenced or
// flushed, the Apply adds nothing more.
func (d *Dataplane) Apply(ctx context.Context, desired []Assignment) (Report, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.isClosed() {
		return Report{}, errClosed
	}
	// Issued before the kernel is read: a Fence from now on voids it.
	adm := d.gate.issue(ctx)
	links, err := d.links()
	if err != nil {
		return Report{}, fmt.Errorf("netconf: %w", err)
	}
	mainRoutes, err := d.mainRoutes()
	if err != nil {
		return Report{}, fmt.Errorf("netconf: %w", err)
	}
	cur, err := d.read(links)
	if err != nil {
		return Report{}, fmt.Errorf("netconf: %w", err)
	}
	targets, failed := resolve(desired, links, mainRoutes, cur.foreign)
	defer d.wanted.Store(int32(len(targets)))
	p := makePlan(targets, failed, cur, d.opts, !d.applied, d.unannounced)
	if err := ctx.Err(); err != nil {
		return Report{}, fmt.Errorf("netconf: %w", err)
	}
	if d.beforeWrites != nil {
		d.beforeWrites()
	}
	global := d.write(adm, p, mainRoutes)
	d.announce(adm, p)
	d.applied = true

	r := p.finish()
	d.logReport(r)
	if err := errors.Join(append(global, failedError(r.Errors))...); err != nil {
		return r, fmt.Errorf("netconf: %w", err)
	}
	return r, nil
}

// write carries out the plan, except the announcements. It returns the
// errors that concern no address in particular.
func (d *Dataplane) write(adm pass, p *plan, mainRoutes []netlink.Route) []error {
	// Stop answering for what goes away before anything else changes.
	d.refreshMu.Lock()
	for _, a := range p.addrDel {
		d.stopAnnouncing(a.IP)
		if err := d.delAddress(a); err != nil {
			p.fail(a.IP, fmt.Errorf("remove address from %s: %w", a.linkName, err))
		}
	}
	// NAT before addresses, so an address leads to its pod from its first
	// packet. An address without NAT would only black-hole traffic: if the
	// table cannot be written, nothing is added.
	natErr := d.writeNAT(adm, p.nat)
	d.refreshMu.Unlock()

	var global []error
	if natErr != nil {
		p.abandonAdds(natErr)
		global = append(global, natErr)
	} else {
		if err := d.ensureForwarding(p.families); err != nil {
			global = append(global, err)
		}
		global = append(global, d.syncRouting(adm, p, mainRoutes)...)
		for _, t := range p.addrAdd {
			if p.dropped[t.Address] {
				continue
			}
			if err := d.addAddress(adm, t.Address, t.link); err != nil {
				p.fail(t.Address, fmt.Errorf("add address to %s: %w", t.link.Name, err))
			}
		}
	}
	if err := d.flushConntrack(p.stale); err != nil {
		global = append(global, err)
	}
	return global
}

// Current reads back from the kernel every address kubext has a trace of
// on this node. Interface is the interface the address is on ("" when
// only NAT entries of it are left). PodIP is the pod only when the kernel
// has all of the address's forwarding: the address on the interface, DNAT
// to the pod, SNAT of the pod through that interface to the address, and
// the pod's routing rule to the interface's table; otherwise it is invalid
// (a partly programmed address, repaired by the next Apply, or one being
// removed). This is what the agent reports: what is there, not what was
// intended.
func (d *Dataplane) Current() ([]Assignment, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.isClosed() {
		return nil, errClosed
	}
	links, err := d.links()
	if err != nil {
		return nil, fmt.Errorf("netconf: %w", err)
	}
	cur, err := d.read(links)
	if err != nil {
		return nil, fmt.Errorf("netconf: %w", err)
	}
	return cur.assignments(links, d.opts.RouteTableBase), nil
}

// flush removes everything kubext programmed: addresses first (the node
// stops answering at once), then conntrack entries, rules, routes and the
// nftables table.
func (k *kernel) flush(ctx context.Context) error {
	// Silence first, in one batch: what follows takes a few round trips.
	errs := []error{k.closeGate()}
	stale := newStaleFlows(k.opts.ExcludeSNAT)
	links, err := k.links()
	if err != nil {
		// Names only help recognise labels; the protocol mark suffices.
		errs = append(errs, err)
		links = newLinkSet()
	}
	addrs, err := k.listAddresses(links)
	errs = append(errs, err)
	for _, a := range addrs {
		if !a.owned {
			continue
		}
		stale.add(a.IP, netip.Addr{})
		if err := k.delAddress(a); err != nil {
			errs = append(errs, fmt.Errorf("remove address %s from %s: %w", a.IP, a.linkName, err))
		} else {
			k.log.Info("removed static IP", "address", a.IP, "interface", a.linkName, "reason", "flush")
		}
	}
	if err := ctx.Err(); err != nil {
		// The addresses are gone: the node has stopped answering, which is
		// what fencing needs first.
		return fmt.Errorf("netconf: flush: %w", errors.Join(append(errs, err)...))
	}
	nat, _, err := k.readNAT()
	errs = append(errs, err)
	for a, pod := range nat.dnat {
		stale.add(a, pod)
	}
	for pod, a := range nat.snat {
		stale.add(a, pod.Pod)
	}
	errs = append(errs, k.flushConntrack(stale))
	// Rules are deleted, never added: the pass permits nothing.
	_, ruleErrs := k.syncRules(pass{}, nil)
	_, routeErrs := k.syncTables(pass{}, nil)
	errs = append(errs, ruleErrs...)
	errs = append(errs, routeErrs...)
	errs = append(errs, k.deleteTable())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("netconf: flush: %w", err)
	}
	return nil
}

// failedError joins the per-address errors, in address order.
func failedError(failed map[netip.Addr]error) error {
	if len(failed) == 0 {
		return nil
	}
	addrs := make([]netip.Addr, 0, len(failed))
	for a := range failed {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	errs := make([]error, 0, len(addrs))
	for _, a := range addrs {
		errs = append(errs, fmt.Errorf("%s: %w", a, failed[a]))
	}
	return errors.Join(errs...)
}

func (d *Dataplane) logReport(r Report) {
	for _, a := range r.Added {
		d.log.Info("added static IP", "address", a.Address, "pod", a.PodIP, "interface", a.Interface)
	}
	for _, a := range r.Updated {
		d.log.Info("updated static IP", "address", a.Address, "pod", a.PodIP, "interface", a.Interface)
	}
	for _, a := range r.Removed {
		d.log.Info("removed static IP", "address", a.Address, "pod", a.PodIP, "interface", a.Interface)
	}
	for a, err := range r.Errors {
		d.log.Error(err, "static IP not as desired", "address", a)
	}
}
