// Package witnessnet runs the witness protocol (internal/witness) over UDP:
// one Peer per agent probes the witnesses of its holds, answers the probes
// of other nodes, and declares silent the nodes it stops hearing. The
// decisions are internal/witness's; this package only moves datagrams and
// keeps time.
package witnessnet

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/kubext/kubext/internal/witness"
)

// Config configures a Peer.
type Config struct {
	// Node is this node's name, as witnesses and holders know it.
	Node   string
	Timing witness.Timing
	Codec  *witness.Codec
	// Conn is the UDP socket probes and answers go through.
	Conn net.PacketConn
	// Gen is this session's generation (witness.NextGen).
	Gen witness.Gen
	// Declared are the declarations this node published before: a
	// restarted witness must not vouch for what it declared silent.
	Declared map[string]witness.Gen
	// OnVouched is called, off the receiving loop's lock, after an answer
	// may have extended a hold: the agent re-reads HeldUntil and moves
	// the kernel's deadlines. OnDeclared receives new declarations, which
	// the agent must publish. OnLost is called once when a witness says
	// this generation was declared silent. All may be nil.
	OnVouched  func()
	OnDeclared func([]witness.Hold)
	OnLost     func()
	// OnUnverified is called with the sender of a message whose signature
	// could not be verified (witness.ErrUnverified): its key is not known
	// yet, or it changed (its agent restarted); the agent reads it again.
	// It runs on the receiving loop and must not block. May be nil.
	OnUnverified func(node string)
	// OnNewWitness is called with each node SetWitnesses adds: the agent
	// reads its key now rather than when its first answer fails to
	// verify, an API round trip later. May be nil.
	OnNewWitness func(node string)
	Log          logr.Logger
}

// Peer is one agent's end of the protocol.
type Peer struct {
	cfg Config

	mu        sync.Mutex
	w         *witness.Witness
	h         *witness.Holder
	witnesses map[string]netip.AddrPort // the witnesses to probe, by node
	lostOnce  bool
	// kick asks the loop to probe now: new witnesses to hear from, or a
	// new generation to be vouched for.
	kick chan struct{}
	// unverified is the last message of each sender whose signature
	// could not be verified yet: handled by Retry once the sender's key
	// is read, not one probe interval later when the next one comes (a
	// failover to a node that restarted waits for it).
	unverified map[string]heldMessage
}

// heldMessage is a datagram kept for Retry.
type heldMessage struct {
	data []byte
	from net.Addr
	at   time.Time
}

// maxUnverified bounds the messages kept for Retry: anybody with the
// cluster's key can send under any name.
const maxUnverified = 64

// New checks the configuration.
func New(cfg Config) (*Peer, error) {
	if cfg.Node == "" || cfg.Codec == nil || cfg.Conn == nil || cfg.Gen == 0 {
		return nil, errors.New("witnessnet: node, codec, connection and generation are required")
	}
	if err := cfg.Timing.Validate(); err != nil {
		return nil, err
	}
	return &Peer{
		cfg:        cfg,
		w:          witness.NewWitness(cfg.Timing, cfg.Declared),
		h:          witness.NewHolder(cfg.Timing, cfg.Gen),
		witnesses:  map[string]netip.AddrPort{},
		kick:       make(chan struct{}, 1),
		unverified: map[string]heldMessage{},
	}, nil
}

// Restart starts a new session in generation gen, higher than the last:
// what was vouched for the old one is forgotten, so nothing is held until
// a quorum vouches for gen. The agent calls it after OnLost, once it has
// stopped answering for everything the old generation held.
func (p *Peer) Restart(gen witness.Gen) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen <= p.cfg.Gen {
		return errors.New("witnessnet: a new generation must be higher than the last")
	}
	p.cfg.Gen = gen
	p.h = witness.NewHolder(p.cfg.Timing, gen)
	p.lostOnce = false
	p.signal()
	return nil
}

func (p *Peer) signal() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// SetWitnesses replaces the set of nodes this node probes: the witnesses
// of its holds and of the placements it is about to claim.
func (p *Peer) SetWitnesses(ws map[string]netip.AddrPort) {
	p.mu.Lock()
	var added []string
	for n, a := range ws {
		if p.witnesses[n] != a {
			p.signal() // a new witness: ask it now, not at the next tick
		}
		if _, had := p.witnesses[n]; !had {
			added = append(added, n)
		}
	}
	p.witnesses = maps.Clone(ws)
	p.mu.Unlock()
	if p.cfg.OnNewWitness != nil {
		for _, n := range added {
			p.cfg.OnNewWitness(n)
		}
	}
}

// HeldUntil is until when this node may answer for a hold with these
// witnesses (witness.Holder.HeldUntil), by this process's clock.
func (p *Peer) HeldUntil(witnesses []string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.h.HeldUntil(witnesses)
}

// Gen is the generation this peer probes with.
func (p *Peer) Gen() witness.Gen {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg.Gen
}

// Declared is every declaration this node has made as a witness: what it
// must publish, and read back after a restart.
func (p *Peer) Declared() map[string]witness.Gen {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.w.Declared()
}

