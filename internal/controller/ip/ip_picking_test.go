package ip

import (
	"net/netip"
	"testing"
	"time"
)

// Workers skip an address another is reserving, and one just reserved
// until the hold ends; then it may be picked again.
func TestPickingKeepsWorkersApart(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	p := picking{now: func() time.Time { return now }}
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	if p.busy(a) || !p.take(a) {
		t.Fatal("a free address is not busy and can be taken")
	}
	if !p.busy(a) || p.take(a) {
		t.Fatal("an address being reserved is busy and cannot be taken twice")
	}
	if !p.take(b) {
		t.Fatal("another address can be taken meanwhile")
	}
	p.release(a, now.Add(pickingHold))
	if !p.busy(a) || p.take(a) {
		t.Fatal("just reserved: still skipped")
	}
	now = now.Add(pickingHold)
	if p.busy(a) || !p.take(a) {
		t.Fatal("after the hold it may be picked again")
	}
	if !p.busy(b) {
		t.Fatal("b is still being reserved, whatever the time")
	}
}
