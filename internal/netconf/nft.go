package netconf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// The nftables table is kubext's alone. Its rules never change with the
// assignments: they look the packet up in maps keyed by address, so adding
// or moving an address is a map update (one atomic batch, constant-time
// lookups however many addresses the node holds).
//
//	table inet kubext {
//	  map dnat4 { type ipv4_addr : ipv4_addr }                 # address -> pod
//	  map snat4 { type ipv4_addr . iface_index : ipv4_addr }   # pod . uplink -> address
//	  (dnat6, snat6 alike)
//	  chain prerouting  { type nat hook prerouting priority dstnat - 10
//	    dnat ip to ip daddr map @dnat4; dnat ip6 to ip6 daddr map @dnat6 }
//	  chain output      { same, hook output: the node's own traffic to an address }
//	  chain postrouting { type nat hook postrouting priority srcnat - 10
//	    ip daddr <excluded> return ...
//	    snat ip to ip saddr . oif map @snat4; snat ip6 to ip6 saddr . oif map @snat6 }
//	}
//
// With Options.AddressLifetime, the maps have timeouts (flags timeout) and
// every element expires that long after it was added or last refreshed,
// like the addresses: an agent that is frozen or killed before it could
// fence stops translating for a pod address that may by then belong to
// another pod. The routing rules of the pods have no timeout; a rule left
// without its SNAT element is harmless, since the pod's traffic then
// leaves with the pod's own address, never the static one.
//
// Every rule carries a comment naming it and the version of this layout;
// when the comments read back differ from what this code writes (first
// start, an upgrade, other ExcludeSNAT, someone edited the table) the
// table is rewritten in one batch.

const (
	rulesetVersion = "v2"
	// Registers: NFT_REG_1 (16 bytes) for single values; a concatenated
	// key starts at NFT_REG32_00, the address followed by the interface
	// index in the next 32-bit register.
	regValue  = 1
	regConcat = 8
)

var (
	dnatChainPriority = nftables.ChainPriority(-110) // dstnat - 10
	snatChainPriority = nftables.ChainPriority(90)   // srcnat - 10
)

// ipFamily describes the parts of an IP family the ruleset uses.
type ipFamily struct {
	name     string // "ipv4"
	suffix   string // of map names: "4"
	nfproto  byte
	addrType nftables.SetDatatype
	srcOff   uint32
	dstOff   uint32
	addrLen  uint32
}

var (
	familyIPv4 = ipFamily{name: "ipv4", suffix: "4", nfproto: unix.NFPROTO_IPV4, addrType: nftables.TypeIPAddr, srcOff: 12, dstOff: 16, addrLen: 4}
	familyIPv6 = ipFamily{name: "ipv6", suffix: "6", nfproto: unix.NFPROTO_IPV6, addrType: nftables.TypeIP6Addr, srcOff: 8, dstOff: 24, addrLen: 16}
)

func familyOf(a netip.Addr) ipFamily {
	if a.Is4() {
		return familyIPv4
	}
	return familyIPv6
}

// ruleset is kubext's nftables table, built for one set of options.
type ruleset struct {
	table  *nftables.Table
	chains []*nftables.Chain
	dnat   map[string]*nftables.Set // by family name
	snat   map[string]*nftables.Set
	rules  []*nftables.Rule
	// gate is the hold gate (gate.go).
	gate gateSets
}

