package lab

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
)

// partitionTable is the node namespace's nftables table of Isolate.
const partitionTable = "kxpartition"

// Isolate partitions a node without taking its link down: its namespace
// drops every IPv4 packet it would receive from, or send to, an address
// other than those in keep (the client's, usually) and loopback. The node
// keeps serving the kept addresses and answering ARP, but hears neither
// its peers nor the API server: the partition in which a holder that does
// not fence keeps answering next to its successor. Forwarded traffic (to
// and from the node's pods) is not filtered. Rejoin undoes it.
func (l *Lab) Isolate(node string, keep ...netip.Addr) error {
	return l.partition(node, keep, true)
}

// Rejoin undoes Isolate (and does nothing for a node not isolated).
func (l *Lab) Rejoin(node string) error {
	return l.partition(node, nil, false)
}

func (l *Lab) partition(node string, keep []netip.Addr, on bool) error {
	name, err := l.nodeNamespace(node)
	if err != nil {
		return err
	}
	ns, err := netns.GetFromName(name)
	if err != nil {
		return err
	}
	defer ns.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return err
	}
	t := &nftables.Table{Name: partitionTable, Family: nftables.TableFamilyIPv4}
	// Adding then deleting makes the delete succeed when there is no
	// table yet; the batch is one transaction.
	c.AddTable(t)
	c.DelTable(t)
	if on {
		c.AddTable(t)
		drop := nftables.ChainPolicyDrop
		for _, h := range []struct {
			hook   *nftables.ChainHook
			offset uint32 // the IPv4 header's source (12) or destination (16)
		}{{nftables.ChainHookInput, 12}, {nftables.ChainHookOutput, 16}} {
			ch := c.AddChain(&nftables.Chain{Name: fmt.Sprint("hook", h.offset), Table: t, Type: nftables.ChainTypeFilter,
				Hooknum: h.hook, Priority: nftables.ChainPriorityFilter, Policy: &drop})
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: acceptIf(h.offset, []byte{127})})
			for _, a := range keep {
				if !a.Is4() {
					return fmt.Errorf("lab: isolate %s: %s is not IPv4", node, a)
				}
				c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: acceptIf(h.offset, a.AsSlice())})
			}
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("lab: partition of %s: %w", node, err)
	}
	return nil
}

// acceptIf accepts a packet whose IPv4 address at offset starts with
// prefix (a whole address, or 127 for loopback).
func acceptIf(offset uint32, prefix []byte) []expr.Any {
	return []expr.Any{
		&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: uint32(len(prefix))},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: prefix},
		&expr.Verdict{Kind: expr.VerdictAccept},
	}
}