// Run probes, answers and declares until ctx ends.
func (p *Peer) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-ctx.Done()
		// Unblocks the read loop.
		_ = p.cfg.Conn.SetReadDeadline(time.Now())
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.receive(ctx)
	}()
	probe := time.NewTicker(p.cfg.Timing.ProbeInterval)
	defer probe.Stop()
	for {
		select {
		case <-ctx.Done():
			<-done
			return nil
		case <-probe.C:
			p.probe()
			p.declare()
		case <-p.kick:
			p.probe()
		}
	}
}

func (p *Peer) probe() {
	p.mu.Lock()
	type out struct {
		to   netip.AddrPort
		data []byte
	}
	var msgs []out
	for node, addr := range p.witnesses {
		seq := p.h.Probe(node, time.Now())
		b, err := p.cfg.Codec.Encode(witness.Message{From: p.cfg.Node, To: node, Gen: p.cfg.Gen, Seq: seq})
		if err != nil {
			p.cfg.Log.Error(err, "Encoding a probe", "witness", node)
			continue
		}
		msgs = append(msgs, out{addr, b})
	}
	p.mu.Unlock()
	for _, m := range msgs {
		if _, err := p.cfg.Conn.WriteTo(m.data, net.UDPAddrFromAddrPort(m.to)); err != nil {
			p.cfg.Log.V(1).Info("Sending a probe failed", "to", m.to.String(), "error", err.Error())
		}
	}
}

func (p *Peer) declare() {
	p.mu.Lock()
	decl := p.w.Tick(time.Now())
	p.mu.Unlock()
	if len(decl) > 0 && p.cfg.OnDeclared != nil {
		p.cfg.OnDeclared(decl)
	}
}

func (p *Peer) receive(ctx context.Context) {
	buf := make([]byte, 1024)
	for ctx.Err() == nil {
		n, from, err := p.cfg.Conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				p.cfg.Log.V(1).Info("Reading a datagram failed", "error", err.Error())
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		m, err := p.cfg.Codec.Decode(buf[:n], p.cfg.Node)
		if err != nil {
			p.cfg.Log.V(1).Info("Dropped a datagram", "from", from.String(), "error", err.Error())
			if errors.Is(err, witness.ErrUnverified) {
				p.hold(m.From, buf[:n], from)
				if p.cfg.OnUnverified != nil {
					p.cfg.OnUnverified(m.From)
				}
			}
			continue
		}
		p.handle(m, from)
	}
}

func (p *Peer) handle(m witness.Message, from net.Addr) {
	if m.IsAnswer {
		p.answered(m)
	} else {
		p.answer(m, from)
	}
}

// hold keeps an unverified message of node's for Retry.
func (p *Peer) hold(node string, data []byte, from net.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if _, ok := p.unverified[node]; !ok && len(p.unverified) >= maxUnverified {
		// Full, of names whose keys were never read (forged ones, say):
		// what Retry would drop anyway goes.
		for n, h := range p.unverified {
			if now.Sub(h.at) > p.cfg.Timing.ProbeInterval {
				delete(p.unverified, n)
			}
		}
		if len(p.unverified) >= maxUnverified {
			return
		}
	}
	p.unverified[node] = heldMessage{data: bytes.Clone(data), from: from, at: now}
}

// Retry handles the message of node's kept since its signature could not
// be verified, now that the agent has read node's key again; it drops it
// when it is older than a probe interval (a newer one has come, or will)
// or still does not verify. The witness counts the node as heard now,
// later than it sent: a later "heard" only delays a declaration; a vouch
// still counts from the holder's own send.
func (p *Peer) Retry(node string) {
	p.mu.Lock()
	h, ok := p.unverified[node]
	delete(p.unverified, node)
	p.mu.Unlock()
	if !ok || time.Since(h.at) > p.cfg.Timing.ProbeInterval {
		return
	}
	m, err := p.cfg.Codec.Decode(h.data, p.cfg.Node)
	if err != nil {
		return
	}
	p.handle(m, h.from)
}

// answer vouches (or not) for a probe and replies to where it came from:
// the MAC, not the source address, says who sent it.
func (p *Peer) answer(m witness.Message, from net.Addr) {
	p.mu.Lock()
	a := p.w.Probe(m.From, m.Gen, m.Seq, time.Now())
	p.mu.Unlock()
	b, err := p.cfg.Codec.Encode(witness.Message{From: p.cfg.Node, To: m.From, Gen: m.Gen, Seq: m.Seq, IsAnswer: true, Answer: a})
	if err != nil {
		return
	}
	if _, err := p.cfg.Conn.WriteTo(b, from); err != nil {
		p.cfg.Log.V(1).Info("Answering a probe failed", "to", from.String(), "error", err.Error())
	}
}

func (p *Peer) answered(m witness.Message) {
	p.mu.Lock()
	if m.Gen != p.cfg.Gen {
		p.mu.Unlock()
		return // an answer to an earlier session's probe
	}
	lost := p.h.Answered(m.From, m.Seq, m.Answer)
	first := lost && !p.lostOnce
	p.lostOnce = p.lostOnce || lost
	p.mu.Unlock()
	switch {
	case first && p.cfg.OnLost != nil:
		p.cfg.OnLost()
	case !lost && m.Answer.Vouch && p.cfg.OnVouched != nil:
		p.cfg.OnVouched()
	}
}