// buildRuleset builds the table's chains, maps and rules; the maps'
// elements can time out when timeouts is true. Pure: the kernel is not
// touched.
func buildRuleset(tableName string, exclude []netip.Prefix, timeouts bool) *ruleset {
	t := &nftables.Table{Name: tableName, Family: nftables.TableFamilyINet}
	rs := &ruleset{table: t, dnat: map[string]*nftables.Set{}, snat: map[string]*nftables.Set{}}
	prerouting := &nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPrerouting, Priority: &dnatChainPriority}
	output := &nftables.Chain{Name: "output", Table: t, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookOutput, Priority: &dnatChainPriority}
	postrouting := &nftables.Chain{Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPostrouting, Priority: &snatChainPriority}
	rs.chains = []*nftables.Chain{prerouting, output, postrouting}

	// Set ids only link rules to sets within one batch; fixed ones keep
	// the build pure.
	id := uint32(0)
	for _, f := range []ipFamily{familyIPv4, familyIPv6} {
		id++
		rs.dnat[f.name] = &nftables.Set{Table: t, ID: id, Name: "dnat" + f.suffix, IsMap: true, HasTimeout: timeouts, KeyType: f.addrType, DataType: f.addrType}
		id++
		rs.snat[f.name] = &nftables.Set{Table: t, ID: id, Name: "snat" + f.suffix, IsMap: true, HasTimeout: timeouts, KeyType: nftables.MustConcatSetType(f.addrType, nftables.TypeIFIndex), DataType: f.addrType}
	}

	for _, c := range []*nftables.Chain{prerouting, output} {
		for _, f := range []ipFamily{familyIPv4, familyIPv6} {
			rs.add(c, "dnat "+f.name, slices.Concat(matchFamily(f), []expr.Any{
				&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: regValue, Base: expr.PayloadBaseNetworkHeader, Offset: f.dstOff, Len: f.addrLen},
				lookupMap(rs.dnat[f.name], regValue),
				&expr.NAT{Type: expr.NATTypeDestNAT, Family: uint32(f.nfproto), RegAddrMin: regValue},
			}))
		}
	}
	for _, p := range exclude {
		f := familyOf(p.Addr())
		rs.add(postrouting, "exclude "+p.String(), slices.Concat(matchFamily(f), []expr.Any{
			&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: regValue, Base: expr.PayloadBaseNetworkHeader, Offset: f.dstOff, Len: f.addrLen},
			&expr.Bitwise{SourceRegister: regValue, DestRegister: regValue, Len: f.addrLen, Mask: prefixMask(p), Xor: make([]byte, f.addrLen)},
			&expr.Cmp{Op: expr.CmpOpEq, Register: regValue, Data: p.Addr().AsSlice()},
			&expr.Verdict{Kind: expr.VerdictReturn},
		}))
	}
	for _, f := range []ipFamily{familyIPv4, familyIPv6} {
		rs.add(postrouting, "snat "+f.name, slices.Concat(matchFamily(f), []expr.Any{
			&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: regConcat, Base: expr.PayloadBaseNetworkHeader, Offset: f.srcOff, Len: f.addrLen},
			&expr.Meta{Key: expr.MetaKeyOIF, Register: regConcat + f.addrLen/4},
			lookupMap(rs.snat[f.name], regConcat),
			&expr.NAT{Type: expr.NATTypeSourceNAT, Family: uint32(f.nfproto), RegAddrMin: regValue},
		}))
	}
	rs.addGate(id)
	return rs
}

func (rs *ruleset) add(c *nftables.Chain, name string, exprs []expr.Any) {
	rs.rules = append(rs.rules, &nftables.Rule{Table: rs.table, Chain: c, Exprs: exprs, UserData: userdata.AppendString(nil, userdata.TypeComment, ruleComment(name))})
}

func ruleComment(name string) string { return "kubext " + rulesetVersion + ": " + name }

// comments returns the rule comments each chain must hold, in order.
func (rs *ruleset) comments() map[string][]string {
	out := map[string][]string{}
	for _, c := range rs.chains {
		out[c.Name] = []string{}
	}
	for _, r := range rs.rules {
		c, _ := userdata.GetString(r.UserData, userdata.TypeComment)
		out[r.Chain.Name] = append(out[r.Chain.Name], c)
	}
	return out
}

func (rs *ruleset) maps() []*nftables.Set {
	return []*nftables.Set{rs.dnat[familyIPv4.name], rs.dnat[familyIPv6.name], rs.snat[familyIPv4.name], rs.snat[familyIPv6.name]}
}

