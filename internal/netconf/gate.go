package netconf

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// The hold gate enforces Options.GateDeadline in the kernel with the
// resolution of nftables element timeouts (milliseconds, checked at every
// lookup), where address lifetimes have whole seconds and are reaped
// late. Every address kubext programs is "owned"; it is also "held" until
// the deadline, as an element whose timeout ends then. Once the element
// has expired, and until a refresh puts it back, the node is silent for
// the address although it is still on the interface:
//
//	table inet kubext {
//	  set owned4 { type ipv4_addr }   set held4 { type ipv4_addr; flags timeout }
//	  (owned6, held6 alike)
//	  chain hold-in  { type filter hook prerouting priority raw: before DNAT and before
//	                   the local stack, nothing addressed to it reaches the pod or the host
//	    ip daddr @owned4 ip daddr != @held4 drop ... }
//	  chain hold-out { type filter hook postrouting priority srcnat + 100: after SNAT,
//	                   so the pod's traffic leaving as the address is seen as such
//	    ip saddr @owned4 ip saddr != @held4 drop ...  (neighbour advertisements too) }
//	}
//	table arp kubext {
//	  set owned { type ipv4_addr }   set held { type ipv4_addr; flags timeout }
//	  chain out { type filter hook output priority 0
//	    arp saddr ip @owned arp saddr ip != @held drop }   # ARP replies and requests as the address
//	}
//
// Gratuitous ARP and unsolicited neighbour advertisements go out through
// packet sockets, which no hook sees: the agent's announcements stop at the
// deadline themselves (holdOver).

var (
	gateInPriority  = nftables.ChainPriority(-300) // raw
	gateOutPriority = nftables.ChainPriority(200)  // after srcnat (100)
	arpOutPriority  = nftables.ChainPriority(0)
)

// arpHookOut is NF_ARP_OUT: the arp family numbers its hooks apart from
// the inet ones (nftables.ChainHookOutput is NF_INET_LOCAL_OUT, 3).
const arpHookOut = 1

// arpSenderIPOffset is where the sender's protocol address starts in an
// ARP packet for IPv4 over Ethernet: after hardware and protocol types
// (2+2), their lengths (1+1), the operation (2) and the sender's MAC (6).
const arpSenderIPOffset = 14

// gateSets are the owned and held sets of the inet table, by family name,
// and of the arp table.
type gateSets struct {
	owned, held       map[string]*nftables.Set
	arpTable          *nftables.Table
	arpOwned, arpHeld *nftables.Set
	arpChain          *nftables.Chain
	arpRule           *nftables.Rule
}

// addGate adds the gate's sets, chains and rules to rs (the inet table)
// and builds the arp table. ids continues the set ids of rs's batch.
func (rs *ruleset) addGate(id uint32) {
	t := rs.table
	g := gateSets{owned: map[string]*nftables.Set{}, held: map[string]*nftables.Set{}}
	for _, f := range []ipFamily{familyIPv4, familyIPv6} {
		id++
		g.owned[f.name] = &nftables.Set{Table: t, ID: id, Name: "owned" + f.suffix, KeyType: f.addrType}
		id++
		g.held[f.name] = &nftables.Set{Table: t, ID: id, Name: "held" + f.suffix, HasTimeout: true, KeyType: f.addrType}
	}
	in := &nftables.Chain{Name: "hold-in", Table: t, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookPrerouting, Priority: &gateInPriority}
	out := &nftables.Chain{Name: "hold-out", Table: t, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookPostrouting, Priority: &gateOutPriority}
	rs.chains = append(rs.chains, in, out)
	for _, f := range []ipFamily{familyIPv4, familyIPv6} {
		rs.add(in, "hold in "+f.name, slices.Concat(matchFamily(f), notHeld(f.dstOff, f.addrLen, g.owned[f.name], g.held[f.name])))
		rs.add(out, "hold out "+f.name, slices.Concat(matchFamily(f), notHeld(f.srcOff, f.addrLen, g.owned[f.name], g.held[f.name])))
	}
	g.arpTable = &nftables.Table{Name: t.Name, Family: nftables.TableFamilyARP}
	g.arpOwned = &nftables.Set{Table: g.arpTable, ID: 1, Name: "owned", KeyType: nftables.TypeIPAddr}
	g.arpHeld = &nftables.Set{Table: g.arpTable, ID: 2, Name: "held", HasTimeout: true, KeyType: nftables.TypeIPAddr}
	g.arpChain = &nftables.Chain{Name: "out", Table: g.arpTable, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookRef(arpHookOut), Priority: &arpOutPriority}
	g.arpRule = &nftables.Rule{Table: g.arpTable, Chain: g.arpChain,
		Exprs:    notHeld(arpSenderIPOffset, 4, g.arpOwned, g.arpHeld),
		UserData: userdata.AppendString(nil, userdata.TypeComment, ruleComment("hold arp"))}
	rs.gate = g
}

