package main

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/heartbeat"
	"github.com/kubext/kubext/test/lab"
)

// leaseWrites counts the agents' heartbeat writes for a while in the
// steady state (after the trials, the IP held and its standby placed) and
// returns them per node and second: the API cost of keeping the address
// up, which Witness failover means to cut (issue 12: at most 0.2).
func (b *bench) leaseWrites(ctx context.Context, window time.Duration) (float64, error) {
	cs, err := b.lab.Clientset()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	w, err := cs.CoordinationV1().Leases(lab.SystemNamespace).Watch(ctx, metav1.ListOptions{
		LabelSelector: heartbeat.LabelComponent + "=" + ipv1.AgentComponent})
	if err != nil {
		return 0, err
	}
	defer w.Stop()
	start := time.Now()
	writes := 0
	for ev := range w.ResultChan() {
		if _, ok := ev.Object.(*coordinationv1.Lease); ok && ev.Type == watch.Modified {
			writes++
		}
	}
	if ctx.Err() == nil {
		return 0, fmt.Errorf("the watch of the agents' Leases ended early")
	}
	rate := float64(writes) / float64(len(b.lab.Nodes)) / time.Since(start).Seconds()
	fmt.Printf("heartbeat writes in the steady state: %d in %s over %d nodes: %.2f per node per second\n",
		writes, time.Since(start).Round(time.Second), len(b.lab.Nodes), rate)
	return rate, nil
}