func matchFamily(f ipFamily) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: regValue},
		&expr.Cmp{Op: expr.CmpOpEq, Register: regValue, Data: []byte{f.nfproto}},
	}
}

// lookupMap looks the key in register src up in m and leaves the value in
// regValue.
func lookupMap(m *nftables.Set, src uint32) expr.Any {
	return &expr.Lookup{SourceRegister: src, DestRegister: regValue, IsDestRegSet: true, SetName: m.Name, SetID: m.ID}
}

func prefixMask(p netip.Prefix) []byte {
	return net.CIDRMask(p.Bits(), p.Addr().BitLen())
}

// elements encodes the content of the maps, per map name, with timeout
// (0: none).
func (n natState) elements(timeout time.Duration) map[string][]nftables.SetElement {
	out := map[string][]nftables.SetElement{}
	for a, pod := range n.dnat {
		name := "dnat" + familyOf(a).suffix
		out[name] = append(out[name], nftables.SetElement{Key: a.AsSlice(), Val: pod.AsSlice(), Timeout: timeout})
	}
	for k, a := range n.snat {
		name := "snat" + familyOf(a).suffix
		out[name] = append(out[name], nftables.SetElement{Key: snatKeyBytes(k), Val: a.AsSlice(), Timeout: timeout})
	}
	return out
}

// snatKeyBytes is the concatenation pod . interface index; the index is
// in host byte order, as meta oif loads it.
func snatKeyBytes(k snatKey) []byte {
	return append(k.Pod.AsSlice(), binaryutil.NativeEndian.PutUint32(uint32(k.Link))...)
}

// decodeElements fills n from the elements of the map named name.
func (n natState) decodeElements(name string, elems []nftables.SetElement) error {
	for _, e := range elems {
		val, ok := netip.AddrFromSlice(e.Val)
		if !ok {
			return fmt.Errorf("map %s: bad value %x", name, e.Val)
		}
		switch name[:4] {
		case "dnat":
			key, ok := netip.AddrFromSlice(e.Key)
			if !ok {
				return fmt.Errorf("map %s: bad key %x", name, e.Key)
			}
			n.dnat[key] = val
		case "snat":
			l := len(val.AsSlice())
			if len(e.Key) != l+4 {
				return fmt.Errorf("map %s: bad key %x", name, e.Key)
			}
			pod, _ := netip.AddrFromSlice(e.Key[:l])
			n.snat[snatKey{Pod: pod, Link: int(binaryutil.NativeEndian.Uint32(e.Key[l:]))}] = val
		}
	}
	return nil
}

// readNAT reads the maps, and whether the table is as this code writes
// it. A missing table reads as empty; a table that cannot be read in full
// (someone put something in it this code cannot parse) reads as not
// current, so that the next write replaces it.
func (k *kernel) readNAT() (natState, bool, error) {
	n := newNATState()
	rs := k.ruleset()
	exists, err := k.tableExists()
	if err != nil || !exists {
		return n, false, err
	}
	current, err := k.readMaps(rs, n)
	if err == nil && current {
		current, err = k.rulesCurrent(rs)
	}
	if err != nil {
		k.log.Info("nftables table unreadable, it will be rewritten", "table", rs.table.Name, "error", err.Error())
		return n, false, nil
	}
	return n, current, nil
}

// readMaps decodes kubext's maps into n; it reports whether they are the
// maps rs has, and no others.
func (k *kernel) readMaps(rs *ruleset, n natState) (bool, error) {
	sets, err := k.nft.GetSets(rs.table)
	if err != nil {
		return false, fmt.Errorf("list sets: %w", err)
	}
	current := len(sets) == len(rs.maps())+len(rs.gate.sets())
	for _, want := range rs.maps() {
		i := slices.IndexFunc(sets, func(s *nftables.Set) bool { return s.Name == want.Name })
		if i < 0 || !sets[i].IsMap || sets[i].HasTimeout != want.HasTimeout ||
			sets[i].KeyType.Bytes != want.KeyType.Bytes || sets[i].DataType.Bytes != want.DataType.Bytes {
			current = false
			continue
		}
		elems, err := k.nft.GetSetElements(sets[i])
		if err != nil {
			return false, fmt.Errorf("read map %s: %w", want.Name, err)
		}
		if err := n.decodeElements(want.Name, elems); err != nil {
			return false, err
		}
	}
	return current, nil
}