// notHeld drops a packet whose address at off (network header) is owned
// but not held.
func notHeld(off, n uint32, owned, held *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: regValue, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
		&expr.Lookup{SourceRegister: regValue, SetName: owned.Name, SetID: owned.ID},
		&expr.Lookup{SourceRegister: regValue, SetName: held.Name, SetID: held.ID, Invert: true},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
}

// sets are the gate's sets of the inet table.
func (g gateSets) sets() []*nftables.Set {
	return []*nftables.Set{g.owned[familyIPv4.name], g.owned[familyIPv6.name], g.held[familyIPv4.name], g.held[familyIPv6.name]}
}

// gateTimeout is the timeout a held element written now gets: until
// Options.GateDeadline, in whole milliseconds; ok is false when the
// deadline has passed (the element is not written, so the address stays
// silent). Without a deadline elements never expire.
func (k *kernel) gateTimeout(now time.Time) (timeout time.Duration, ok bool) {
	if k.opts.GateDeadline == nil {
		return 0, true
	}
	left := k.opts.GateDeadline().Sub(now).Truncate(time.Millisecond)
	return left, left >= time.Millisecond
}

// errGateLate says a gate write committed too late twice running (see
// gateCommitted): the gate was closed.
var errGateLate = fmt.Errorf("%w (the hold gate's writes committed late; closed until the next refresh)", ErrLapsed)

// gateCommitted checks a gate write that committed before done, whose
// timeouts were computed at computed. The kernel counts an element's
// timeout from the commit, so a write held up between the two (the agent
// stopped, frozen or starved of CPU) keeps the gate open past the
// deadline by as long. Later than Options.GateLateLimit, the gate is
// written again at once, to the deadline counted afresh (closed for
// addresses whose deadline has passed); if that is late too (again), it
// is closed, and errGateLate (ErrLapsed: apply again) returned.
func (k *kernel) gateCommitted(adm pass, computed, done time.Time, again bool) error {
	if k.opts.GateDeadline == nil || computed.IsZero() {
		return nil
	}
	late := done.Sub(computed)
	if late <= k.opts.GateLateLimit {
		return nil
	}
	if !again {
		k.log.Info("A hold gate write committed late: writing it again to the deadline", "late", late, "limit", k.opts.GateLateLimit)
		err := k.refreshGateOnce(adm, true)
		if err == nil || errors.Is(err, errGateLate) {
			return err
		}
		k.log.Info("Writing the hold gate again failed: closing it", "error", err.Error())
	} else {
		k.log.Info("A hold gate write committed late again: closing the gate until the next refresh", "late", late, "limit", k.opts.GateLateLimit)
	}
	if err := k.closeGate(); err != nil {
		return errors.Join(errGateLate, err)
	}
	return errGateLate
}

// flushGate flushes b, which holds gate elements whose timeouts were
// computed at computed, through adm, and checks how late it committed
// (again: this is the rewrite of a late one).
func (k *kernel) flushGate(adm pass, b *nftables.Conn, computed time.Time, again bool) error {
	if err := adm.add(func() error {
		if k.beforeGateFlush != nil {
			k.beforeGateFlush()
		}
		return b.Flush()
	}); err != nil {
		return err
	}
	return k.gateCommitted(adm, computed, time.Now(), again)
}

