// Package witnessrun starts and runs an ip-agent's end of the witness
// protocol (docs/design/failover.md): it restores what the node published
// before, opens the peer's socket, follows the witnesses' vouches with the
// data plane's deadlines, and publishes the generation and declarations on
// the heartbeat Lease. cmd/ip-agent and the scale bench's light agents
// (test/bench/scale) share it, so the bench runs what ships.
package witnessrun

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/heartbeat"
	"github.com/kubext/kubext/internal/ipagent"
	"github.com/kubext/kubext/internal/netconf"
	"github.com/kubext/kubext/internal/witness"
	"github.com/kubext/kubext/internal/witnessguard"
	"github.com/kubext/kubext/internal/witnessnet"
)

// Config is the agent's part in Witness failover. Every agent of a
// cluster must use the same port, key and timing.
type Config struct {
	// Port is the UDP port of the protocol on the node network (0: off).
	Port uint
	// Host is the address the socket binds to ("": every address of the
	// node, as the deployed agent has it; the bench gives each light agent
	// a loopback address of its own).
	Host    string
	KeyFile string
	Timing  witness.Timing
	// Guard keeps floods off the port in the kernel (internal/witnessguard):
	// on in the ip-agent, off for the bench's light agents, which share
	// the host's network namespace.
	Guard bool
	// AllowFrom are the networks the peers send from (the node network);
	// with Guard, datagrams to the port from elsewhere are dropped. Empty:
	// any source, each rate-limited.
	AllowFrom []netip.Prefix
	// IdleLease and IdleRenew are the heartbeat's timings while the node
	// holds nothing on its Lease.
	IdleLease, IdleRenew time.Duration
}

// AllowFromFlag is Config.AllowFrom's flag; $AllowFromEnv is its default
// (SetAllowFromDefault), which the DaemonSet takes from the ip-agent
// ConfigMap.
const (
	AllowFromFlag = "witness-allow-from"
	AllowFromEnv  = "WITNESS_ALLOW_FROM"
)

// SetAllowFromDefault gives --witness-allow-from its default from the
// environment, when the flag was not given: call it after fs.Parse.
func SetAllowFromDefault(fs *flag.FlagSet) error {
	v := os.Getenv(AllowFromEnv)
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == AllowFromFlag })
	if given || v == "" {
		return nil
	}
	if err := fs.Set(AllowFromFlag, v); err != nil {
		return fmt.Errorf("$%s: %w", AllowFromEnv, err)
	}
	return nil
}

// DefaultConfig is the ip-agent's defaults, protocol off.
func DefaultConfig() Config {
	return Config{Timing: witness.DefaultTiming(), Guard: true, IdleLease: 16 * time.Second, IdleRenew: 8 * time.Second}
}

// BindFlags registers the ip-agent's witness flags, with DefaultConfig's
// values as defaults.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	*c = DefaultConfig()
	fs.UintVar(&c.Port, "witness-port", 0, "UDP port of the witness protocol on the node network (0 = off: every hold is on the heartbeat Lease). "+
		"IPs of pools with failover Witness are then held while a majority of their witnesses vouches for this node.")
	fs.StringVar(&c.KeyFile, "witness-key-file", "", "File holding the cluster's witness key (at least 32 bytes; the Secret kubext-witness-key).")
	fs.BoolVar(&c.Guard, "witness-guard", c.Guard, "Drop floods to the witness port in the kernel (nftables table kubext-witness): "+
		"datagrams from outside --witness-allow-from, and from any one source beyond fifty times a peer's rate.")
	fs.Func(AllowFromFlag, "Comma-separated CIDRs the other nodes' agents send from: the node network (default $WITNESS_ALLOW_FROM; empty: any source). "+
		"Pods and the Internet then cannot reach the witness port at all.", func(v string) error {
		c.AllowFrom = nil
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			p, err := netip.ParsePrefix(s)
			if err != nil || p != p.Masked() {
				return fmt.Errorf("%q is not a CIDR with its network address (e.g. 192.0.2.0/24)", s)
			}
			c.AllowFrom = append(c.AllowFrom, p)
		}
		return nil
	})
	fs.DurationVar(&c.Timing.ProbeInterval, "witness-probe-interval", c.Timing.ProbeInterval, "How often a holder probes each witness.")
	fs.DurationVar(&c.Timing.HoldFor, "witness-hold-for", c.Timing.HoldFor, "How long after a probe a quorum vouched for the holder keeps answering.")
	fs.DurationVar(&c.Timing.SilentAfter, "witness-silent-after", c.Timing.SilentAfter, "How long a witness hears nothing from a node before it declares it silent.")
	fs.DurationVar(&c.Timing.FenceSlack, "witness-fence-slack", c.Timing.FenceSlack, "How long after its hold ends the node may still answer: the hold gate's timers and packets in flight.")
	fs.DurationVar(&c.IdleLease, "idle-lease-duration", c.IdleLease, "With --witness-port: the heartbeat's lease duration while the node holds nothing on its Lease (whole seconds): "+
		"how long a node that dies then still counts as a candidate.")
	fs.DurationVar(&c.IdleRenew, "idle-renew-interval", c.IdleRenew, "With --witness-port: how often the heartbeat is renewed while the node holds nothing on its Lease.")
}