func (k *kernel) tableExists() (bool, error) {
	tables, err := k.nft.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return false, fmt.Errorf("list nftables tables: %w", err)
	}
	return slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == k.opts.TableName }), nil
}

// rulesCurrent compares the chains and rule comments in the kernel with rs.
func (k *kernel) rulesCurrent(rs *ruleset) (bool, error) {
	chains, err := k.nft.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return false, fmt.Errorf("list chains: %w", err)
	}
	want := rs.comments()
	found := 0
	for _, c := range chains {
		if c.Table.Name != rs.table.Name {
			continue
		}
		found++
		i := slices.IndexFunc(rs.chains, func(w *nftables.Chain) bool { return w.Name == c.Name })
		if i < 0 || !sameHook(c, rs.chains[i]) {
			return false, nil
		}
		rules, err := k.nft.GetRules(rs.table, c)
		if err != nil {
			return false, fmt.Errorf("list rules: %w", err)
		}
		got := make([]string, 0, len(rules))
		for _, r := range rules {
			comment, _ := userdata.GetString(r.UserData, userdata.TypeComment)
			got = append(got, comment)
		}
		if !slices.Equal(got, want[c.Name]) {
			return false, nil
		}
	}
	if found != len(rs.chains) {
		return false, nil
	}
	return k.arpCurrent(rs)
}

func sameHook(a, b *nftables.Chain) bool {
	return a.Type == b.Type && a.Hooknum != nil && b.Hooknum != nil && *a.Hooknum == *b.Hooknum &&
		a.Priority != nil && b.Priority != nil && *a.Priority == *b.Priority
}

// writeNAT converges the table to want in one batch: only the map
// elements that differ when the table is current, a rewrite of the whole
// table otherwise. With nothing to hold, the table is deleted, so no NAT
// hooks stay registered. When nothing differs nothing is written.
func (k *kernel) writeNAT(adm pass, want natState) error {
	for attempt := 1; ; attempt++ {
		// A held element may expire between the read and the batch that
		// renews it: the batch fails as a whole, and is built again.
		err := k.writeNATOnce(adm, want)
		if k.egressRefused(err) {
			continue // built again without the egress gate
		}
		if err == nil || !errors.Is(err, unix.ENOENT) || attempt == maxDumpAttempts {
			return err
		}
	}
}

func (k *kernel) writeNATOnce(adm pass, want natState) error {
	have, current, err := k.readNAT()
	if err != nil {
		return err
	}
	if len(want.dnat) == 0 && len(want.snat) == 0 {
		return k.deleteTable()
	}
	rs := k.ruleset()
	links, err := k.links()
	if err != nil {
		return err
	}
	eg := k.egressFor(want, links)
	if !current {
		k.log.Info("writing nftables table", "table", rs.table.Name)
		var computed time.Time
		if err := adm.add(func() (err error) {
			computed, err = k.rewriteTable(rs, eg, want)
			return err
		}); err != nil {
			return err
		}
		return k.gateCommitted(adm, computed, time.Now(), false)
	}
	b := k.batch()
	changed := false
	lifetime, err := k.lifetime()
	if err != nil {
		return err
	}
	haveElems, wantElems := have.elements(0), want.elements(lifetime)
	gate, est, err := k.readGate(rs)
	if err != nil {
		return err
	}
	egressAsWanted := eg == nil || est.current && slices.Equal(est.devices, eg.devices())
	var computed time.Time
	if k.opts.GateDeadline != nil || !egressAsWanted || !slices.Equal(have.addresses(), want.addresses()) {
		if computed, err = k.writeGate(b, rs, eg, est, want.addresses(), gate); err != nil {
			return err
		}
		changed = true
	}
	for _, m := range rs.maps() {
		del, add := diffElements(haveElems[m.Name], wantElems[m.Name])
		if len(del) > 0 {
			changed = true
			if err := b.SetDeleteElements(m, del); err != nil {
				return fmt.Errorf("nftables map %s: %w", m.Name, err)
			}
		}
		if len(add) > 0 {
			changed = true
			if err := b.SetAddElements(m, add); err != nil {
				return fmt.Errorf("nftables map %s: %w", m.Name, err)
			}
		}
	}
	if !changed {
		return nil
	}
	if err := k.flushGate(adm, b, computed, false); err != nil {
		return fmt.Errorf("update nftables maps: %w", err)
	}
	return nil
}

