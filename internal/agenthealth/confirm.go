package agenthealth

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubext/kubext/internal/heartbeat"
)

// Confirmation reads are what Lost asks of the API server, and an IP
// controller asks Lost for every IP of a node that looks lost, every
// 250 ms (confirmEvery): at 1,000 nodes, when an overloaded API server
// made the informer lag, a GET per IP per node per round trip was refused
// by the hundred per second and kept it overloaded. So the reads are made
// in rounds: every Lost call waiting for a read of a node joins the round
// in flight that reads that node, or the next one; a round reads each of
// its nodes once (a GET each) or, with many nodes, all the agents' Leases
// at once (one LIST by the component's label), and rounds start at most
// every roundEvery.
//
// Why sharing a read is safe: a caller that joins a round in flight gets
// the answer it would have had by asking at the moment that round's read
// was sent, a little before it asked. That is what a caller gets anyway if
// it is delayed (descheduled, paused) for the read's duration between its
// question and its write, and the controller's argument already holds for
// any delay there: Lost only ever says "this Lease showed no renewal for a
// whole lease duration by the time the read was answered", and the agent
// fenced before that (docs/design/static-ip-safety.md). A caller never
// gets the answer of a round that ended before it asked. A LIST answers
// for every node from one consistent read, exactly as a GET would for
// each; the Leases it finds are observed like the informer's, which only
// ever counts a node alive for longer.
const (
	// roundEvery spaces the starts of confirmation rounds.
	roundEvery = 100 * time.Millisecond
	// listAt is the number of nodes from which a round reads every Lease
	// with one LIST instead of one GET per node.
	listAt = 8
	// roundTimeout bounds a round's reads (a caller stops waiting when its
	// own context ends).
	roundTimeout = 10 * time.Second
	// getWorkers is how many GETs of a round are in flight at once.
	getWorkers = 4
)

// round is one batch of confirmation reads.
type round struct {
	nodes map[string]bool
	done  chan struct{}
	// callers counts the Lost calls waiting for this round.
	callers int
	// Set before done is closed: the Lease read for each node (absent:
	// not found), and the error for each node that could not be read.
	leases map[string]*coordinationv1.Lease
	errs   map[string]error
}

// rounds is the Tracker's state of confirmation reads.
type rounds struct {
	mu       sync.Mutex
	inFlight *round // the round whose reads are under way, if any
	next     *round // the round callers join when inFlight lacks their node
	running  bool   // a goroutine runs the rounds
	started  time.Time
}

// read returns the Lease of node from the API server (nil: not found),
// from a round that started reading no earlier than this call, or one in
// flight that reads this node.
func (t *Tracker) read(ctx context.Context, node string) (*coordinationv1.Lease, error) {
	rs := &t.rounds
	rs.mu.Lock()
	r := rs.inFlight
	if r == nil || !r.nodes[node] {
		if rs.next == nil {
			rs.next = &round{nodes: map[string]bool{}, done: make(chan struct{})}
		}
		r = rs.next
		r.nodes[node] = true
		if !rs.running {
			rs.running = true
			go t.runRounds()
		}
	}
	r.callers++
	rs.mu.Unlock()
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("reading the heartbeat Lease of node %s: %w", node, ctx.Err())
	case <-r.done:
	}
	if err := r.errs[node]; err != nil {
		return nil, err
	}
	return r.leases[node], nil
}

// runRounds runs rounds while callers wait for one, then returns.
func (t *Tracker) runRounds() {
	rs := &t.rounds
	for {
		rs.mu.Lock()
		r := rs.next
		if r == nil {
			rs.running = false
			rs.mu.Unlock()
			return
		}
		wait := roundEvery - time.Since(rs.started)
		if wait > 0 {
			rs.mu.Unlock()
			time.Sleep(wait)
			continue
		}
		rs.next, rs.inFlight, rs.started = nil, r, time.Now()
		rs.mu.Unlock()

		t.fetch(r)

		rs.mu.Lock()
		rs.inFlight = nil
		rs.mu.Unlock()
		close(r.done)
	}
}

// fetch makes a round's reads.
func (t *Tracker) fetch(r *round) {
	ctx, cancel := context.WithTimeout(context.Background(), roundTimeout)
	defer cancel()
	r.leases, r.errs = map[string]*coordinationv1.Lease{}, map[string]error{}
	if len(r.nodes) >= listAt {
		list := &coordinationv1.LeaseList{}
		err := t.reader.List(ctx, list, client.InNamespace(t.namespace), client.MatchingLabels{heartbeat.LabelComponent: t.component})
		if err != nil {
			for node := range r.nodes {
				r.errs[node] = fmt.Errorf("listing the heartbeat Leases (for node %s): %w", node, err)
			}
			return
		}
		byName := make(map[string]*coordinationv1.Lease, len(list.Items))
		for i := range list.Items {
			l := &list.Items[i]
			byName[l.Name] = l
			// What the API server says now of every agent: as good as an
			// informer's event, and fresher than a lagging one.
			t.Observe(l)
		}
		for node := range r.nodes {
			if l, ok := byName[heartbeat.LeaseName(t.component, node)]; ok {
				r.leases[node] = l
			}
		}
		return
	}
	nodes := make([]string, 0, len(r.nodes))
	for node := range r.nodes {
		nodes = append(nodes, node)
	}
	leases, errs := make([]*coordinationv1.Lease, len(nodes)), make([]error, len(nodes))
	// A context that does not stop it early: a piece never started would
	// read as "not found". Each GET is bounded by ctx.
	workqueue.ParallelizeUntil(context.WithoutCancel(ctx), getWorkers, len(nodes), func(i int) {
		l := &coordinationv1.Lease{}
		err := t.reader.Get(ctx, client.ObjectKey{Namespace: t.namespace, Name: heartbeat.LeaseName(t.component, nodes[i])}, l)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			errs[i] = fmt.Errorf("reading the heartbeat Lease of node %s: %w", nodes[i], err)
		default:
			leases[i] = l
		}
	})
	for i, node := range nodes {
		switch {
		case errs[i] != nil:
			r.errs[node] = errs[i]
		case leases[i] != nil:
			r.leases[node] = leases[i]
		}
	}
}
