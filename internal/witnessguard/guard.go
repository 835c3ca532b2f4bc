// Package witnessguard keeps floods off the witness port (docs/design/failover.md,
// "The witness port under attack"). The protocol itself refuses forged and
// replayed datagrams (HMAC, signatures, generation, probe matching), but refusing costs
// a read and a MAC, and a socket buffer full of junk drops the probes and
// answers that hold the node's addresses: every hold lapses, the witnesses
// declare a live node silent, and its addresses go dark (a denial of
// service, never a split). So the kernel drops, before the socket:
//
//   - datagrams to the port from outside the node network (AllowFrom),
//     pods and the Internet included;
//   - from each source inside it, whatever goes beyond many times what a
//     peer sends (PerSource): one node, or one host-network pod, flooding
//     cannot crowd the others out.
//
// The table, kubext's alone, is replaced whole in one batch:
//
//	table inet kubext-witness {
//	  set allow4 { type ipv4_addr; flags interval }       # AllowFrom
//	  set allow6 { type ipv6_addr; flags interval }
//	  set flood4 { type ipv4_addr; flags dynamic,timeout; timeout 10s }  # per-source meters
//	  set flood6 { type ipv6_addr; flags dynamic,timeout; timeout 10s }
//	  chain input { type filter hook input priority filter - 10; policy accept;
//	    udp dport PORT ip saddr != @allow4 drop        (with AllowFrom: a family it names no network of is dropped whole)
//	    udp dport PORT update @flood4 { ip saddr limit rate over PerSource/second burst PerSource packets } drop
//	    udp dport PORT update @flood6 { ip6 saddr limit rate over ... } drop
//	  }
//	}
//
// What it cannot do: tell a forged source address from a real one. An
// attacker on the node network that forges a peer's address spends that
// peer's allowance (and from many forged addresses passes the meters);
// keeping node addresses unforgeable (reverse-path filtering, the
// network's anti-spoofing) is the network's part.
package witnessguard

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
	"k8s.io/utils/ptr"

	"github.com/kubext/kubext/internal/witness"
)

// TableName is the guard's nftables table (family inet).
const TableName = "kubext-witness"

// meterIdle is how long a source's meter outlives its last datagram.
const meterIdle = 10 * time.Second

// meterSize bounds the meters, one per source: a flood from forged
// sources must not grow the kernel's memory without end. Past it, new
// sources go unmetered (still subject to AllowFrom).
const meterSize = 65536

// Config is what the guard lets through.
type Config struct {
	// Port is the witness port (UDP).
	Port uint16
	// AllowFrom are the networks peers send from: the node network. Empty:
	// any source (each still metered). Not empty, a family it names no
	// network of is refused whole (IPv6 to a node network of IPv4).
	AllowFrom []netip.Prefix
	// PerSource is how many datagrams a second one source may send to the
	// port, and the burst it may send at once (PerSourceRate).
	PerSource uint32
}

// PerSourceRate is how many datagrams a second the guard lets one source
// send: fifty times what a peer sends at this timing, and at least 250. A
// peer sends a node a probe every ProbeInterval when the node witnesses
// one of its holds and an answer to each of the node's probes, and probes
// at once, off the ticker, when its witnesses or its generation change;
// the margin covers those, clock jitter, and a few light agents sharing an
// address. It is wide for another reason: an attacker who forges a peer's
// source address spends that peer's allowance, and the wider it is the
// more a forger must send before the peer's own datagrams are dropped
// (still a few percent of what filling the socket takes).
func PerSourceRate(t witness.Timing) uint32 {
	perSecond := 2 * float64(time.Second) / float64(t.ProbeInterval)
	return uint32(max(250, 50*perSecond))
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Port == 0 {
		return errors.New("witnessguard: a port is required")
	}
	if c.PerSource == 0 {
		return errors.New("witnessguard: a per-source rate is required")
	}
	for _, p := range c.AllowFrom {
		if !p.IsValid() || p != p.Masked() {
			return fmt.Errorf("witnessguard: %s is not a network address with its prefix length", p)
		}
	}
	return nil
}

// family describes the parts of an IP family the rules use.
type family struct {
	suffix   string
	nfproto  byte
	addrType nftables.SetDatatype
	srcOff   uint32
	addrLen  uint32
	is4      bool
}

var families = []family{
	{suffix: "4", nfproto: unix.NFPROTO_IPV4, addrType: nftables.TypeIPAddr, srcOff: 12, addrLen: 4, is4: true},
	{suffix: "6", nfproto: unix.NFPROTO_IPV6, addrType: nftables.TypeIP6Addr, srcOff: 8, addrLen: 16},
}

