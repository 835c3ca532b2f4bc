package lab

import (
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
)

// The client's neighbour entries follow EC2: an address EC2 routes is set
// when its holder changes, and the private IP of an Elastic IP whose
// association ended, outside the routed range, is forgotten rather than
// pointed at nobody for good (a later test that used that address as an
// l2 static IP found it dead: CI run 3 of 2026-11-28).
func TestPlanNeighboursForgetsAnEndedAssociation(t *testing.T) {
	g := NewWithT(t)
	a := netip.MustParseAddr
	routed, private := a("203.0.113.160"), a("203.0.113.115")
	have := map[netip.Addr]string{routed: "eni-1", private: "eni-1"}

	// The association moved its private IP to another ENI: both follow.
	set, forget := planNeighbours(have, map[netip.Addr]string{routed: "eni-2", private: "eni-2"})
	g.Expect(set).To(Equal(map[netip.Addr]string{routed: "eni-2", private: "eni-2"}))
	g.Expect(forget).To(BeEmpty())

	// The association ended; the routed address is held by nobody.
	set, forget = planNeighbours(have, map[netip.Addr]string{routed: ""})
	g.Expect(set).To(Equal(map[netip.Addr]string{routed: ""}))
	g.Expect(forget).To(Equal([]netip.Addr{private}))

	// Nothing changed: nothing to write.
	set, forget = planNeighbours(have, map[netip.Addr]string{routed: "eni-1", private: "eni-1"})
	g.Expect(set).To(BeEmpty())
	g.Expect(forget).To(BeEmpty())
}
