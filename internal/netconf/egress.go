package netconf

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// The egress gate is the hold gate's last check. The inet and arp tables
// judge a packet when the stack emits it; a packet that passed them while
// the hold was valid can still wait in the neighbour table's queue for an
// unresolved next hop (the node cut off, its link down) and leave when
// the link comes back, after the deadline: a revived node would speak as
// the address for a few milliseconds after another node took it over. A
// netdev egress chain runs in __dev_queue_xmit, as each frame is handed
// to the device, so it judges those frames when they actually leave, and
// the frames of packet sockets too:
//
//	table netdev kubext {
//	  set owned4 { type ipv4_addr }   set held4 { type ipv4_addr; flags timeout }
//	  (owned6, held6 alike)
//	  chain egress-<uplink> { type filter hook egress device <uplink> priority filter
//	    meta protocol ip   ip saddr @owned4 ip saddr != @held4 drop
//	    meta protocol ip6  ip6 saddr @owned6 ip6 saddr != @held6 drop
//	    meta protocol arp  arp saddr ip @owned4 arp saddr ip != @held4 drop }
//	}
//
// A netdev chain hooks one device: there is one per uplink that carries a
// translated address (the interfaces of the SNAT maps), named after it,
// and the table is rebuilt whenever that set changes. Its sets get the
// same elements as the inet and arp tables', in the same batches (a batch
// is atomic across tables). Frames already in a qdisc or a driver's ring
// are past every hook (a carrier loss drops the qdisc's).
//
// The egress hook needs Linux 5.16 with CONFIG_NETFILTER_EGRESS. A kernel
// that refuses it gets the rest of the gate, and one log line that says
// what is missing.

var egressPriority = nftables.ChainPriority(0) // filter

const egressChainPrefix = "egress-"

// ethertypes as meta protocol loads them (network byte order).
var (
	ethIPv4 = []byte{0x08, 0x00}
	ethIPv6 = []byte{0x86, 0xdd}
	ethARP  = []byte{0x08, 0x06}
)

// egressSupport is shared by a Dataplane's kernel handles: the hook the
// chains use, and whether the kernel refused it.
type egressSupport struct {
	hook    *nftables.ChainHook
	refused atomic.Bool
}

func newEgressSupport() *egressSupport {
	return &egressSupport{hook: nftables.ChainHookEgress}
}

// egressGate is the netdev table for a set of uplinks.
type egressGate struct {
	table       *nftables.Table
	owned, held map[string]*nftables.Set // by family name
	chains      []*nftables.Chain
	rules       []*nftables.Rule
}

// buildEgress builds the netdev table gating devices (sorted, unique).
// Pure: the kernel is not touched.
func buildEgress(tableName string, hook *nftables.ChainHook, devices []string) *egressGate {
	t := &nftables.Table{Name: tableName, Family: nftables.TableFamilyNetdev}
	e := &egressGate{table: t, owned: map[string]*nftables.Set{}, held: map[string]*nftables.Set{}}
	id := uint32(0)
	for _, f := range []ipFamily{familyIPv4, familyIPv6} {
		id++
		e.owned[f.name] = &nftables.Set{Table: t, ID: id, Name: "owned" + f.suffix, KeyType: f.addrType}
		id++
		e.held[f.name] = &nftables.Set{Table: t, ID: id, Name: "held" + f.suffix, HasTimeout: true, KeyType: f.addrType}
	}
	v4, v6 := familyIPv4.name, familyIPv6.name
	for _, dev := range devices {
		c := &nftables.Chain{Name: egressChainPrefix + dev, Table: t, Type: nftables.ChainTypeFilter, Hooknum: hook, Priority: &egressPriority, Device: dev}
		e.chains = append(e.chains, c)
		for _, r := range []struct {
			name      string
			ethertype []byte
			exprs     []expr.Any
		}{
			{"egress ipv4", ethIPv4, notHeld(familyIPv4.srcOff, familyIPv4.addrLen, e.owned[v4], e.held[v4])},
			{"egress ipv6", ethIPv6, notHeld(familyIPv6.srcOff, familyIPv6.addrLen, e.owned[v6], e.held[v6])},
			{"egress arp", ethARP, notHeld(arpSenderIPOffset, 4, e.owned[v4], e.held[v4])},
		} {
			match := []expr.Any{
				&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: regValue},
				&expr.Cmp{Op: expr.CmpOpEq, Register: regValue, Data: r.ethertype},
			}
			e.rules = append(e.rules, &nftables.Rule{Table: t, Chain: c, Exprs: slices.Concat(match, r.exprs),
				UserData: userdata.AppendString(nil, userdata.TypeComment, ruleComment(r.name))})
		}
	}
	return e
}

// devices are the devices e hooks, in order.
func (e *egressGate) devices() []string {
	out := make([]string, 0, len(e.chains))
	for _, c := range e.chains {
		out = append(out, c.Device)
	}
	return out
}

func (e *egressGate) sets() []*nftables.Set {
	return []*nftables.Set{e.owned[familyIPv4.name], e.owned[familyIPv6.name], e.held[familyIPv4.name], e.held[familyIPv6.name]}
}

