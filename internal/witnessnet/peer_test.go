package witnessnet

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kubext/kubext/internal/witness"
	"github.com/kubext/kubext/internal/witness/witnesstest"
)

// The peers talk over the loopback interface of the test's own process:
// nothing leaves the machine.

var fast = witness.Timing{ProbeInterval: 10 * time.Millisecond, HoldFor: 60 * time.Millisecond,
	SilentAfter: 150 * time.Millisecond, FenceSlack: 20 * time.Millisecond, Drift: 1e-3}

type testPeer struct {
	*Peer
	addr   netip.AddrPort
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	declared   []witness.Hold
	lost       bool
	unverified []string
	// newWitnesses are OnNewWitness's calls.
	newWitnesses []string
}

func start(t *testing.T, node string, key byte, gen witness.Gen) *testPeer {
	t.Helper()
	return startSigning(t, node, key, witnesstest.NodeKey(node), gen)
}

// startSigning starts a peer for node that signs with priv.
func startSigning(t *testing.T, node string, key byte, priv ed25519.PrivateKey, gen witness.Gen) *testPeer {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	codec, err := witness.NewCodec(bytes.Repeat([]byte{key}, witness.MinKeySize), priv, witnesstest.AnyNode{})
	if err != nil {
		t.Fatal(err)
	}
	tp := &testPeer{addr: conn.LocalAddr().(*net.UDPAddr).AddrPort(), done: make(chan struct{})}
	tp.Peer, err = New(Config{Node: node, Timing: fast, Codec: codec, Conn: conn, Gen: gen,
		OnDeclared:   func(h []witness.Hold) { tp.mu.Lock(); tp.declared = append(tp.declared, h...); tp.mu.Unlock() },
		OnLost:       func() { tp.mu.Lock(); tp.lost = true; tp.mu.Unlock() },
		OnUnverified: func(n string) { tp.mu.Lock(); tp.unverified = append(tp.unverified, n); tp.mu.Unlock() },
		OnNewWitness: func(n string) { tp.mu.Lock(); tp.newWitnesses = append(tp.newWitnesses, n); tp.mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tp.cancel = cancel
	go func() { defer close(tp.done); _ = tp.Run(ctx) }()
	t.Cleanup(func() { tp.stop(); _ = conn.Close() })
	return tp
}

func (tp *testPeer) stop() {
	tp.cancel()
	<-tp.done
}

func (tp *testPeer) declaredHolds() []witness.Hold {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return append([]witness.Hold(nil), tp.declared...)
}

// eventually polls cond for up to 5 s: these are not timing assertions,
// only "it happens".
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPeersVouchAndDeclareOverUDP(t *testing.T) {
	a, b, c := start(t, "a", 1, 7), start(t, "b", 1, 3), start(t, "c", 1, 4)
	a.SetWitnesses(map[string]netip.AddrPort{"b": b.addr, "c": c.addr})
	ws := []string{"b", "c"}
	eventually(t, "a holds on b's and c's vouches", func() bool { return a.HeldUntil(ws).After(time.Now()) })

	// b goes away: a quorum of two needs both, so a's hold runs out.
	b.stop()
	eventually(t, "a's hold lapses without b", func() bool { return !a.HeldUntil(ws).After(time.Now()) })

	// a goes away: c declares it silent, in a's generation.
	a.stop()
	eventually(t, "c declares a silent", func() bool {
		for _, h := range c.declaredHolds() {
			if h == (witness.Hold{Node: "a", Gen: 7}) {
				return true
			}
		}
		return false
	})
}

// A node with the cluster's key (root on any node has it) that signs as
// another cannot vouch in its name: the holder refuses the answers and
// asks for the named node's key again.
func TestAPeerCannotVouchAsAnother(t *testing.T) {
	a, rogue := start(t, "a", 1, 7), startSigning(t, "b", 1, witnesstest.NodeKey("rogue"), 3)
	a.SetWitnesses(map[string]netip.AddrPort{"b": rogue.addr})
	time.Sleep(20 * fast.ProbeInterval)
	if a.HeldUntil([]string{"b"}).After(time.Now()) {
		t.Fatal("a holds on answers another node signed as b")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !slices.Contains(a.unverified, "b") {
		t.Errorf("a did not ask for b's key again: %v", a.unverified)
	}
}

// A probe whose sender's key is not known yet is kept, and answered as
// soon as the key is read (Retry), not at the next probe: a witness that
// learns a restarted node's key costs a failover one API round trip, not
// a probe interval more.
func TestAProbeWaitsForItsSendersKey(t *testing.T) {
	slow := witness.Timing{ProbeInterval: 2 * time.Second, HoldFor: 5 * time.Second, SilentAfter: 8 * time.Second,
		FenceSlack: 20 * time.Millisecond, Drift: 1e-3}
	wKeys := &lockedKeys{m: witness.KeyMap{}}
	unverified := make(chan string, 16)
	peer := func(node string, keys witness.Keys, onUnverified func(string)) (*Peer, netip.AddrPort) {
		conn, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		codec, _ := witness.NewCodec(bytes.Repeat([]byte{1}, witness.MinKeySize), witnesstest.NodeKey(node), keys)
		p, err := New(Config{Node: node, Timing: slow, Codec: codec, Conn: conn, Gen: 7, OnUnverified: onUnverified})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = p.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done; _ = conn.Close() })
		return p, conn.LocalAddr().(*net.UDPAddr).AddrPort()
	}
	w, wAddr := peer("w", wKeys, func(n string) { unverified <- n })
	h, _ := peer("h", witnesstest.AnyNode{}, nil)

	h.SetWitnesses(map[string]netip.AddrPort{"w": wAddr}) // probes at once, then every 2 s
	select {
	case n := <-unverified:
		if n != "h" {
			t.Fatalf("unverified sender %q, want h", n)
		}
	case <-time.After(time.Second):
		t.Fatal("w never received h's probe")
	}
	// The keyring reads h's key, then calls Retry.
	wKeys.set("h", witnesstest.PublicKey("h"))
	w.Retry("h")
	// h's next probe is 2 s away: only the kept one can be answered now.
	deadline := time.Now().Add(time.Second)
	for !h.HeldUntil([]string{"w"}).After(time.Now()) {
		if time.Now().After(deadline) {
			t.Fatal("h's kept probe was not answered after w read its key")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lockedKeys is witness.Keys a test can change while a peer reads it.
type lockedKeys struct {
	mu sync.Mutex
	m  witness.KeyMap
}

func (k *lockedKeys) PublicKey(node string) (ed25519.PublicKey, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.m.PublicKey(node)
}

func (k *lockedKeys) set(node string, pub ed25519.PublicKey) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.m[node] = pub
}

// The agent reads a witness's key as soon as it is named, once.
func TestNewWitnessesAreAnnounced(t *testing.T) {
	a := start(t, "a", 1, 7)
	b, c := netip.MustParseAddrPort("127.0.0.1:9"), netip.MustParseAddrPort("127.0.0.1:10")
	a.SetWitnesses(map[string]netip.AddrPort{"b": b})
	a.SetWitnesses(map[string]netip.AddrPort{"b": b, "c": c})
	a.SetWitnesses(map[string]netip.AddrPort{"b": b, "c": c})
	a.mu.Lock()
	defer a.mu.Unlock()
	if !slices.Equal(a.newWitnesses, []string{"b", "c"}) {
		t.Errorf("new witnesses announced: %v, want [b c]", a.newWitnesses)
	}
}

func TestAPeerWithAnotherKeyCannotVouch(t *testing.T) {
	a, rogue := start(t, "a", 1, 7), start(t, "b", 2, 3)
	a.SetWitnesses(map[string]netip.AddrPort{"b": rogue.addr})
	// Give the rogue time to answer many probes: none may count.
	time.Sleep(20 * fast.ProbeInterval)
	if a.HeldUntil([]string{"b"}).After(time.Now()) {
		t.Fatal("a holds on answers signed with another key")
	}
	if got := rogue.declaredHolds(); len(got) != 0 {
		t.Fatalf("the rogue took a's probes for real ones: %v", got)
	}
}

// declaredThenBack runs a holder a/7 with witness b until b declares it
// silent, then a new peer for a in the same generation 7 (a restart that
// failed to move on), and waits until it is told so.
func declaredThenBack(t *testing.T) (again *testPeer) {
	t.Helper()
	b := start(t, "b", 1, 3)
	a := start(t, "a", 1, 7)
	a.SetWitnesses(map[string]netip.AddrPort{"b": b.addr})
	eventually(t, "a holds", func() bool { return a.HeldUntil([]string{"b"}).After(time.Now()) })
	a.stop()
	eventually(t, "b declares a/7", func() bool { return len(b.declaredHolds()) > 0 })
	again = start(t, "a", 1, 7)
	again.SetWitnesses(map[string]netip.AddrPort{"b": b.addr})
	eventually(t, "a/7 learns it was declared silent", func() bool {
		again.mu.Lock()
		defer again.mu.Unlock()
		return again.lost
	})
	return again
}

func TestARestartedHolderLearnsItWasDeclaredSilent(t *testing.T) {
	// The same generation again is refused and told so.
	again := declaredThenBack(t)
	if again.HeldUntil([]string{"b"}).After(time.Now()) {
		t.Fatal("a declared generation holds again")
	}
}

// A holder told its generation was declared silent starts a new one
// (what the agent does once it has stopped answering): the witness vouches
// for the new generation, never for the old; a generation that does not
// move forward is refused.
func TestALostHolderHoldsAgainInANewGeneration(t *testing.T) {
	again := declaredThenBack(t)
	if err := again.Restart(7); err == nil {
		t.Fatal("restarted in the same generation")
	}
	restarted := time.Now()
	if err := again.Restart(8); err != nil {
		t.Fatal(err)
	}
	// Held now only on a probe of generation 8, sent after the restart
	// (on loopback one may already be vouched for): never on an older one.
	if until := again.HeldUntil([]string{"b"}); again.Gen() != 8 || (until.After(time.Now()) && until.Before(restarted.Add(fast.HoldFor))) {
		t.Fatal("the new generation starts with what the old one was vouched for")
	}
	eventually(t, "a/8 holds", func() bool { return again.HeldUntil([]string{"b"}).After(time.Now()) })
}

func TestNewRefusesBadConfig(t *testing.T) {
	codec, _ := witness.NewCodec(bytes.Repeat([]byte{1}, witness.MinKeySize), witnesstest.NodeKey("a"), witnesstest.AnyNode{})
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := New(Config{Node: "a", Codec: codec, Conn: conn, Gen: 1, Timing: witness.Timing{}}); err == nil {
		t.Error("a zero timing accepted")
	}
	if _, err := New(Config{Node: "a", Codec: codec, Conn: conn, Timing: fast}); err == nil {
		t.Error("generation 0 accepted")
	}
}

// The messages kept for Retry are bounded, and names whose keys are never
// read (forged ones) do not keep a real sender's message out for good.
func TestKeptMessagesAreBounded(t *testing.T) {
	a := start(t, "a", 1, 7).Peer
	from := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9}
	for i := range maxUnverified + 10 {
		a.hold(fmt.Sprintf("forged-%d", i), []byte("x"), from)
	}
	a.mu.Lock()
	n := len(a.unverified)
	for k, h := range a.unverified {
		h.at = h.at.Add(-time.Second) // older than a probe interval
		a.unverified[k] = h
	}
	a.mu.Unlock()
	if n != maxUnverified {
		t.Fatalf("%d messages kept, want at most %d", n, maxUnverified)
	}
	a.hold("real", []byte("y"), from)
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.unverified["real"]; !ok {
		t.Error("a real sender's message is kept out by stale forged ones")
	}
}