// gateElements are the owned and held elements for the addresses, by set
// name (inet table) and for the arp table.
// computed is when their timeout was computed.
func (k *kernel) gateElements(addrs []netip.Addr) (owned, held map[string][]nftables.SetElement, arpOwned, arpHeld []nftables.SetElement, computed time.Time) {
	owned, held = map[string][]nftables.SetElement{}, map[string][]nftables.SetElement{}
	computed = time.Now()
	timeout, ok := k.gateTimeout(computed)
	for _, a := range addrs {
		f := familyOf(a)
		owned["owned"+f.suffix] = append(owned["owned"+f.suffix], nftables.SetElement{Key: a.AsSlice()})
		if a.Is4() {
			arpOwned = append(arpOwned, nftables.SetElement{Key: a.AsSlice()})
		}
		if !ok {
			continue
		}
		held["held"+f.suffix] = append(held["held"+f.suffix], nftables.SetElement{Key: a.AsSlice(), Timeout: timeout})
		if a.Is4() {
			arpHeld = append(arpHeld, nftables.SetElement{Key: a.AsSlice(), Timeout: timeout})
		}
	}
	return owned, held, arpOwned, arpHeld, computed
}

// writeGate queues, in b, the gate's elements for addrs (the addresses
// the table translates after this batch): owned exactly those, and each
// held again until the deadline (deleted and added, so that its timeout
// starts over; one batch, so no packet finds it missing). have are the
// elements read before, by set name, with "arp/" before the arp table's
// and "netdev/" before the egress table's. eg is the egress gate wanted
// (nil: none); est what readGate found of it: its sets are updated when
// it is eg already, and it is replaced whole otherwise. It returns when
// the held elements' timeouts were computed (for flushGate).
func (k *kernel) writeGate(b *nftables.Conn, rs *ruleset, eg *egressGate, est egressState, addrs []netip.Addr, have map[string][]nftables.SetElement) (time.Time, error) {
	g := rs.gate
	owned, held, arpOwned, arpHeld, computed := k.gateElements(addrs)
	queue := func(s *nftables.Set, have, want []nftables.SetElement, refresh bool) error {
		del, add := diffElements(have, want)
		if refresh {
			// Every present element that stays goes and comes back.
			del, add = nil, want
			for _, e := range have {
				del = append(del, nftables.SetElement{Key: e.Key})
			}
		}
		if len(del) > 0 {
			if err := b.SetDeleteElements(s, del); err != nil {
				return fmt.Errorf("nftables set %s: %w", s.Name, err)
			}
		}
		if len(add) > 0 {
			if err := b.SetAddElements(s, add); err != nil {
				return fmt.Errorf("nftables set %s: %w", s.Name, err)
			}
		}
		return nil
	}
	var errs []error
	for _, f := range []ipFamily{familyIPv4, familyIPv6} {
		o, h := g.owned[f.name], g.held[f.name]
		errs = append(errs, queue(o, have[o.Name], owned[o.Name], false), queue(h, have[h.Name], held[h.Name], true))
	}
	errs = append(errs, queue(g.arpOwned, have["arp/owned"], arpOwned, false), queue(g.arpHeld, have["arp/held"], arpHeld, true))
	switch {
	case eg == nil:
	case est.current && slices.Equal(est.devices, eg.devices()):
		for _, f := range []ipFamily{familyIPv4, familyIPv6} {
			o, h := eg.owned[f.name], eg.held[f.name]
			errs = append(errs, queue(o, have["netdev/"+o.Name], owned[o.Name], false), queue(h, have["netdev/"+h.Name], held[h.Name], true))
		}
	default:
		errs = append(errs, addEgressTable(b, eg, owned, held))
	}
	return computed, errors.Join(errs...)
}

// readGate reads the gate's elements (see writeGate for the names) and
// what there is of the egress gate.
func (k *kernel) readGate(rs *ruleset) (map[string][]nftables.SetElement, egressState, error) {
	out := map[string][]nftables.SetElement{}
	read := func(prefix string, s *nftables.Set) error {
		elems, err := k.nft.GetSetElements(s)
		if err != nil {
			return fmt.Errorf("read set %s: %w", s.Name, err)
		}
		out[prefix+s.Name] = elems
		return nil
	}
	for _, s := range rs.gate.sets() {
		if err := read("", s); err != nil {
			return nil, egressState{}, err
		}
	}
	for _, s := range []*nftables.Set{rs.gate.arpOwned, rs.gate.arpHeld} {
		if err := read("arp/", s); err != nil {
			return nil, egressState{}, err
		}
	}
	est, err := k.readEgress(out)
	if err != nil {
		return nil, egressState{}, err
	}
	return out, est, nil
}

