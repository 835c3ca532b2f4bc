package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/heartbeat"
	"github.com/kubext/kubext/internal/ipagent"
	"github.com/kubext/kubext/internal/netconf"
	"github.com/kubext/kubext/internal/witness"
	"github.com/kubext/kubext/internal/witnessnet"
)

// witnessFlags configure the agent's part in Witness failover
// (docs/design/failover.md). Every agent of a cluster must use the same
// port, key and timing.
type witnessFlags struct {
	port    uint
	keyFile string
	timing  witness.Timing
	// idleLease and idleRenew are the heartbeat's timings while the node
	// holds nothing on its Lease.
	idleLease, idleRenew time.Duration
}

// defaultWitnessTiming is witness.DefaultTiming: the hold gate of
// internal/netconf ends a hold in the kernel to the millisecond, so the
// fence slack covers only timer and packet delays.
func defaultWitnessTiming() witness.Timing { return witness.DefaultTiming() }

// witnessBackstop is how long after a witness hold the coarse address
// lifetimes may run: the gate silences the node at the hold's end; the
// lifetimes only make sure a killed agent's addresses go eventually, and
// must leave a whole second to write.
const witnessBackstop = 1500 * time.Millisecond

func (f *witnessFlags) bind(fs *flag.FlagSet) {
	f.timing = defaultWitnessTiming()
	fs.UintVar(&f.port, "witness-port", 0, "UDP port of the witness protocol on the node network (0 = off: every hold is on the heartbeat Lease). "+
		"IPs of pools with failover Witness are then held while a majority of their witnesses vouches for this node.")
	fs.StringVar(&f.keyFile, "witness-key-file", "", "File holding the cluster's witness key (at least 32 bytes; the Secret kubext-witness-key).")
	fs.DurationVar(&f.timing.ProbeInterval, "witness-probe-interval", f.timing.ProbeInterval, "How often a holder probes each witness.")
	fs.DurationVar(&f.timing.HoldFor, "witness-hold-for", f.timing.HoldFor, "How long after a probe a quorum vouched for the holder keeps answering.")
	fs.DurationVar(&f.timing.SilentAfter, "witness-silent-after", f.timing.SilentAfter, "How long a witness hears nothing from a node before it declares it silent.")
	fs.DurationVar(&f.timing.FenceSlack, "witness-fence-slack", f.timing.FenceSlack, "How long after its hold ends the node may still answer: the hold gate's timers and packets in flight.")
	fs.DurationVar(&f.idleLease, "idle-lease-duration", 16*time.Second, "With --witness-port: the heartbeat's lease duration while the node holds nothing on its Lease (whole seconds): "+
		"how long a node that dies then still counts as a candidate.")
	fs.DurationVar(&f.idleRenew, "idle-renew-interval", 8*time.Second, "With --witness-port: how often the heartbeat is renewed while the node holds nothing on its Lease.")
}

// witnessRun is the agent's peer, run by the manager.
type witnessRun struct {
	peer    *witnessnet.Peer
	timing  witness.Timing
	vouched chan struct{}
	agent   *ipagent.Reconciler
	dp      *netconf.Dataplane
}