// diffElements returns the elements of have to delete (missing from want,
// or with another value) and those of want to add.
func diffElements(have, want []nftables.SetElement) (del, add []nftables.SetElement) {
	key := func(e nftables.SetElement) string { return string(e.Key) }
	wantByKey := map[string][]byte{}
	for _, e := range want {
		wantByKey[key(e)] = e.Val
	}
	haveByKey := map[string][]byte{}
	for _, e := range have {
		haveByKey[key(e)] = e.Val
		if v, ok := wantByKey[key(e)]; !ok || string(v) != string(e.Val) {
			del = append(del, nftables.SetElement{Key: e.Key})
		}
	}
	for _, e := range want {
		if v, ok := haveByKey[key(e)]; !ok || string(v) != string(e.Val) {
			add = append(add, e)
		}
	}
	return del, add
}

// rewriteTable replaces the table atomically: add (a no-op when it
// exists), delete, and create it again with its content, in one batch.
func (k *kernel) rewriteTable(rs *ruleset, eg *egressGate, want natState) (time.Time, error) {
	b := k.batch()
	b.AddTable(rs.table)
	b.DelTable(rs.table)
	b.AddTable(rs.table)
	for _, c := range rs.chains {
		b.AddChain(c)
	}
	lifetime, err := k.lifetime()
	if err != nil {
		return time.Time{}, err
	}
	elems := want.elements(lifetime)
	for _, m := range rs.maps() {
		if err := b.AddSet(m, elems[m.Name]); err != nil {
			return time.Time{}, fmt.Errorf("nftables map %s: %w", m.Name, err)
		}
	}
	owned, held, arpOwned, arpHeld, computed := k.gateElements(want.addresses())
	for _, sets := range []map[string]*nftables.Set{rs.gate.owned, rs.gate.held} {
		for _, f := range []ipFamily{familyIPv4, familyIPv6} {
			s := sets[f.name]
			if err := b.AddSet(s, append(owned[s.Name], held[s.Name]...)); err != nil {
				return time.Time{}, fmt.Errorf("nftables set %s: %w", s.Name, err)
			}
		}
	}
	for _, r := range rs.rules {
		b.AddRule(r)
	}
	// The arp table, likewise replaced whole.
	g := rs.gate
	b.AddTable(g.arpTable)
	b.DelTable(g.arpTable)
	b.AddTable(g.arpTable)
	if err := errors.Join(b.AddSet(g.arpOwned, arpOwned), b.AddSet(g.arpHeld, arpHeld)); err != nil {
		return time.Time{}, fmt.Errorf("nftables arp sets: %w", err)
	}
	b.AddChain(g.arpChain)
	b.AddRule(g.arpRule)
	if eg != nil {
		if err := addEgressTable(b, eg, owned, held); err != nil {
			return time.Time{}, err
		}
	}
	if k.beforeGateFlush != nil {
		k.beforeGateFlush()
	}
	if err := b.Flush(); err != nil {
		return time.Time{}, fmt.Errorf("write nftables table %s: %w", rs.table.Name, err)
	}
	return computed, nil
}