// Refresher is what the run needs of the data plane: restart the
// addresses' lifetimes as the witnesses vouch (netconf.Dataplane.Refresh:
// netconf.ErrLapsed when something had expired).
type Refresher interface {
	// Refresh rewrites every deadline the node's data plane keeps (the
	// hold gate, address lifetimes, NAT timeouts) and says whether
	// something lapsed.
	Refresh() error
	// RefreshGate moves the hold gate's deadline alone.
	RefreshGate() error
}

// fullRefreshEvery is how often a holder's data plane is refreshed whole
// while it holds on its witnesses' word, on a clock of its own; each vouch
// moves only the hold gate, which follows the witnesses' word to the
// millisecond. Address lifetimes and NAT timeouts are whole seconds (one
// second at the default lease, the shortest a write may give), so four
// full refreshes a second leave them at least 750 ms whatever the
// witnesses' timing (a vouch every second, at a probe interval of one
// second, would otherwise let them lapse under a live hold), more than a
// Lease holder's renewals every 500 ms leave. A refresh without a vouch
// gives nothing beyond the hold: every lifetime written ends by
// netconf.Options.HoldDeadline. A full refresh on every vouch, twenty a
// second, was most of a holder's CPU (docs/benchmarks.md, "The ip-agent's
// floor").
const fullRefreshEvery = 250 * time.Millisecond

// follower is what follow needs of the agent (ipagent.Reconciler).
type follower interface {
	// HoldsOnWitnesses reports whether the node holds an address on its
	// witnesses' word.
	HoldsOnWitnesses() bool
	// QuorumReached reports whether a claim waited for the quorum that
	// vouched.
	QuorumReached() bool
	HoldDeadline(leaseEnd time.Time, backstop time.Duration) time.Time
	// Poke asks for a pass.
	Poke()
}

// Run is the agent's peer; Start runs it.
type Run struct {
	peer    *witnessnet.Peer
	timing  witness.Timing
	vouched chan struct{}
	agent   follower
	dp      Refresher
	log     logr.Logger
	// pub is this run's public key, published on the Lease; keys are the
	// other nodes'.
	pub  ed25519.PublicKey
	keys *keyring
}