// startWitness restores what this node published before (its last
// generation and its declarations, which it must never contradict: a
// restarted witness that forgot a declaration could vouch for a node the
// controller has already moved away from), and opens the peer's socket.
// It waits for the API server: without its declarations the node must not
// answer any probe.
func startWitness(ctx context.Context, f witnessFlags, cs kubernetes.Interface, namespace, node string,
	agent *ipagent.Reconciler, dp *netconf.Dataplane, publish func()) (*witnessRun, error) {
	if err := f.timing.Validate(); err != nil {
		return nil, fmt.Errorf("witness timing: %w", err)
	}
	if f.port > 65535 {
		return nil, fmt.Errorf("--witness-port %d is not a port", f.port)
	}
	key, err := os.ReadFile(f.keyFile)
	if err != nil {
		return nil, fmt.Errorf("--witness-key-file: %w", err)
	}
	codec, err := witness.NewCodec(key)
	if err != nil {
		return nil, fmt.Errorf("--witness-key-file %s: %w", f.keyFile, err)
	}
	var last witness.Gen
	var declared map[string]witness.Gen
	name := heartbeat.LeaseName(ipv1.AgentComponent, node)
	err = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := cs.CoordinationV1().Leases(namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			ctrl.Log.Info("Reading this node's witness declarations back", "lease", name, "error", err.Error())
			return false, nil
		}
		if last, err = witness.ParseGen(l.Annotations[witness.AnnotationGeneration]); err != nil {
			return false, fmt.Errorf("lease %s: %w", name, err)
		}
		declared, err = witness.ParseDeclared(l.Annotations[witness.AnnotationDeclared])
		if err != nil {
			return false, fmt.Errorf("lease %s: %w", name, err)
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	conn, err := net.ListenPacket("udp", ":"+strconv.FormatUint(uint64(f.port), 10))
	if err != nil {
		return nil, fmt.Errorf("witness port: %w", err)
	}
	w := &witnessRun{timing: f.timing, vouched: make(chan struct{}, 1), agent: agent, dp: dp}
	w.peer, err = witnessnet.New(witnessnet.Config{
		Node:     node,
		Timing:   f.timing,
		Codec:    codec,
		Conn:     conn,
		Gen:      witness.NextGen(last, time.Now()),
		Declared: declared,
		OnVouched: func() {
			select {
			case w.vouched <- struct{}{}:
			default:
			}
		},
		OnDeclared: func(d []witness.Hold) {
			ctrl.Log.Info("Declared silent", "holds", d)
			publish()
		},
		OnLost: func() {
			ctrl.Log.Info("A witness declared this node's generation silent: stopping, and starting a new generation")
			err := agent.WitnessesLost(func() error { return w.peer.Restart(witness.NextGen(w.peer.Gen(), time.Now())) })
			if err != nil {
				ctrl.Log.Error(err, "Starting a new witness generation")
			}
			publish()
		},
		Log: ctrl.Log.WithName("witness"),
	})
	if err != nil {
		return nil, errors.Join(err, conn.Close())
	}
	ctrl.Log.Info("Witness protocol on", "port", f.port, "generation", w.peer.Gen(), "declared", len(declared))
	return w, nil
}

// Start runs the peer, and refreshes the kernel's deadlines as the
// witnesses vouch.
func (w *witnessRun) Start(ctx context.Context) error {
	go w.follow(ctx)
	return w.peer.Run(ctx)
}

// follow moves the kernel's deadlines with each vouch, and asks for a
// reconcile when a claim waits for a quorum or a hold has lapsed.
func (w *witnessRun) follow(ctx context.Context) {
	check := time.NewTicker(w.timing.HoldFor / 2)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.vouched:
			if !w.agent.HoldsOnWitnesses() {
				w.agent.Poke() // a claim may be waiting for this quorum
				continue
			}
			if err := w.dp.Refresh(); errors.Is(err, netconf.ErrLapsed) {
				w.agent.Poke()
			}
		case <-check.C:
			if w.agent.HoldsOnWitnesses() && w.agent.HoldDeadline(time.Time{}, 0).Before(time.Now()) {
				w.agent.Poke() // lapsed: take it off
			}
		}
	}
}

// idle is the heartbeat's Idle: nil (never idle) without the protocol;
// else idle while the node holds nothing on its Lease and only pools with
// Witness failover select it (a Lease pool's standby must stay fresh to
// be chosen, and to claim without waiting for a renewal).
func (w *witnessRun) idle(agent *ipagent.Reconciler, duty *ipagent.Duty) func() bool {
	if w == nil {
		return nil
	}
	return func() bool { return agent.Idle() && duty.OnlyWitnessPools() }
}

// annotations publish the generation and the declarations on the Lease.
func (w *witnessRun) annotations() map[string]string {
	if w == nil {
		return nil
	}
	out := map[string]string{witness.AnnotationGeneration: strconv.FormatUint(uint64(w.peer.Gen()), 10)}
	// Never write fewer declarations than before: leave the old ones.
	if decl, err := witness.FormatDeclared(w.peer.Declared()); err != nil {
		ctrl.Log.Error(err, "Publishing declarations")
	} else {
		out[witness.AnnotationDeclared] = decl
	}
	return out
}
