package netconf

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sync"
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
	// remove kubext's addresses that long after they were last added or
	// refreshed (Refresh). The agent refreshes on every heartbeat renewal,
	// so an agent killed without the chance to fence (SIGKILL, OOM) stops
	// answering on its own instead of keeping the address for ever. Zero
	// keeps addresses until they are removed.
	AddressLifetime time.Duration

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
// Its methods may be called from several goroutines; they run one at a time.
type Dataplane struct {
	opts Options
	log  logr.Logger
	ns   netns.NsHandle
	nl   *netlink.Handle
	// rt is a raw route netlink socket: the netlink library neither sets
	// nor reports the address protocol (IFA_PROTO).
	rt  map[int]*nl.SocketHandle
	nft *nftables.Conn

	mu sync.Mutex
	// applied is false until the first Apply: a fresh process cannot know
	// whether the one before it finished announcing, so the first Apply
	// announces every address again.
	applied bool
	closed  bool
	// unannounced are addresses whose announcement failed; the next Apply
	// retries them.
	unannounced map[netip.Addr]bool
	announcing  map[netip.Addr]*announcement
	bg          context.Context
	stopBG      context.CancelFunc
	wg          sync.WaitGroup
}

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
		opts:        opts,
		log:         opts.Log,
		ns:          ns,
		unannounced: map[netip.Addr]bool{},
		announcing:  map[netip.Addr]*announcement{},
	}
	d.bg, d.stopBG = context.WithCancel(context.Background())
	if d.nl, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE, unix.NETLINK_NETFILTER); err != nil {
		d.closeHandles()
		return nil, fmt.Errorf("netconf: netlink: %w", err)
	}
	sock, err := nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		d.closeHandles()
		return nil, fmt.Errorf("netconf: route netlink socket: %w", err)
	}
	d.rt = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: {Socket: sock}}
	if d.nft, err = nftables.New(nftables.WithNetNSFd(int(ns))); err != nil {
		d.closeHandles()
		return nil, fmt.Errorf("netconf: nftables: %w", err)
	}
	return d, nil
}

// Close stops pending announcements and releases the connections. It
// leaves the kernel as it is: a restarted agent finds its state there.
func (d *Dataplane) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.stopBG()
	d.mu.Unlock()
	d.wg.Wait()
	d.closeHandles()
	return nil
}

func (d *Dataplane) closeHandles() {
	if d.nl != nil {
		d.nl.Close()
	}
	if sh, ok := d.rt[unix.NETLINK_ROUTE]; ok {
		sh.Socket.Close()
	}
	if d.ns.IsOpen() {
		_ = d.ns.Close()
	}
}

var errClosed = errors.New("netconf: dataplane is closed")

