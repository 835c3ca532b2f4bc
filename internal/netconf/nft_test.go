package netconf

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/onsi/gomega"
	"golang.org/x/sys/unix"
)

func TestBuildRuleset(t *testing.T) {
	g := gomega.NewWithT(t)
	exclude := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	rs := buildRuleset("kubext", exclude, false)

	g.Expect(rs.table).To(gomega.Equal(&nftables.Table{Name: "kubext", Family: nftables.TableFamilyINet}))
	hooks := map[string][2]int{}
	types := map[string]nftables.ChainType{}
	for _, c := range rs.chains {
		types[c.Name] = c.Type
		hooks[c.Name] = [2]int{int(*c.Hooknum), int(*c.Priority)}
	}
	nat, filter := nftables.ChainTypeNAT, nftables.ChainTypeFilter
	g.Expect(types).To(gomega.Equal(map[string]nftables.ChainType{
		"prerouting": nat, "output": nat, "postrouting": nat, "hold-in": filter, "hold-out": filter}))
	// The hold gate drops before DNAT and the local stack (raw), and
	// after SNAT.
	g.Expect(hooks).To(gomega.Equal(map[string][2]int{
		"prerouting":  {unix.NF_INET_PRE_ROUTING, -110},
		"output":      {unix.NF_INET_LOCAL_OUT, -110},
		"postrouting": {unix.NF_INET_POST_ROUTING, 90},
		"hold-in":     {unix.NF_INET_PRE_ROUTING, -300},
		"hold-out":    {unix.NF_INET_POST_ROUTING, 200},
	}))
	g.Expect(rs.comments()).To(gomega.Equal(map[string][]string{
		"prerouting":  {"kubext v2: dnat ipv4", "kubext v2: dnat ipv6"},
		"output":      {"kubext v2: dnat ipv4", "kubext v2: dnat ipv6"},
		"postrouting": {"kubext v2: exclude 10.0.0.0/8", "kubext v2: exclude fd00::/8", "kubext v2: snat ipv4", "kubext v2: snat ipv6"},
		"hold-in":     {"kubext v2: hold in ipv4", "kubext v2: hold in ipv6"},
		"hold-out":    {"kubext v2: hold out ipv4", "kubext v2: hold out ipv6"},
	}))
	// The arp table's one rule: ARP as an owned address that is not held
	// is dropped, on the arp family's output hook.
	g.Expect(*rs.gate.arpChain.Hooknum).To(gomega.BeEquivalentTo(1))
	g.Expect(rs.gate.arpRule.Exprs[0]).To(gomega.Equal(&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: regValue, Base: expr.PayloadBaseNetworkHeader, Offset: 14, Len: 4}))
	g.Expect(rs.gate.arpRule.Exprs[2]).To(gomega.Equal(&expr.Lookup{SourceRegister: regValue, SetName: "held", SetID: 2, Invert: true}))

	keyLen := map[string][2]uint32{}
	ids := map[uint32]bool{}
	for _, m := range rs.maps() {
		g.Expect(m.IsMap).To(gomega.BeTrue())
		keyLen[m.Name] = [2]uint32{m.KeyType.Bytes, m.DataType.Bytes}
		g.Expect(ids).NotTo(gomega.HaveKey(m.ID))
		ids[m.ID] = true
	}
	g.Expect(keyLen).To(gomega.Equal(map[string][2]uint32{
		"dnat4": {4, 4}, "dnat6": {16, 16},
		"snat4": {8, 4}, "snat6": {20, 16}, // address . interface index
	}))

	// The SNAT key is the source address followed by the outgoing
	// interface in the next register, and the lookup names its map by id.
	snat6 := rs.rules[slices.IndexFunc(rs.rules, func(r *nftables.Rule) bool {
		c, _ := userdata.GetString(r.UserData, userdata.TypeComment)
		return c == "kubext v2: snat ipv6"
	})]
	g.Expect(snat6.Exprs[2]).To(gomega.Equal(&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: regConcat, Base: expr.PayloadBaseNetworkHeader, Offset: 8, Len: 16}))
	g.Expect(snat6.Exprs[3]).To(gomega.Equal(&expr.Meta{Key: expr.MetaKeyOIF, Register: regConcat + 4}))
	g.Expect(snat6.Exprs[4]).To(gomega.Equal(&expr.Lookup{SourceRegister: regConcat, DestRegister: regValue, IsDestRegSet: true, SetName: "snat6", SetID: rs.snat["ipv6"].ID}))
	g.Expect(snat6.Exprs[5]).To(gomega.Equal(&expr.NAT{Type: expr.NATTypeSourceNAT, Family: unix.NFPROTO_IPV6, RegAddrMin: regValue}))

	exclude4 := rs.rules[4]
	g.Expect(exclude4.Exprs[3]).To(gomega.Equal(&expr.Bitwise{SourceRegister: regValue, DestRegister: regValue, Len: 4, Mask: []byte{255, 0, 0, 0}, Xor: []byte{0, 0, 0, 0}}))
	g.Expect(exclude4.Exprs[4]).To(gomega.Equal(&expr.Cmp{Op: expr.CmpOpEq, Register: regValue, Data: []byte{10, 0, 0, 0}}))
	g.Expect(exclude4.Exprs[5]).To(gomega.Equal(&expr.Verdict{Kind: expr.VerdictReturn}))
}