// arpCurrent reports whether the arp table is as this code writes it.
func (k *kernel) arpCurrent(rs *ruleset) (bool, error) {
	chains, err := k.nft.ListChainsOfTableFamily(nftables.TableFamilyARP)
	if err != nil {
		return false, fmt.Errorf("list arp chains: %w", err)
	}
	i := slices.IndexFunc(chains, func(c *nftables.Chain) bool {
		return c.Table.Name == rs.gate.arpTable.Name && c.Name == rs.gate.arpChain.Name
	})
	if i < 0 || !sameHook(chains[i], rs.gate.arpChain) {
		return false, nil
	}
	rules, err := k.nft.GetRules(rs.gate.arpTable, chains[i])
	if err != nil {
		return false, fmt.Errorf("list arp rules: %w", err)
	}
	want, _ := userdata.GetString(rs.gate.arpRule.UserData, userdata.TypeComment)
	if len(rules) != 1 {
		return false, nil
	}
	got, _ := userdata.GetString(rules[0].UserData, userdata.TypeComment)
	return got == want, nil
}

// refreshGate restarts the timeout of every held element at the deadline,
// and holds again what the deadline let lapse. It retries a batch that
// raced an expiry (as refreshNAT does).
func (k *kernel) refreshGate(adm pass) error {
	if k.opts.GateDeadline == nil {
		return nil
	}
	for attempt := 1; ; attempt++ {
		err := k.onOneSocket(func() error { return k.refreshGateOnce(adm, false) })
		if err == nil || !errors.Is(err, unix.ENOENT) || attempt == maxDumpAttempts {
			return err
		}
	}
}

// again: it rewrites a write that committed late (gateCommitted).
func (k *kernel) refreshGateOnce(adm pass, again bool) error {
	rs := k.ruleset()
	if exists, err := k.tableExists(); err != nil || !exists {
		return err
	}
	have, est, err := k.readGate(rs)
	if err != nil {
		return err
	}
	// The egress table is refreshed as it is; an Apply replaces it when
	// the uplinks changed or it is not as this code writes it.
	var eg *egressGate
	if est.current {
		eg = buildEgress(k.opts.TableName, k.egress.hook, est.devices)
	}
	var addrs []netip.Addr
	for _, name := range []string{"owned4", "owned6"} {
		for _, e := range have[name] {
			if a, ok := netip.AddrFromSlice(e.Key); ok {
				addrs = append(addrs, a)
			}
		}
	}
	if len(addrs) == 0 {
		return nil
	}
	b := k.batch()
	computed, err := k.writeGate(b, rs, eg, est, addrs, have)
	if err != nil {
		return err
	}
	if err := k.flushGate(adm, b, computed, again); err != nil {
		return fmt.Errorf("refresh the hold gate: %w", err)
	}
	return nil
}

// closeGate silences every address at once: the held sets emptied in one
// batch, before anything else of a flush. Never gated (it only silences).
func (k *kernel) closeGate() error {
	rs := k.ruleset()
	egress := buildEgress(k.opts.TableName, k.egress.hook, nil)
	var errs []error
	for _, c := range []struct {
		family nftables.TableFamily
		sets   []*nftables.Set
	}{
		{nftables.TableFamilyINet, []*nftables.Set{rs.gate.held[familyIPv4.name], rs.gate.held[familyIPv6.name]}},
		{nftables.TableFamilyARP, []*nftables.Set{rs.gate.arpHeld}},
		{nftables.TableFamilyNetdev, []*nftables.Set{egress.held[familyIPv4.name], egress.held[familyIPv6.name]}},
	} {
		tables, err := k.nft.ListTablesOfFamily(c.family)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == k.opts.TableName }) {
			continue
		}
		b := k.batch()
		for _, s := range c.sets {
			b.FlushSet(s)
		}
		if err := b.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("close the hold gate: %w", err))
		}
	}
	return errors.Join(errs...)
}
