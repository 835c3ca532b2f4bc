package witnessrun

import (
	"context"
	"crypto/ed25519"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/heartbeat"
	"github.com/kubext/kubext/internal/witness"
)

// keyring holds the other agents' public keys (witness.Keys), read from
// their heartbeat Leases (witness.AnnotationPublicKey) when a message
// needs one: the first message of a node, and the first after its agent
// restarted with a new key. Only a node's agent may write its Lease (the
// admission policy), so a key read there is that agent's.
//
// A read is asked for by a message that could not be verified, which
// anybody with the cluster's key can send under any name: the reads are
// bounded, at most one every rereadEvery per node and rereadsPerSecond in all, so
// forged names cost the API server a trickle. Until a key is read the
// node's messages are dropped, as lost ones; while the API server is
// down, a node that restarted is not heard until it is back.
type keyring struct {
	leases heartbeat.LeaseInterface
	log    logr.Logger
	limit  *rate.Limiter
	work   chan string

	// onKey is called with a node whose key was read (Peer.Retry).
	onKey func(node string)

	mu    sync.Mutex
	keys  map[string]ed25519.PublicKey
	asked map[string]time.Time
}

const (
	// rereadEvery is the least time between two reads of one node's key:
	// short, since a failover may wait for the read that follows a
	// restart (the global bound is what keeps forged names cheap).
	rereadEvery = 250 * time.Millisecond
	// rereadsPerSecond bounds the reads of all nodes' keys.
	rereadsPerSecond = 10
	// keyReaders read keys side by side: a node placed with new witnesses
	// waits for the slowest read, not for their sum.
	keyReaders = 4
)

func newKeyring(leases heartbeat.LeaseInterface, log logr.Logger) *keyring {
	return &keyring{leases: leases, log: log, limit: rate.NewLimiter(rereadsPerSecond, 2*rereadsPerSecond),
		work: make(chan string, 64), keys: map[string]ed25519.PublicKey{}, asked: map[string]time.Time{}}
}

// PublicKey implements witness.Keys.
func (k *keyring) PublicKey(node string) (ed25519.PublicKey, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	pub, ok := k.keys[node]
	return pub, ok
}

// want asks for node's key to be read if none is known (a new witness).
func (k *keyring) want(node string) {
	if _, ok := k.PublicKey(node); !ok {
		k.reread(node)
	}
}

// reread asks for node's key to be read again; it never blocks (it runs
// on the peer's receiving loop).
func (k *keyring) reread(node string) {
	k.mu.Lock()
	now := time.Now()
	if last, ok := k.asked[node]; (ok && now.Sub(last) < rereadEvery) || !k.limit.AllowN(now, 1) {
		k.mu.Unlock()
		return
	}
	k.asked[node] = now
	k.mu.Unlock()
	select {
	case k.work <- node:
	default: // a backlog of reads already: this one waits for the next message
	}
}

// run reads the keys asked for until ctx ends.
func (k *keyring) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case node := <-k.work:
			k.read(ctx, node)
		}
	}
}

func (k *keyring) read(ctx context.Context, node string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// A quorum read, not the watch cache's: a node that restarted has
	// published its new key before it sent anything, and a stale copy
	// would hold its previous one, costing the failover that waits for
	// this read another round.
	l, err := k.leases.Get(ctx, heartbeat.LeaseName(ipv1.AgentComponent, node), metav1.GetOptions{})
	var pub ed25519.PublicKey
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		k.log.Info("Reading a node's witness key", "node", node, "error", err.Error())
		return // keep what is known: the API server may be down
	default:
		if pub, err = witness.ParsePublicKey(l.Annotations[witness.AnnotationPublicKey]); err != nil {
			k.log.Info("A node's heartbeat Lease has no witness key", "node", node, "error", err.Error())
		}
	}
	k.mu.Lock()
	if pub == nil {
		delete(k.keys, node)
		k.mu.Unlock()
		return
	}
	k.keys[node] = pub
	k.mu.Unlock()
	if k.onKey != nil {
		k.onKey(node)
	}
}