// Refresh restarts the lifetime of every address kubext has on the node
// (see Options.AddressLifetime). It changes nothing else.
func (d *Dataplane) Refresh() error {
	if d.opts.AddressLifetime == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errClosed
	}
	links, err := d.links()
	if err != nil {
		return fmt.Errorf("netconf: %w", err)
	}
	cur, err := d.read(links)
	if err != nil {
		return fmt.Errorf("netconf: %w", err)
	}
	var errs []error
	for _, a := range cur.addrs {
		link, ok := links.byIndex[a.LinkIndex]
		if !ok {
			continue
		}
		if err := d.writeAddress(a.IP, link, true); err != nil {
			errs = append(errs, fmt.Errorf("refresh %s on %s: %w", a.IP, link.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Apply converges the kernel to desired: it adds what is missing, removes
// what kubext programmed that is not desired, announces addresses that are
// new here, and deletes the conntrack entries of addresses that were added,
// changed or removed. It is idempotent: when the kernel is already as
// desired it writes nothing. The error is non-nil when anything is not as
// desired; the Report says what, per address. Addresses in desired must be
// unique, and so must pod IPs.
func (d *Dataplane) Apply(ctx context.Context, desired []Assignment) (Report, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return Report{}, errClosed
	}
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
	p := makePlan(targets, failed, cur, d.opts, !d.applied, d.unannounced)
	if err := ctx.Err(); err != nil {
		return Report{}, fmt.Errorf("netconf: %w", err)
	}
	// Stop answering for what goes away before anything else changes.
	for _, a := range p.addrDel {
		d.stopAnnouncing(a.IP)
		if err := d.delAddress(a); err != nil {
			p.fail(a.IP, fmt.Errorf("remove address from %s: %w", a.linkName, err))
		}
	}

	// NAT before addresses, so an address leads to its pod from its first
	// packet. An address without NAT would only black-hole traffic: if the
	// table cannot be written, nothing is added.
	var global []error
	if err := d.writeNAT(p.nat); err != nil {
		p.abandonAdds(err)
		global = append(global, err)
	} else {
		if err := d.ensureForwarding(p.families); err != nil {
			global = append(global, err)
		}
		global = append(global, d.syncRouting(p, mainRoutes)...)
		for _, t := range p.addrAdd {
			if p.dropped[t.Address] {
				continue
			}
			if err := d.addAddress(t.Address, t.link); err != nil {
				p.fail(t.Address, fmt.Errorf("add address to %s: %w", t.link.Name, err))
			}
		}
	}
	if err := d.flushConntrack(p.stale); err != nil {
		global = append(global, err)
	}
	d.announce(p)
	d.applied = true

	r := p.finish()
	d.logReport(r)
	if err := errors.Join(append(global, failedError(r.Errors))...); err != nil {
		return r, fmt.Errorf("netconf: %w", err)
	}
	return r, nil
}

// Current reads back from the kernel the addresses kubext has on this
// node: each with the interface it is on and the pod its traffic goes to.
// PodIP is invalid when no NAT mapping exists for the address (a partly
// programmed address, repaired by the next Apply). This is what the agent
// reports as attached: what is there, not what was intended.
func (d *Dataplane) Current() ([]Assignment, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
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
	return cur.assignments(links), nil
}

// Flush removes everything kubext programmed in the namespace: addresses
// first (the node stops answering at once), then their conntrack entries,
// routing rules and routes, and the nftables table. It is the fencing step
// of an agent that lost its lease, so it carries on past errors and
// depends on nothing but the kernel's marks. Forwarding sysctls stay on.
func (d *Dataplane) Flush(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errClosed
	}
	for addr := range d.announcing {
		d.stopAnnouncing(addr)
	}
	clear(d.unannounced)
	var errs []error
	stale := newStaleFlows(d.opts.ExcludeSNAT)
	links, err := d.links()
	if err != nil {
		// Names only help recognise labels; the protocol mark suffices.
		errs = append(errs, err)
		links = newLinkSet()
	}
	addrs, err := d.listAddresses(links)
	errs = append(errs, err)
	for _, a := range addrs {
		if !a.owned {
			continue
		}
		stale.add(a.IP, netip.Addr{})
		if err := d.delAddress(a); err != nil {
			errs = append(errs, fmt.Errorf("remove address %s from %s: %w", a.IP, a.linkName, err))
		} else {
			d.log.Info("removed static IP", "address", a.IP, "interface", a.linkName, "reason", "flush")
		}
	}
	if err := ctx.Err(); err != nil {
		// The addresses are gone: the node has stopped answering, which is
		// what fencing needs first.
		return fmt.Errorf("netconf: flush: %w", errors.Join(append(errs, err)...))
	}
	nat, _, err := d.readNAT()
	errs = append(errs, err)
	for a, pod := range nat.dnat {
		stale.add(a, pod)
	}
	for pod, a := range nat.snat {
		stale.add(a, pod.Pod)
	}
	errs = append(errs, d.flushConntrack(stale))
	_, ruleErrs := d.syncRules(nil)
	_, routeErrs := d.syncTables(nil)
	errs = append(errs, ruleErrs...)
	errs = append(errs, routeErrs...)
	errs = append(errs, d.deleteTable())
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
