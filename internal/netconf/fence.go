package netconf

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Fencing must not wait for an Apply: an Apply may be slow or hung (a
// kernel that takes long to answer, a stuck conntrack dump), and an agent
// that lost its Lease must be silent before the controller moves its IPs.
// So Fence does not take the lock Apply holds. Instead every kernel write
// that adds something (an address, a NAT map element, a routing rule or
// route, an announcement, an address or element refresh) runs under the
// read side of the fence gate, holding a pass issued before it started:
//
//  1. Fence takes the write side, which waits only for the adds under way
//     (single kernel writes, never a whole Apply), marks the dataplane
//     fenced and invalidates every pass issued so far, and releases it.
//  2. Fence then removes everything kubext has in the kernel, over
//     connections of its own (an nftables.Conn is not safe for concurrent
//     batches, and netlink sockets would mix the answers of two users).
//
// After step 1 no add can start until Unfence, and an add that passed the
// gate before step 1 had finished before it, so step 2 finds and removes
// it. A pass issued before Fence stays invalid after Unfence: an Apply
// that was in flight when the Lease lapsed adds nothing even once the
// Lease is held again, since what it was asked for may be stale by then.
// Removals are never gated: they only make the node answer for less.

// ErrFenced is why a fenced Dataplane refuses to add anything.
var ErrFenced = errors.New("netconf: fenced: the agent does not hold its lease")

var errFlushed = errors.New("netconf: flushed while this change was under way")

// fenceGate decides which adds may reach the kernel.
type fenceGate struct {
	mu     sync.RWMutex
	fenced bool
	// gen counts Flushes and Fences: a pass of an older generation has
	// lapsed.
	gen uint64
}

// pass is the permission of one Apply or Refresh to add to the kernel.
type pass struct {
	gate *fenceGate
	gen  uint64
	ctx  context.Context
}

func (g *fenceGate) issue(ctx context.Context) pass {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return pass{gate: g, gen: g.gen, ctx: ctx}
}

// add runs write, one kernel write that adds something, unless the pass
// has lapsed: the dataplane was fenced or flushed since it was issued, or
// its context ended. The gate is held until write returns, so that Fence
// knows every add that got through has reached the kernel.
func (p pass) add(write func() error) error {
	if p.gate == nil {
		return ErrFenced // the zero pass permits nothing
	}
	p.gate.mu.RLock()
	defer p.gate.mu.RUnlock()
	if err := p.lapsed(); err != nil {
		return err
	}
	return write()
}

// valid reports why the pass permits nothing any more, if it does not.
func (p pass) valid() error {
	return p.add(func() error { return nil })
}

func (p pass) lapsed() error {
	switch {
	case p.gate.fenced:
		return ErrFenced
	case p.gen != p.gate.gen:
		return errFlushed
	}
	if err := p.ctx.Err(); err != nil {
		return fmt.Errorf("netconf: %w", err)
	}
	return nil
}

// detached is p for work that outlives the call that issued it (the
// repeated announcements): it lapses with a Flush or Fence, not with the
// call's context.
func (p pass) detached(ctx context.Context) pass {
	p.ctx = ctx
	return p
}

// close invalidates every pass issued so far and, with fence, refuses
// every add until open. It returns once no add is under way.
func (g *fenceGate) close(fence bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gen++
	g.fenced = g.fenced || fence
}

func (g *fenceGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fenced = false
}

// Fence makes the node stop answering for every static IP at once and
// refuses every later add until Unfence: the agent calls it when it can no
// longer be sure it holds its Lease. It does not wait for an Apply in
// flight (see the comment at the top of fence.go); that Apply adds
// nothing, even after Unfence.
func (d *Dataplane) Fence(ctx context.Context) error {
	if d.isClosed() {
		return errClosed
	}
	d.gate.close(true)
	return d.flush(ctx)
}

// Unfence lets Applies issued from now on add again: the agent holds its
// Lease again.
func (d *Dataplane) Unfence() { d.gate.open() }

// Flush removes everything kubext programmed in the namespace: addresses
// first (the node stops answering at once), then their conntrack entries,
// routing rules and routes, and the nftables table. An Apply in flight
// adds nothing more; later Applies program as usual. Flush carries on
// past errors and depends on nothing but the kernel's marks. Forwarding
// sysctls stay on.
func (d *Dataplane) Flush(ctx context.Context) error {
	if d.isClosed() {
		return errClosed
	}
	d.gate.close(false)
	return d.flush(ctx)
}

// flush removes everything over the fencing connections; flushes run one
// at a time, never behind an Apply.
func (d *Dataplane) flush(ctx context.Context) error {
	d.flushMu.Lock()
	defer d.flushMu.Unlock()
	return d.fencer.flush(ctx)
}