// Install replaces the guard's table with one for cfg, in one batch:
// there is no moment without a guard once there was one. netnsFd is the
// network namespace to write in (0: this process's).
func Install(cfg Config, netnsFd int) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	c, err := conn(netnsFd)
	if err != nil {
		return err
	}
	t := table()
	// Adding then deleting the table removes an earlier one, or nothing,
	// without failing the batch.
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	prio := nftables.ChainPriority(*nftables.ChainPriorityFilter - 10)
	chain := c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: &prio, Policy: ptr.To(nftables.ChainPolicyAccept)})
	id := uint32(0)
	for _, f := range families {
		// An allowlist that names no network of a family allows none of
		// it: its set stays empty, and every datagram of that family to
		// the port is dropped.
		allow := f.prefixes(cfg.AllowFrom)
		if len(cfg.AllowFrom) > 0 && !slices.ContainsFunc(allow, func(p netip.Prefix) bool { return p.Bits() == 0 }) {
			id++
			set := &nftables.Set{Table: t, ID: id, Name: "allow" + f.suffix, KeyType: f.addrType, Interval: true}
			if err := c.AddSet(set, intervals(allow)); err != nil {
				return fmt.Errorf("witnessguard: %w", err)
			}
			c.AddRule(&nftables.Rule{Table: t, Chain: chain, Exprs: slices.Concat(f.toPort(cfg.Port), f.loadSource(),
				[]expr.Any{&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID, Invert: true},
					&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}})})
		}
		id++
		meter := &nftables.Set{Table: t, ID: id, Name: "flood" + f.suffix, KeyType: f.addrType,
			Dynamic: true, HasTimeout: true, Timeout: meterIdle, Size: meterSize}
		if err := c.AddSet(meter, nil); err != nil {
			return fmt.Errorf("witnessguard: %w", err)
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: chain, Exprs: slices.Concat(f.toPort(cfg.Port), f.loadSource(),
			[]expr.Any{&expr.Dynset{SrcRegKey: 1, SetName: meter.Name, SetID: meter.ID, Operation: unix.NFT_DYNSET_OP_UPDATE,
				Timeout: meterIdle, Exprs: []expr.Any{&expr.Limit{Type: expr.LimitTypePkts, Over: true,
					Rate: uint64(cfg.PerSource), Unit: expr.LimitTimeSecond, Burst: cfg.PerSource}}},
				&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}})})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("witnessguard: writing table %s: %w", TableName, err)
	}
	return nil
}

// Remove deletes the guard's table, if there is one.
func Remove(netnsFd int) error {
	c, err := conn(netnsFd)
	if err != nil {
		return err
	}
	t := table()
	c.AddTable(t)
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("witnessguard: removing table %s: %w", TableName, err)
	}
	return nil
}

// Dropped reads how many datagrams the guard dropped: from outside
// AllowFrom, and over a source's rate.
func Dropped(netnsFd int) (outside, overRate uint64, err error) {
	c, err := conn(netnsFd)
	if err != nil {
		return 0, 0, err
	}
	t, err := c.ListTableOfFamily(TableName, nftables.TableFamilyINet)
	if err != nil {
		return 0, 0, fmt.Errorf("witnessguard: reading table %s: %w", TableName, err)
	}
	rules, err := c.GetRules(t, &nftables.Chain{Name: "input", Table: t})
	if err != nil {
		return 0, 0, fmt.Errorf("witnessguard: reading table %s: %w", TableName, err)
	}
	for _, r := range rules {
		var n uint64
		metered := false
		for _, e := range r.Exprs {
			switch e := e.(type) {
			case *expr.Counter:
				n = e.Packets
			case *expr.Dynset:
				metered = true
			}
		}
		if metered {
			overRate += n
		} else {
			outside += n
		}
	}
	return outside, overRate, nil
}

// table is the guard's table, to add, delete or read.
func table() *nftables.Table {
	return &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
}

func conn(netnsFd int) (*nftables.Conn, error) {
	if netnsFd != 0 {
		return nftables.New(nftables.WithNetNSFd(netnsFd))
	}
	return nftables.New()
}

// prefixes are the prefixes of this family.
func (f family) prefixes(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.Addr().Unmap().Is4() == f.is4 {
			out = append(out, netip.PrefixFrom(p.Addr().Unmap(), p.Bits()).Masked())
		}
	}
	return out
}

// toPort matches datagrams of this family to the port.
func (f family) toPort(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{f.nfproto}},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_UDP}},
		&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
	}
}

// loadSource loads the source address into register 1.
func (f family) loadSource() []expr.Any {
	return []expr.Any{&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1,
		Base: expr.PayloadBaseNetworkHeader, Offset: f.srcOff, Len: f.addrLen}}
}

// intervals are the elements of an interval set holding ps: each range
// as its first address and the address after its last, flagged as an
// end. Overlapping prefixes are merged first (the kernel refuses them).
func intervals(ps []netip.Prefix) []nftables.SetElement {
	ps = merge(ps)
	var out []nftables.SetElement
	for _, p := range ps {
		out = append(out, nftables.SetElement{Key: p.Addr().AsSlice()})
		if end, ok := after(p); ok {
			out = append(out, nftables.SetElement{Key: end.AsSlice(), IntervalEnd: true})
		}
	}
	return out
}

// merge drops the prefixes another one contains.
func merge(ps []netip.Prefix) []netip.Prefix {
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	var out []netip.Prefix
	for _, p := range ps {
		if len(out) > 0 && out[len(out)-1].Contains(p.Addr()) {
			continue // sorted: a contained prefix follows its container
		}
		out = append(out, p)
	}
	return out
}

// after is the first address past p, unless p ends the address space.
func after(p netip.Prefix) (netip.Addr, bool) {
	b := p.Addr().AsSlice()
	host := len(b)*8 - p.Bits()
	// Add 1 << host to the address, carrying.
	for i := len(b) - 1 - host/8; i >= 0; i-- {
		inc := byte(1)
		if i == len(b)-1-host/8 {
			inc = 1 << (host % 8)
		}
		sum := uint16(b[i]) + uint16(inc)
		b[i] = byte(sum)
		if sum < 256 {
			a, _ := netip.AddrFromSlice(b)
			return a, true
		}
	}
	return netip.Addr{}, false
}