// New restores what this node published before (its last generation and
// its declarations, which it must never contradict: a restarted witness
// that forgot a declaration could vouch for a node the controller has
// already moved away from), and opens the peer's socket. It waits for the
// API server: without its declarations the node must not answer any
// probe. publish asks the heartbeat to write the Lease (Annotations).
//
// What it read must also be the last word of every earlier run: a
// declaration an earlier run sent just before it died may still be on its
// way (queued in the API server) and land after the read, where the
// controller counts it although this run never heard of it. So the read
// is confirmed by a write conditional on it (the new generation, which the
// heartbeat would publish next anyway) before any probe is answered: every
// write of an earlier run was conditional on an older version (or was the
// Lease's creation) and is refused once this one has landed, and if one
// lands first, this write conflicts and the Lease is read again.
func New(ctx context.Context, c Config, leases heartbeat.LeasesGetter, namespace, node string,
	agent *ipagent.Reconciler, dp Refresher, publish func(), log logr.Logger) (*Run, error) {
	if err := c.Timing.Validate(); err != nil {
		return nil, fmt.Errorf("witness timing: %w", err)
	}
	if c.Port > 65535 {
		return nil, fmt.Errorf("--witness-port %d is not a port", c.Port)
	}
	key, err := os.ReadFile(c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("--witness-key-file: %w", err)
	}
	// This run's own key: published with its generation before any
	// message is signed with it.
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		return nil, err
	}
	keys := newKeyring(leases.Leases(namespace), log.WithName("keys"))
	codec, err := witness.NewCodec(key, priv, keys)
	if err != nil {
		return nil, fmt.Errorf("--witness-key-file %s: %w", c.KeyFile, err)
	}
	gen, declared, err := restore(ctx, leases.Leases(namespace), node, pub, log)
	if err != nil {
		return nil, err
	}
	if c.Guard {
		// Before the socket opens: no flood finds it unguarded.
		g := witnessguard.Config{Port: uint16(c.Port), AllowFrom: c.AllowFrom, PerSource: witnessguard.PerSourceRate(c.Timing)}
		if err := witnessguard.Install(g, 0); err != nil {
			return nil, fmt.Errorf("guarding the witness port (--witness-guard): %w", err)
		}
		guardInstalled.Store(true)
		log.Info("Witness port guarded", "allowFrom", c.AllowFrom, "perSourcePerSecond", g.PerSource)
	}
	conn, err := witnessnet.Listen(ctx, net.JoinHostPort(c.Host, strconv.FormatUint(uint64(c.Port), 10)))
	if err != nil {
		return nil, fmt.Errorf("witness port: %w", err)
	}
	w := &Run{timing: c.Timing, vouched: make(chan struct{}, 1), agent: agent, dp: dp, log: log, pub: pub, keys: keys}
	w.peer, err = witnessnet.New(witnessnet.Config{
		Node:     node,
		Timing:   c.Timing,
		Codec:    codec,
		Conn:     conn,
		Gen:      gen,
		Declared: declared,
		OnVouched: func() {
			select {
			case w.vouched <- struct{}{}:
			default:
			}
		},
		OnDeclared: func(d []witness.Hold) {
			declarations.Add(float64(len(d)))
			log.Info("Declared silent", "holds", d)
			publish()
		},
		OnLost: func() {
			generationsLost.Inc()
			log.Info("A witness declared this node's generation silent: stopping, and starting a new generation")
			err := agent.WitnessesLost(func() error { return w.peer.Restart(witness.NextGen(w.peer.Gen(), time.Now())) })
			if err != nil {
				log.Error(err, "Starting a new witness generation")
			}
			publish()
		},
		OnUnverified: keys.reread,
		OnNewWitness: keys.want,
		Log:          log.WithName("witness"),
	})
	if err != nil {
		return nil, errors.Join(err, conn.Close())
	}
	// Set before Start runs the readers.
	keys.onKey = w.peer.Retry
	log.Info("Witness protocol on", "port", c.Port, "generation", w.peer.Gen(), "declared", len(declared))
	return w, nil
}

// restore reads this node's last generation and declarations from its
// heartbeat Lease and confirms the read with a write conditional on it
// (see New): the new generation on the Lease, or a Lease with nothing else
// (no renewal: the heartbeat makes those) when there is none. It retries
// until both succeed or ctx ends.
func restore(ctx context.Context, leases heartbeat.LeaseInterface, node string, pub ed25519.PublicKey, log logr.Logger) (witness.Gen, map[string]witness.Gen, error) {
	name := heartbeat.LeaseName(ipv1.AgentComponent, node)
	var gen witness.Gen
	var declared map[string]witness.Gen
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			gen, declared = witness.NextGen(0, time.Now()), nil
			_, err = leases.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{heartbeat.LabelComponent: ipv1.AgentComponent},
					Annotations: map[string]string{witness.AnnotationGeneration: formatGen(gen), witness.AnnotationPublicKey: witness.FormatPublicKey(pub)}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node)},
			}, metav1.CreateOptions{})
		case err != nil:
		default:
			last, perr := witness.ParseGen(l.Annotations[witness.AnnotationGeneration])
			if perr != nil {
				return false, fmt.Errorf("lease %s: %w", name, perr)
			}
			if declared, perr = witness.ParseDeclared(l.Annotations[witness.AnnotationDeclared]); perr != nil {
				return false, fmt.Errorf("lease %s: %w", name, perr)
			}
			gen = witness.NextGen(last, time.Now())
			l = l.DeepCopy()
			if l.Annotations == nil {
				l.Annotations = map[string]string{}
			}
			l.Annotations[witness.AnnotationGeneration] = formatGen(gen)
			l.Annotations[witness.AnnotationPublicKey] = witness.FormatPublicKey(pub)
			// The agents' policy lets an agent write only a Lease its node
			// holds.
			l.Spec.HolderIdentity = ptr.To(node)
			// Carries the resourceVersion read.
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
		if err != nil {
			log.Info("Reading this node's witness declarations back", "lease", name, "error", err.Error())
			return false, nil
		}
		return true, nil
	})
	return gen, declared, err
}

// Peer is the agent's end of the protocol (ipagent.WitnessConfig.Peer).
func (w *Run) Peer() *witnessnet.Peer { return w.peer }

// Start runs the peer, and refreshes the kernel's deadlines as the
// witnesses vouch.
func (w *Run) Start(ctx context.Context) error {
	go w.follow(ctx)
	for range keyReaders {
		go w.keys.run(ctx)
	}
	return w.peer.Run(ctx)
}

