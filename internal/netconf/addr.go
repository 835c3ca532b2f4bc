package netconf

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

const (
	// ifaProto is IFA_PROTO (Linux 5.18): who added an address. Not in
	// x/sys/unix.
	ifaProto = 11
	// labelSuffix makes kubext's IPv4 addresses recognisable in "ip
	// address" and on kernels without IFA_PROTO.
	labelSuffix = ":kx"
	// maxDumpAttempts bounds the retries of a dump the kernel interrupted
	// because addresses changed meanwhile.
	maxDumpAttempts = 5
)

// hostAddr is an address on an interface, as the kernel reports it.
type hostAddr struct {
	IP        netip.Addr
	PrefixLen int
	LinkIndex int
	Label     string
	Proto     uint8
	linkName  string
	owned     bool // added by kubext
}

// addrLabel is the IPv4 label of kubext's addresses on ifname, or "" when
// "<ifname>:kx" does not fit in IFNAMSIZ.
func addrLabel(ifname string) string {
	if len(ifname)+len(labelSuffix) > unix.IFNAMSIZ-1 {
		return ""
	}
	return ifname + labelSuffix
}

// ownedBy reports whether kubext added a: a host address carrying its
// protocol, or (IPv4) its label.
func (a hostAddr) ownedBy(linkName string) bool {
	if a.PrefixLen != a.IP.BitLen() {
		return false
	}
	if a.Proto == AddressProtocol {
		return true
	}
	return a.IP.Is4() && a.Label != "" && a.Label == addrLabel(linkName)
}

func (k *kernel) links() (linkSet, error) {
	ls, err := k.nl.LinkList()
	if err != nil {
		return linkSet{}, fmt.Errorf("list interfaces: %w", err)
	}
	infos := make([]linkInfo, 0, len(ls))
	for _, l := range ls {
		a := l.Attrs()
		infos = append(infos, linkInfo{Index: a.Index, Name: a.Name, HardwareAddr: a.HardwareAddr})
	}
	return newLinkSet(infos...), nil
}

// listAddresses dumps every address of the namespace, marking kubext's.
func (k *kernel) listAddresses(links linkSet) ([]hostAddr, error) {
	var (
		msgs [][]byte
		err  error
	)
	for attempt := 1; ; attempt++ {
		req := nl.NewNetlinkRequest(unix.RTM_GETADDR, unix.NLM_F_DUMP)
		req.Sockets = k.rt
		req.AddData(nl.NewIfAddrmsg(unix.AF_UNSPEC))
		msgs, err = req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWADDR)
		if err == nil {
			break
		}
		if !errors.Is(err, nl.ErrDumpInterrupted) || attempt == maxDumpAttempts {
			return nil, fmt.Errorf("list addresses: %w", err)
		}
	}
	addrs := make([]hostAddr, 0, len(msgs))
	for _, m := range msgs {
		a, err := parseAddr(m)
		if err != nil {
			return nil, fmt.Errorf("list addresses: %w", err)
		}
		a.linkName = links.name(a.LinkIndex)
		a.owned = a.ownedBy(a.linkName)
		addrs = append(addrs, a)
	}
	return addrs, nil
}

// parseAddr decodes one RTM_NEWADDR message.
func parseAddr(m []byte) (hostAddr, error) {
	if len(m) < unix.SizeofIfAddrmsg {
		return hostAddr{}, errors.New("short address message")
	}
	msg := nl.DeserializeIfAddrmsg(m)
	attrs, err := nl.ParseRouteAttr(m[msg.Len():])
	if err != nil {
		return hostAddr{}, err
	}
	a := hostAddr{PrefixLen: int(msg.Prefixlen), LinkIndex: int(msg.Index)}
	var local, address netip.Addr
	for _, attr := range attrs {
		switch attr.Attr.Type {
		case unix.IFA_LOCAL:
			local, _ = netip.AddrFromSlice(attr.Value)
		case unix.IFA_ADDRESS:
			address, _ = netip.AddrFromSlice(attr.Value)
		case unix.IFA_LABEL:
			if n := len(attr.Value); n > 0 {
				a.Label = string(attr.Value[:n-1])
			}
		case ifaProto:
			if len(attr.Value) > 0 {
				a.Proto = attr.Value[0]
			}
		}
	}
	// IPv4 reports the local address in IFA_LOCAL (IFA_ADDRESS is the peer
	// on point-to-point links); IPv6 usually only IFA_ADDRESS.
	a.IP = local
	if !a.IP.IsValid() {
		a.IP = address
	}
	a.IP = a.IP.Unmap()
	return a, nil
}

// addAddress adds ip as a host address to link, marked as kubext's. No
// prefix route: the address must not change how the node routes. IPv6
// addresses skip duplicate address detection (the address must answer at
// once; its uniqueness is the API server's job) and are deprecated
// (preferred lifetime 0), so the node never picks them as the source of
// its own traffic; IPv4 /32s are not chosen for other destinations anyway.
func (k *kernel) addAddress(adm pass, ip netip.Addr, link linkInfo) error {
	return adm.add(func() error { return k.writeAddress(ip, link, false) })
}

