package ip

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/heartbeat"
)

// fakeAgent stands in for the ip-agent of one node (the real one programs
// a kernel; see internal/ipagent and the e2e tests): it renews the node's
// heartbeat Lease and confirms or releases IPs following the same rules.
type fakeAgent struct {
	node   string
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	attached map[string]bool // IP names it reported
	// gen, when set, is the generation it holds IPs that name witnesses
	// in (Witness failover).
	gen int64
	// noClaim holds back its claims (an agent slow to claim: waiting for
	// its witnesses, or its write delayed).
	noClaim atomic.Bool
}

// startAgent runs a fake agent until the test ends or stop is called.
func startAgent(t *testing.T, node string) *fakeAgent {
	ctx, cancel := context.WithCancel(context.Background())
	a := &fakeAgent{node: node, cancel: cancel, done: make(chan struct{}), attached: map[string]bool{}}
	go a.run(ctx)
	t.Cleanup(a.stop)
	return a
}

// stop makes the agent vanish without a word, as a dead node would.
func (a *fakeAgent) stop() {
	a.cancel()
	<-a.done
}

func (a *fakeAgent) run(ctx context.Context) {
	defer close(a.done)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	renew := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if time.Since(renew) > 300*time.Millisecond {
			a.renew(ctx)
			renew = time.Now()
		}
		a.converge(ctx)
	}
}

func (a *fakeAgent) renew(ctx context.Context) {
	name := heartbeat.LeaseName(ipv1.AgentComponent, a.node)
	now := metav1.NewMicroTime(time.Now())
	l := &coordinationv1.Lease{}
	err := k8s.Get(ctx, client.ObjectKey{Namespace: heartbeatNS, Name: name}, l)
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: heartbeatNS, Name: name,
				Labels: map[string]string{heartbeat.LabelComponent: ipv1.AgentComponent}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(a.node), LeaseDurationSeconds: ptr.To[int32](1), RenewTime: &now},
		}
		_ = k8s.Create(ctx, l)
		return
	}
	if err == nil {
		l.Spec.RenewTime = &now
		_ = k8s.Update(ctx, l)
	}
}

// converge follows the agent's protocol, one step per IP per pass: take
// an IP placed here when no other node is attached and the holder pod runs
// here (attachedNode, before programming), confirm it once "programmed"
// (attachedPod), release an IP no longer placed here (both cleared).
func (a *fakeAgent) converge(ctx context.Context) {
	ips := &ipv1.IPList{}
	if err := k8s.List(ctx, ips); err != nil {
		return
	}
	for i := range ips.Items {
		ip := &ips.Items[i]
		orig := ip.DeepCopy()
		switch {
		case ip.Status.Node == a.node && ip.Status.AttachedNode == "" && !a.noClaim.Load() && a.holderHere(ctx, ip):
			ip.Status.AttachedNode = a.node
			if a.gen > 0 && len(ip.Status.Witnesses) > 0 {
				ip.Status.AttachedGeneration = a.gen
			}
		case ip.Status.Node == a.node && ip.Status.AttachedNode == a.node && ip.Status.AttachedPod != ip.Status.Pod && a.holderHere(ctx, ip):
			ip.Status.AttachedPod = ip.Status.Pod
		case ip.Status.Node == a.node && ip.Status.AttachedNode == a.node && ip.Status.AttachedGeneration == 0 &&
			a.gen > 0 && len(ip.Status.Witnesses) > 0 && !a.noClaim.Load():
			// A hold on the Lease moves to the word of witnesses named
			// after it began.
			ip.Status.AttachedGeneration = a.gen
		case ip.Status.Node != a.node && ip.Status.AttachedNode == a.node:
			ip.Status.AttachedNode, ip.Status.AttachedPod, ip.Status.AttachedGeneration = "", "", 0
		default:
			continue
		}
		if k8s.Status().Patch(ctx, ip, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})) == nil {
			a.mu.Lock()
			a.attached[ip.Name] = ip.Status.AttachedNode != ""
			a.mu.Unlock()
		}
	}
}

func (a *fakeAgent) holderHere(ctx context.Context, ip *ipv1.IP) bool {
	p := &corev1.Pod{}
	ns, name, _ := strings.Cut(ip.Status.Pod, "/")
	return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p) == nil && p.Spec.NodeName == a.node
}
