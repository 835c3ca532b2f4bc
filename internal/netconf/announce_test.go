package netconf

import (
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/onsi/gomega"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv6"
)

func TestGARPFrames(t *testing.T) {
	g := gomega.NewWithT(t)
	hw := linkEth0.HardwareAddr
	ip := addrOf("198.51.100.10")
	frames, err := garpFrames(hw, ip)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(frames).To(gomega.HaveLen(2))
	for i, f := range frames {
		p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
		eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		arp, _ := p.Layer(layers.LayerTypeARP).(*layers.ARP)
		g.Expect(eth).NotTo(gomega.BeNil())
		g.Expect(arp).NotTo(gomega.BeNil())
		g.Expect(eth.DstMAC).To(gomega.Equal(layers.EthernetBroadcast))
		g.Expect(eth.SrcMAC).To(gomega.Equal(hw))
		g.Expect(net.HardwareAddr(arp.SourceHwAddress)).To(gomega.Equal(hw))
		g.Expect(arp.SourceProtAddress).To(gomega.Equal(ip.AsSlice()))
		g.Expect(arp.DstProtAddress).To(gomega.Equal(ip.AsSlice()))
		if i == 0 {
			g.Expect(arp.Operation).To(gomega.Equal(uint16(layers.ARPRequest)))
			g.Expect(arp.DstHwAddress).To(gomega.Equal([]byte{0, 0, 0, 0, 0, 0}))
		} else {
			// Linux takes a reply as gratuitous only when the target
			// hardware address is the sender's.
			g.Expect(arp.Operation).To(gomega.Equal(uint16(layers.ARPReply)))
			g.Expect(net.HardwareAddr(arp.DstHwAddress)).To(gomega.Equal(hw))
		}
	}

	_, err = garpFrames(hw, addrOf("2001:db8::1"))
	g.Expect(err).To(gomega.HaveOccurred())
	_, err = garpFrames(net.HardwareAddr{1, 2}, ip)
	g.Expect(err).To(gomega.HaveOccurred())
}

func TestUnsolicitedNA(t *testing.T) {
	g := gomega.NewWithT(t)
	hw := linkEth0.HardwareAddr
	ip := addrOf("2001:db8::10")
	b, err := unsolicitedNA(hw, ip)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	m, err := icmp.ParseMessage(58, b)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(m.Type).To(gomega.Equal(ipv6.ICMPTypeNeighborAdvertisement))
	g.Expect(m.Code).To(gomega.Equal(0))
	body := m.Body.(*icmp.RawBody).Data
	g.Expect(body[0]).To(gomega.Equal(byte(0x20))) // override only
	g.Expect(body[4:20]).To(gomega.Equal(ip.AsSlice()))
	g.Expect(body[20:22]).To(gomega.Equal([]byte{2, 1})) // target link-layer address, 8 octets
	g.Expect(net.HardwareAddr(body[22:28])).To(gomega.Equal(hw))

	_, err = unsolicitedNA(hw, addrOf("198.51.100.1"))
	g.Expect(err).To(gomega.HaveOccurred())
}