// The egress gate: one chain per uplink the SNAT maps lead out of, on
// the netdev egress hook of that device, each with the three drops
// keyed on the frame's ethertype.
func TestBuildEgress(t *testing.T) {
	g := gomega.NewWithT(t)
	links := newLinkSet(linkInfo{Index: 2, Name: "eth0"}, linkInfo{Index: 3, Name: "bond0"}, linkInfo{Index: 4, Name: "eth1"})
	n := newNATState()
	pod := netip.MustParseAddr("10.1.0.5")
	n.snat[snatKey{Pod: pod, Link: 3}] = netip.MustParseAddr("192.0.2.10")
	n.snat[snatKey{Pod: pod, Link: 2}] = netip.MustParseAddr("192.0.2.11")
	n.snat[snatKey{Pod: netip.MustParseAddr("10.1.0.6"), Link: 2}] = netip.MustParseAddr("192.0.2.12")
	n.snat[snatKey{Pod: pod, Link: 9}] = netip.MustParseAddr("192.0.2.13") // an interface that is gone
	devices := uplinks(n, links)
	g.Expect(devices).To(gomega.Equal([]string{"bond0", "eth0"}))

	e := buildEgress("kubext", nftables.ChainHookEgress, devices)
	g.Expect(e.table).To(gomega.Equal(&nftables.Table{Name: "kubext", Family: nftables.TableFamilyNetdev}))
	g.Expect(e.devices()).To(gomega.Equal(devices))
	for _, c := range e.chains {
		g.Expect(c.Name).To(gomega.Equal("egress-" + c.Device))
		g.Expect(*c.Hooknum).To(gomega.BeEquivalentTo(unix.NF_NETDEV_EGRESS))
		g.Expect(*c.Priority).To(gomega.BeEquivalentTo(0))
		g.Expect(e.comments(c)).To(gomega.Equal([]string{"kubext v2: egress ipv4", "kubext v2: egress ipv6", "kubext v2: egress arp"}))
	}
	arp := e.rules[2]
	g.Expect(arp.Exprs[:2]).To(gomega.Equal([]expr.Any{
		&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: regValue},
		&expr.Cmp{Op: expr.CmpOpEq, Register: regValue, Data: []byte{0x08, 0x06}},
	}))
	g.Expect(arp.Exprs[2]).To(gomega.Equal(&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: regValue, Base: expr.PayloadBaseNetworkHeader, Offset: 14, Len: 4}))
	g.Expect(arp.Exprs[4]).To(gomega.Equal(&expr.Lookup{SourceRegister: regValue, SetName: "held4", SetID: e.held["ipv4"].ID, Invert: true}))
	g.Expect(buildEgress("kubext", nftables.ChainHookEgress, nil).chains).To(gomega.BeEmpty())
}

func TestMapElementsRoundTrip(t *testing.T) {
	g := gomega.NewWithT(t)
	in := newNATState()
	in.dnat[addrOf("198.51.100.10")] = addrOf("10.0.0.1")
	in.dnat[addrOf("2001:db8::10")] = addrOf("fd00::1")
	in.snat[snatKey{Pod: addrOf("10.0.0.1"), Link: 2}] = addrOf("198.51.100.10")
	in.snat[snatKey{Pod: addrOf("fd00::1"), Link: 70000}] = addrOf("2001:db8::10")

	elems := in.elements(0)
	g.Expect(elems).To(gomega.HaveLen(4))
	g.Expect(elems["snat4"][0].Key).To(gomega.HaveLen(8))
	g.Expect(elems["snat6"][0].Key).To(gomega.HaveLen(20))

	out := newNATState()
	for name, es := range elems {
		g.Expect(out.decodeElements(name, es)).To(gomega.Succeed())
	}
	g.Expect(out).To(gomega.Equal(in))

	g.Expect(out.decodeElements("snat4", []nftables.SetElement{{Key: []byte{1, 2, 3}, Val: []byte{1, 2, 3, 4}}})).NotTo(gomega.Succeed())
	g.Expect(out.decodeElements("dnat4", []nftables.SetElement{{Key: []byte{1, 2, 3, 4}, Val: []byte{1}}})).NotTo(gomega.Succeed())
}

func TestDiffElements(t *testing.T) {
	g := gomega.NewWithT(t)
	e := func(k, v byte) nftables.SetElement { return nftables.SetElement{Key: []byte{k}, Val: []byte{v}} }
	have := []nftables.SetElement{e(1, 1), e(2, 2), e(3, 3)}
	want := []nftables.SetElement{e(1, 1), e(2, 9), e(4, 4)}
	del, add := diffElements(have, want)
	g.Expect(del).To(gomega.ConsistOf(nftables.SetElement{Key: []byte{2}}, nftables.SetElement{Key: []byte{3}}))
	g.Expect(add).To(gomega.ConsistOf(e(2, 9), e(4, 4)))

	del, add = diffElements(want, want)
	g.Expect(del).To(gomega.BeEmpty())
	g.Expect(add).To(gomega.BeEmpty())
}

func FuzzDecodeElements(f *testing.F) {
	f.Add("snat4", []byte{10, 0, 0, 1, 2, 0, 0, 0}, []byte{198, 51, 100, 10})
	f.Add("dnat6", []byte{}, []byte{1})
	f.Fuzz(func(t *testing.T, name string, key, val []byte) {
		if len(name) < 4 {
			return
		}
		n := newNATState()
		if err := n.decodeElements(name, []nftables.SetElement{{Key: key, Val: val}}); err != nil {
			return
		}
		for k := range n.snat {
			if !k.Pod.IsValid() {
				t.Errorf("invalid pod from key %x", key)
			}
		}
	})
}