// writeAddress adds the address, or with replace rewrites an existing one,
// which restarts its lifetime. Note that the kernel creates a missing IPv4
// address even when asked to replace: Refresh must not rewrite an address
// Apply removed since it was read (Dataplane.refreshMu).
func (k *kernel) writeAddress(ip netip.Addr, link linkInfo, replace bool) error {
	op := unix.NLM_F_CREATE | unix.NLM_F_EXCL | unix.NLM_F_ACK
	if replace {
		op = unix.NLM_F_REPLACE | unix.NLM_F_ACK
	}
	req := nl.NewNetlinkRequest(unix.RTM_NEWADDR, op)
	req.Sockets = k.rt
	addAddrHeader(req, ip, link.Index)
	flags := uint32(unix.IFA_F_NOPREFIXROUTE)
	valid := uint32(math.MaxUint32) // forever
	if k.opts.AddressLifetime > 0 {
		valid = uint32(k.opts.AddressLifetime / time.Second)
	}
	if ip.Is6() {
		flags |= unix.IFA_F_NODAD
		// Preferred for 0 seconds: deprecated.
		ci := nl.IfaCacheInfo{IfaCacheinfo: unix.IfaCacheinfo{Valid: valid}}
		req.AddData(nl.NewRtAttr(unix.IFA_CACHEINFO, ci.Serialize()))
	} else {
		if valid != math.MaxUint32 {
			ci := nl.IfaCacheInfo{IfaCacheinfo: unix.IfaCacheinfo{Valid: valid, Prefered: valid}} //nolint:misspell // x/sys spells it so
			req.AddData(nl.NewRtAttr(unix.IFA_CACHEINFO, ci.Serialize()))
		}
		if label := addrLabel(link.Name); label != "" {
			req.AddData(nl.NewRtAttr(unix.IFA_LABEL, nl.ZeroTerminated(label)))
		}
	}
	req.AddData(nl.NewRtAttr(unix.IFA_FLAGS, nl.Uint32Attr(flags)))
	req.AddData(nl.NewRtAttr(ifaProto, []byte{AddressProtocol}))
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}

// delAddress removes a; an address that is already gone is not an error.
func (k *kernel) delAddress(a hostAddr) error {
	req := nl.NewNetlinkRequest(unix.RTM_DELADDR, unix.NLM_F_ACK)
	req.Sockets = k.rt
	addAddrHeader(req, a.IP, a.LinkIndex)
	if a.Proto != 0 {
		// Kernels that know IFA_PROTO delete only an address with it.
		req.AddData(nl.NewRtAttr(ifaProto, []byte{a.Proto}))
	}
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	if errors.Is(err, unix.EADDRNOTAVAIL) || errors.Is(err, unix.ENODEV) {
		return nil
	}
	return err
}

// addAddrHeader adds the message and address attributes naming ip as a
// host address on the interface with index link.
func addAddrHeader(req *nl.NetlinkRequest, ip netip.Addr, link int) {
	family := unix.AF_INET
	if ip.Is6() {
		family = unix.AF_INET6
	}
	msg := nl.NewIfAddrmsg(family)
	msg.Index = uint32(link)
	msg.Prefixlen = uint8(ip.BitLen())
	msg.Scope = unix.RT_SCOPE_UNIVERSE
	req.AddData(msg)
	raw := ip.AsSlice()
	req.AddData(nl.NewRtAttr(unix.IFA_LOCAL, raw))
	req.AddData(nl.NewRtAttr(unix.IFA_ADDRESS, raw))
}

// read collects what kubext has programmed.
func (k *kernel) read(links linkSet) (state, error) {
	cur := state{foreign: map[netip.Addr]string{}, rules: map[ruleSpec]bool{}}
	addrs, err := k.listAddresses(links)
	if err != nil {
		return cur, err
	}
	for _, a := range addrs {
		if a.owned {
			cur.addrs = append(cur.addrs, a)
		} else {
			cur.foreign[a.IP] = links.name(a.LinkIndex)
		}
	}
	if cur.nat, _, err = k.readNAT(); err != nil {
		return cur, err
	}
	rules, err := k.ownedRules()
	if err != nil {
		return cur, err
	}
	for _, r := range rules {
		if spec, ok := ruleSpecOf(r); ok {
			cur.rules[spec] = true
		}
	}
	return cur, nil
}

// ruleSpecOf reads a "from <host> lookup <table>" rule.
func ruleSpecOf(r netlink.Rule) (ruleSpec, bool) {
	if r.Src == nil {
		return ruleSpec{}, false
	}
	p, ok := prefixOf(r.Src)
	if !ok || !p.IsSingleIP() {
		return ruleSpec{}, false
	}
	return ruleSpec{Pod: p.Addr(), Table: r.Table}, true
}