// uplinks are the interfaces the SNAT maps of n lead out of, by name,
// sorted: the devices the egress gate hooks.
func uplinks(n natState, links linkSet) []string {
	var out []string
	for k := range n.snat {
		if name := links.name(k.Link); name != "" && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// egressState is the netdev table as read back.
type egressState struct {
	// current: the table is as buildEgress writes it for devices.
	current bool
	devices []string
}

// readEgress reads the netdev table into elems (set names prefixed
// "netdev/"). A table this code would not write, or none, reads as not
// current; its elements are not read.
func (k *kernel) readEgress(elems map[string][]nftables.SetElement) (egressState, error) {
	tables, err := k.nft.ListTablesOfFamily(nftables.TableFamilyNetdev)
	if err != nil {
		return egressState{}, fmt.Errorf("list netdev tables: %w", err)
	}
	if !slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == k.opts.TableName }) {
		return egressState{}, nil
	}
	chains, err := k.nft.ListChainsOfTableFamily(nftables.TableFamilyNetdev)
	if err != nil {
		return egressState{}, fmt.Errorf("list netdev chains: %w", err)
	}
	var st egressState
	for _, c := range chains {
		if c.Table.Name != k.opts.TableName {
			continue
		}
		dev, ok := strings.CutPrefix(c.Name, egressChainPrefix)
		if !ok {
			return egressState{}, nil
		}
		st.devices = append(st.devices, dev)
	}
	slices.Sort(st.devices)
	want := buildEgress(k.opts.TableName, k.egress.hook, st.devices)
	for _, c := range want.chains {
		i := slices.IndexFunc(chains, func(have *nftables.Chain) bool { return have.Table.Name == c.Table.Name && have.Name == c.Name })
		if !sameHook(chains[i], c) {
			return egressState{}, nil
		}
		rules, err := k.nft.GetRules(want.table, c)
		if err != nil {
			return egressState{}, fmt.Errorf("list netdev rules: %w", err)
		}
		if !slices.Equal(ruleComments(rules), want.comments(c)) {
			return egressState{}, nil
		}
	}
	sets, err := k.nft.GetSets(want.table)
	if err != nil {
		return egressState{}, fmt.Errorf("list netdev sets: %w", err)
	}
	if len(sets) != len(want.sets()) {
		return egressState{}, nil
	}
	for _, s := range want.sets() {
		i := slices.IndexFunc(sets, func(have *nftables.Set) bool { return have.Name == s.Name })
		if i < 0 || sets[i].HasTimeout != s.HasTimeout || sets[i].KeyType.Bytes != s.KeyType.Bytes {
			return egressState{}, nil
		}
		got, err := k.nft.GetSetElements(sets[i])
		if err != nil {
			return egressState{}, fmt.Errorf("read netdev set %s: %w", s.Name, err)
		}
		elems["netdev/"+s.Name] = got
	}
	st.current = true
	return st, nil
}

// comments are the comments of c's rules, in order.
func (e *egressGate) comments(c *nftables.Chain) []string {
	var out []string
	for _, r := range e.rules {
		if r.Chain == c {
			out = append(out, ruleComments([]*nftables.Rule{r})...)
		}
	}
	return out
}

func ruleComments(rules []*nftables.Rule) []string {
	out := make([]string, 0, len(rules))
	for _, r := range rules {
		c, _ := userdata.GetString(r.UserData, userdata.TypeComment)
		out = append(out, c)
	}
	return out
}

// addEgressTable queues, in b, the netdev table for e replaced whole,
// with the gate's elements (see gateElements); with no device, its
// removal.
func addEgressTable(b *nftables.Conn, e *egressGate, owned, held map[string][]nftables.SetElement) error {
	b.AddTable(e.table)
	b.DelTable(e.table)
	if len(e.chains) == 0 {
		return nil
	}
	b.AddTable(e.table)
	for _, s := range e.sets() {
		if err := b.AddSet(s, append(slices.Clone(owned[s.Name]), held[s.Name]...)); err != nil {
			return fmt.Errorf("nftables netdev set %s: %w", s.Name, err)
		}
	}
	for _, c := range e.chains {
		b.AddChain(c)
	}
	for _, r := range e.rules {
		b.AddRule(r)
	}
	return nil
}

// egressRefused reports whether err is the kernel refusing an egress
// hook (older than 5.16, or built without CONFIG_NETFILTER_EGRESS); the
// gate then goes without it, saying so once.
func (k *kernel) egressRefused(err error) bool {
	if !errors.Is(err, unix.EOPNOTSUPP) || k.egress.refused.Swap(true) {
		return false
	}
	k.log.Info("this kernel refuses nftables netdev egress chains (Linux 5.16 with CONFIG_NETFILTER_EGRESS): "+
		"the hold gate works without its egress check, so frames queued for an unresolved neighbour before a hold's deadline may leave after it",
		"error", err.Error())
	return true
}

// egressFor is the egress gate for n, or nil when the kernel refused it.
func (k *kernel) egressFor(n natState, links linkSet) *egressGate {
	if k.egress.refused.Load() {
		return nil
	}
	return buildEgress(k.opts.TableName, k.egress.hook, uplinks(n, links))
}
