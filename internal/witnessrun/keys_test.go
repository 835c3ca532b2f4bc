package witnessrun

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubext/kubext/internal/heartbeat"
)

// countingLeases counts the Gets of a Lease client.
type countingLeases struct {
	heartbeat.LeaseInterface
	gets atomic.Int64
}

func (c *countingLeases) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	c.gets.Add(1)
	return c.LeaseInterface.Get(ctx, name, opts)
}

// An agent learns another node's key from that node's Lease, as the
// deployed agent (its RBAC lets it read every Lease of its namespace, and
// only the other node's agent may write that one); a node that restarted
// with a new key is read again; and names nobody runs, which anybody with
// the cluster's key can send, cost a bounded trickle of reads.
func TestKeysComeFromTheNodesLeases(t *testing.T) {
	ctx := t.Context()
	const ns = "system"
	installAgentAccess(t, ns)
	// node-k2's agent starts: its restore publishes its key.
	first, _, _ := ed25519.GenerateKey(nil)
	restoreCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, _, err := restore(restoreCtx, agentLeases(t, "node-k2").Leases(ns), "node-k2", first, logr.Discard()); err != nil {
		t.Fatal(err)
	}

	leases := &countingLeases{LeaseInterface: agentLeases(t, "node-k1").Leases(ns)}
	k := newKeyring(leases, logr.Discard())
	go k.run(ctx)
	known := func(want ed25519.PublicKey) func() bool {
		return func() bool {
			got, ok := k.PublicKey("node-k2")
			return ok && got.Equal(want)
		}
	}
	if _, ok := k.PublicKey("node-k2"); ok {
		t.Fatal("a key known before any read")
	}
	k.reread("node-k2")
	waitFor(t, "node-k2's key read from its Lease", known(first))

	// node-k2 restarts with a new key; its next message fails the old one
	// and asks for a read, which comes once rereadEvery has passed.
	second, _, _ := ed25519.GenerateKey(nil)
	if _, _, err := restore(ctx, agentLeases(t, "node-k2").Leases(ns), "node-k2", second, logr.Discard()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(rereadEvery + 2*time.Second)
	for time.Now().Before(deadline) && !known(second)() {
		k.reread("node-k2")
		time.Sleep(50 * time.Millisecond)
	}
	if !known(second)() {
		t.Fatal("node-k2's new key was not read")
	}

	// Forged names: a burst of messages under 200 names nobody runs.
	before := leases.gets.Load()
	for i := range 200 {
		k.reread(fmt.Sprintf("forged-%d", i))
	}
	time.Sleep(time.Second)
	if got := leases.gets.Load() - before; got > 3*rereadsPerSecond {
		t.Errorf("200 forged names cost %d reads in a second, want at most %d", got, 3*rereadsPerSecond)
	}
	if _, ok := k.PublicKey("forged-0"); ok {
		t.Error("a key for a node that has no Lease")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 100 {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for: %s", what)
}