// follow moves the kernel's deadlines as the witnesses vouch, and asks for
// a reconcile when a claim waits for a quorum or a hold has lapsed.
func (w *Run) follow(ctx context.Context) {
	check := time.NewTicker(w.timing.HoldFor / 2)
	defer check.Stop()
	full := time.NewTicker(fullRefreshEvery)
	defer full.Stop()
	gate := gateWrites{ahead: gateAhead(w.timing)}
	refresh := func(refresh func() error, due func(time.Time, time.Time) bool) {
		if !w.agent.HoldsOnWitnesses() {
			gate.forget()
			return
		}
		// Read before the write: the deadline written is this or later
		// (the hold only grows, until a restart, which moves it back and
		// makes the next vouch write).
		deadline := w.agent.HoldDeadline(time.Time{}, 0)
		if !due(deadline, time.Now()) {
			return
		}
		err := refresh()
		if errors.Is(err, netconf.ErrLapsed) {
			w.agent.Poke()
		}
		if err != nil {
			gate.forget()
			return
		}
		gate.wrote(deadline)
	}
	always := func(time.Time, time.Time) bool { return true }
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.vouched:
			if w.agent.QuorumReached() {
				// A claim was waiting for this quorum: without the poke it
				// waits for the pass's requeue (up to 750 ms). Only then:
				// witnesses vouch every probe interval, and a pass on
				// every vouch was twenty passes a second on every node of
				// a Witness pool, for nothing.
				w.agent.Poke()
			}
			refresh(w.dp.RefreshGate, gate.due)
		case <-full.C:
			refresh(w.dp.Refresh, always)
		case <-check.C:
			if w.agent.HoldsOnWitnesses() && w.agent.HoldDeadline(time.Time{}, 0).Before(time.Now()) {
				w.agent.Poke() // lapsed: take it off
			}
		}
	}
}

// gateWrites decides which vouches are written to the kernel's hold gate.
// A gate write sets the deadline to the hold's end as it is at the write,
// and a vouch moves that end by about a probe interval; writing every
// vouch (one per witness per probe interval) was most of a holder's CPU,
// about 2 ms of netlink each. A vouch is written only once the deadline
// last written is less than ahead away (gateAhead), or the hold's end
// moved back (a new generation, a new set of witnesses).
//
// Why skipping is safe: what the kernel holds is always a deadline the
// witnesses vouched for at some write, never more than the hold's end
// now, so a skipped write can only make the node fall silent sooner. What
// it costs: while vouches keep coming the kernel's deadline stays at least
// ahead in the future, so a gap in the vouches longer than ahead closes
// the gate for a moment where only a gap of HoldFor would have; the next
// vouch opens it again.
type gateWrites struct {
	ahead time.Duration
	// last is the hold's end read before the last write (zero: write).
	last time.Time
}

// gateAhead is how far ahead the gate's deadline is kept: three quarters
// of the hold (a write about every quarter of it: a fifth of the writes
// at the default timing), and never less than two probe intervals, so
// that one lost probe still does not close the gate (what Timing.Validate
// promises; at its limit, a hold of two probe intervals, every vouch is
// written).
func gateAhead(t witness.Timing) time.Duration {
	return max(t.HoldFor*3/4, 2*t.ProbeInterval)
}

func (g *gateWrites) due(deadline, now time.Time) bool {
	return g.last.IsZero() || deadline.Before(g.last) || g.last.Sub(now) < g.ahead
}

func (g *gateWrites) wrote(deadline time.Time) { g.last = deadline }
func (g *gateWrites) forget()                  { g.last = time.Time{} }

// Idle is the heartbeat's Idle: nil (never idle) without the protocol;
// else idle while the node holds nothing on its Lease and only pools with
// Witness failover select it (a Lease pool's standby must stay fresh to
// be chosen, and to claim without waiting for a renewal).
func (w *Run) Idle(agent *ipagent.Reconciler, duty *ipagent.Duty) func() bool {
	if w == nil {
		return nil
	}
	return func() bool { return agent.Idle() && duty.OnlyWitnessPools() }
}

// Annotations publish the generation and the declarations on the Lease
// (heartbeat.Config.Annotations); nil without the protocol.
func (w *Run) Annotations() map[string]string {
	if w == nil {
		return nil
	}
	out := map[string]string{witness.AnnotationGeneration: formatGen(w.peer.Gen()), witness.AnnotationPublicKey: witness.FormatPublicKey(w.pub)}
	// Never write fewer declarations than before: leave the old ones.
	if decl, err := witness.FormatDeclared(w.peer.Declared()); err != nil {
		w.log.Error(err, "Publishing declarations")
	} else {
		out[witness.AnnotationDeclared] = decl
	}
	return out
}

// formatGen is a generation as AnnotationGeneration holds it.
func formatGen(g witness.Gen) string { return strconv.FormatUint(uint64(g), 10) }
