package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/kubext/kubext/test/bench/stats"
	"github.com/kubext/kubext/test/lab"
)

// writeMethods are the HTTP methods of API writes: create, update, patch
// (server-side apply included) and delete.
var writeMethods = []string{"POST", "PUT", "PATCH", "DELETE"}

// writeCount is what one manager process wrote, from its own client-go
// metrics (rest_client_requests_total, every request it sent, including
// ones that changed nothing, such as an apply of what is already there),
// with the writes that are not about the objects counted apart from the
// API server's side (watches).
type writeCount struct {
	byMethod map[string]float64
	total    float64
	// lease is its leader election's writes: the Lease acquired and
	// renewed, and the Event saying it became leader.
	lease int
	// events is the Events of the controllers.
	events int
}

// objects is the writes made to the objects: all but Lease and Events.
func (w writeCount) objects() float64 { return w.total - float64(w.lease) - float64(w.events) }

func (w writeCount) String() string {
	var parts []string
	for _, m := range writeMethods {
		parts = append(parts, fmt.Sprintf("%s %.0f", m, w.byMethod[m]))
	}
	return fmt.Sprintf("%.0f write requests (%s), of which %d of the leader election and %d Events: %.0f to the objects",
		w.total, strings.Join(parts, ", "), w.lease, w.events, w.objects())
}

// countWrites reads the manager's write requests since it started and
// takes out its Lease writes (holder) and its Events since since. It reads
// the metrics half-way between two lease renewals (every 2 s), so that the
// renewals it counts through the watch are exactly those the metrics hold.
func (b *bench) countWrites(ctx context.Context, m *lab.Manager, holder string, since time.Time) (writeCount, error) {
	if _, err := b.leases.waitWrite(ctx, holder, time.Now(), 30*time.Second); err != nil {
		return writeCount{}, err
	}
	time.Sleep(700 * time.Millisecond)
	at := time.Now()
	fams, err := stats.Scrape(ctx, m.MetricsURL)
	if err != nil {
		return writeCount{}, err
	}
	w := writeCount{byMethod: map[string]float64{}}
	for _, method := range writeMethods {
		n := sum(fams, "rest_client_requests_total", map[string]string{"method": method})
		w.byMethod[method] = n
		w.total += n
	}
	w.lease = b.leases.count(holder, at) + b.events.count(true, since, at)
	w.events = b.events.count(false, since, at)
	return w, nil
}

// resyncResult is what a restarted manager did.
type resyncResult struct {
	// reconciled is how long after its start every object had been
	// reconciled again.
	reconciled time.Duration
	// window is how long its writes were counted, from its start.
	window     time.Duration
	reconciles map[string]int
	writes     writeCount
}

// resync stops the manager and starts a new one, whose fresh cache lists
// every object and reconciles it, and counts the new one's writes until
// every object was reconciled and its queues are empty, and at least
// window from its start. It returns the new manager.
func (b *bench) resync(ctx context.Context, old *lab.Manager, oldHolder string, window time.Duration) (*lab.Manager, resyncResult, error) {
	res := resyncResult{reconciles: map[string]int{}}
	old.Stop(10 * time.Second)
	start := time.Now()
	m, err := b.lab.StartManager(ctx, "manager-resync", managerArgs...)
	if err != nil {
		return nil, res, err
	}
	holder, err := b.leases.waitHolder(ctx, oldHolder, time.Minute)
	if err != nil {
		return nil, res, err
	}
	want := map[string]int{"pulsarconsumer": len(b.consumers), "redis": len(b.redis)}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		fams, err := stats.Scrape(ctx, m.MetricsURL)
		if err != nil {
			return false, err
		}
		for name, n := range want {
			busy := sum(fams, "workqueue_depth", map[string]string{"name": name}) +
				sum(fams, "controller_runtime_active_workers", map[string]string{"controller": name})
			if sum(fams, "controller_runtime_reconcile_total", map[string]string{"controller": name}) < float64(n) || busy > 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, res, fmt.Errorf("waiting for the restarted manager to reconcile every object: %w", err)
	}
	res.reconciled = time.Since(start)
	select {
	case <-time.After(window - time.Since(start)):
	case <-ctx.Done():
		return nil, res, ctx.Err()
	}
	if res.writes, err = b.countWrites(ctx, m, holder, start); err != nil {
		return nil, res, err
	}
	res.window = time.Since(start)
	fams, err := stats.Scrape(ctx, m.MetricsURL)
	if err != nil {
		return nil, res, err
	}
	for name := range want {
		res.reconciles[name] = int(sum(fams, "controller_runtime_reconcile_total", map[string]string{"controller": name}))
	}
	return m, res, nil
}