// ruleset is the table as this kernel's options want it.
func (k *kernel) ruleset() *ruleset {
	return buildRuleset(k.opts.TableName, k.opts.ExcludeSNAT, k.opts.AddressLifetime > 0)
}

// refreshNAT restarts the timeout of every element of kubext's maps. Each
// element is deleted and added again in one batch: the kernel applies a
// batch atomically, so no packet finds the element missing, and an element
// that expired or was removed since it was read fails the whole batch
// rather than coming back; the batch is then built again from a new read.
func (k *kernel) refreshNAT(adm pass) error {
	for attempt := 1; ; attempt++ {
		err := k.onOneSocket(func() error { return k.refreshNATOnce(adm) })
		if err == nil || !errors.Is(err, unix.ENOENT) || attempt == maxDumpAttempts {
			return err
		}
	}
}

func (k *kernel) refreshNATOnce(adm pass) error {
	lifetime, err := k.lifetime()
	if errors.Is(err, ErrHoldEnding) {
		return nil // what is there keeps its earlier, shorter timeout
	}
	rs := k.ruleset()
	if exists, err := k.tableExists(); err != nil || !exists {
		return err
	}
	sets, err := k.nft.GetSets(rs.table)
	if err != nil {
		return fmt.Errorf("list sets: %w", err)
	}
	b, n := k.batch(), 0
	for _, m := range rs.maps() {
		i := slices.IndexFunc(sets, func(s *nftables.Set) bool { return s.Name == m.Name })
		if i < 0 || !sets[i].HasTimeout || !m.HasTimeout {
			continue // Apply rewrites a table without timeouts
		}
		elems, err := k.nft.GetSetElements(sets[i])
		if err != nil {
			return fmt.Errorf("read map %s: %w", m.Name, err)
		}
		if len(elems) == 0 {
			continue
		}
		fresh := make([]nftables.SetElement, 0, len(elems))
		for _, e := range elems {
			fresh = append(fresh, nftables.SetElement{Key: e.Key, Val: e.Val, Timeout: lifetime})
		}
		if err := errors.Join(b.SetDeleteElements(m, fresh), b.SetAddElements(m, fresh)); err != nil {
			return fmt.Errorf("nftables map %s: %w", m.Name, err)
		}
		n += len(fresh)
	}
	if n == 0 {
		return nil
	}
	if err := adm.add(b.Flush); err != nil {
		return fmt.Errorf("refresh nftables maps: %w", err)
	}
	return nil
}

// batch returns a connection for one batch of changes. Each batch gets its
// own: a Conn keeps messages queued before a failure, and a serialization
// error, and would send or report them with the next batch.
func (k *kernel) batch() *nftables.Conn {
	return &nftables.Conn{NetNS: nsFd(k.ns)}
}

// deleteTable removes kubext's table, if it exists.
func (k *kernel) deleteTable() error {
	var errs []error
	for _, t := range []*nftables.Table{
		{Name: k.opts.TableName, Family: nftables.TableFamilyINet},
		{Name: k.opts.TableName, Family: nftables.TableFamilyARP},
		{Name: k.opts.TableName, Family: nftables.TableFamilyNetdev},
	} {
		tables, err := k.nft.ListTablesOfFamily(t.Family)
		if err != nil {
			errs = append(errs, fmt.Errorf("list nftables tables: %w", err))
			continue
		}
		if !slices.ContainsFunc(tables, func(have *nftables.Table) bool { return have.Name == t.Name }) {
			continue
		}
		b := k.batch()
		b.DelTable(t)
		if err := b.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("delete nftables table: %w", err))
			continue
		}
		k.log.Info("deleted nftables table", "table", t.Name, "family", t.Family)
	}
	return errors.Join(errs...)
}