// value is a counter's or gauge's value.
func value(m *dto.Metric) float64 {
	if m.Counter != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// sum adds up the series of a counter or gauge whose labels include match.
func sum(fams map[string]*dto.MetricFamily, name string, match map[string]string) float64 {
	total := 0.0
	for _, m := range fams[name].GetMetric() {
		if matches(m, match) {
			total += value(m)
		}
	}
	return total
}

// meanMs is the mean, in ms, of the observations a histogram received
// between two scrapes, over its series whose labels include match.
func meanMs(before, after map[string]*dto.MetricFamily, name string, match map[string]string) float64 {
	sumOf := func(fams map[string]*dto.MetricFamily) (total float64, count uint64) {
		for _, m := range fams[name].GetMetric() {
			if matches(m, match) {
				total += m.GetHistogram().GetSampleSum()
				count += m.GetHistogram().GetSampleCount()
			}
		}
		return total, count
	}
	s0, n0 := sumOf(before)
	s1, n1 := sumOf(after)
	if n1 <= n0 {
		return 0
	}
	return 1000 * (s1 - s0) / float64(n1-n0)
}

// matches says whether a series has every label of match.
func matches(m *dto.Metric, match map[string]string) bool {
	found := 0
	for _, l := range m.GetLabel() {
		if v, ok := match[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			found++
		}
	}
	return found == len(match)
}

// leaseWrites records every write of the manager's leader-election Lease
// as the watch delivers it: each acquisition and renewal changes it.
type leaseWrites struct {
	mu     sync.Mutex
	writes []leaseWrite
}

type leaseWrite struct {
	at     time.Time
	holder string
}

// leaseName is the manager's LeaderElectionID.
const leaseName = "manager.kubext.io"

func (t *leaseWrites) observe(old, obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || l.Name != leaseName {
		return
	}
	if o, ok := old.(*coordinationv1.Lease); ok && o.ResourceVersion == l.ResourceVersion {
		return // a resync of the informer, not a write
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.writes = append(t.writes, leaseWrite{at: time.Now(), holder: ptr.Deref(l.Spec.HolderIdentity, "")})
}

// holder is the identity in the last write, "" for none.
func (t *leaseWrites) holder() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.writes) == 0 {
		return ""
	}
	return t.writes[len(t.writes)-1].holder
}

// waitHolder waits until a manager other than not holds the Lease and
// returns its identity.
func (t *leaseWrites) waitHolder(ctx context.Context, not string, timeout time.Duration) (string, error) {
	var h string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		h = t.holder()
		return h != "" && h != not, nil
	})
	if err != nil {
		return "", fmt.Errorf("no new manager took the leader-election Lease: %w", err)
	}
	return h, nil
}

// waitWrite waits for a write by holder seen after after.
func (t *leaseWrites) waitWrite(ctx context.Context, holder string, after time.Time, timeout time.Duration) (time.Time, error) {
	var at time.Time
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		t.mu.Lock()
		defer t.mu.Unlock()
		for _, w := range t.writes {
			if w.holder == holder && w.at.After(after) {
				at = w.at
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return at, fmt.Errorf("the manager %s did not renew its Lease: %w", holder, err)
	}
	return at, nil
}

// count is the number of writes by holder seen until until.
func (t *leaseWrites) count(holder string, until time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, w := range t.writes {
		if w.holder == holder && !w.at.After(until) {
			n++
		}
	}
	return n
}

// reportingControllers are the manager's event recorders of the
// controllers measured (cmd/manager/controllers.go).
var reportingControllers = []string{"pulsarconsumer-controller", "redis-controller"}

// eventWrites records the Events the manager writes, as the watch delivers
// them: a new Event is a create, a repeated one a patch of its series.
type eventWrites struct {
	mu     sync.Mutex
	writes []eventWrite
}

type eventWrite struct {
	at time.Time
	// leader: the leader election's "became leader" Event on its Lease,
	// not one of the controllers'.
	leader bool
}

func (t *eventWrites) observe(old, obj any) {
	e, ok := obj.(*eventsv1.Event)
	if !ok {
		return
	}
	leader := e.Regarding.Kind == "Lease" && e.Regarding.Name == leaseName
	if !leader && !slices.Contains(reportingControllers, e.ReportingController) {
		return
	}
	if o, ok := old.(*eventsv1.Event); ok && o.ResourceVersion == e.ResourceVersion {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.writes = append(t.writes, eventWrite{at: time.Now(), leader: leader})
}

// count is the number of Event writes, of the leader election or of the
// controllers, seen from since to until.
func (t *eventWrites) count(leader bool, since, until time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, w := range t.writes {
		if w.leader == leader && !w.at.Before(since) && !w.at.After(until) {
			n++
		}
	}
	return n
}

// handlerFuncs calls observe with (nil, obj) on an add and (old, new) on
// an update.
func handlerFuncs(observe func(old, obj any)) toolscache.ResourceEventHandlerFuncs {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { observe(nil, obj) },
		UpdateFunc: observe,
	}
}
