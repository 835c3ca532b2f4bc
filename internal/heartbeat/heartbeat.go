// Package heartbeat keeps a node agent's Lease renewed and tells the agent
// when it can no longer be sure it holds it, so the agent can fence itself:
// undo what it programmed before anyone could give its work to another node.
//
// The safety argument: the agent renews every RenewInterval and counts its
// hold from the moment it *sent* its last successful renewal, which is no
// later than the moment the controller observed it. The controller declares
// the agent lost only after observing no renewal for the lease's full
// duration; the agent fences after FenceAfter, which is shorter than that
// duration, so it has stopped answering before its work is moved.
//
// For that to hold, nothing may hold up the lapse check: it runs on a
// goroutine of its own, so a renewal that waits for a slow API server
// delays no fencing, and the callbacks run on goroutines of their own
// (see notifier), never on the loop that renews or on the check.
//
// At scale the renewals are most of what the agents ask of the API server,
// so an overloaded server must not be asked more: a failed idle renewal is
// retried after a growing, jittered wait rather than at every tick, a
// failure that cannot have changed the Lease keeps the copy the next
// update is made from (no extra GET) while one that may have landed is
// read again (not updated from a copy it made stale, which can only
// conflict), an idle renewal may wait longer for its answer than one that
// keeps a hold (a write abandoned after its 1.5 s lands all the same and
// costs a conflict and a read: at 1,000 nodes such writes, not the
// renewals themselves, were most of the Lease traffic), and idle renewals
// are spread by a jitter so that agents that fell into step (all renewed
// at once after a stall) drift apart. None of this touches a renewal that
// keeps a hold on the Lease: those go out at every tick, bounded by the
// hold. Once the hold has lapsed there is nothing left to keep, only to
// regain, so a failed renewal, news or not, is retried after the backoff
// too (at most two intervals apart when the agent is not idle, so that a
// node holding addresses on its Lease regains them soon after the API
// server answers again): at 1,000 nodes, agents whose witnesses had
// declared each other silent retried their news at every tick, and their
// reads, refused or timed out by the hundred per second, kept the API
// server from recovering. Skipping a renewal is, to the fencing argument,
// a renewal that failed: it only delays the agent's return. A woken
// renewal (new news, or the agent has just turned needed) still goes at
// once.
//
// A renewal whose outcome is unknown (its answer timed out, or an update
// conflicted with a write of its own that landed late) is followed by one
// that needs no read: a JSON patch of the renewal's fields, tested on the
// process's incarnation (an annotation every write of this process
// carries) instead of on a resourceVersion. At 1,000 nodes the reads that
// followed lost answers were refused by the overloaded API server, retried,
// and starved the renewals themselves (docs/benchmarks.md). Why it is
// safe:
//   - The test makes the patch fail once another process of the agent (a
//     restart) has written the Lease: a stale process never overwrites a
//     newer one's Lease.
//   - Within one process, a patch that lands late may set renewTime back
//     to an older renewal. The controller counts a renewal from when it
//     sees the Lease change, never from renewTime, so a late landing only
//     makes it wait longer; the agent counts its hold from the start of
//     its last renewal known to have landed, so it fences no later.
//   - A patch carries no annotation: it goes only while the annotations
//     to write are the ones the last landed write carried. News (a
//     witness's declaration, which a restarted agent reads back before it
//     vouches) goes by a read and an update, so no late write can take a
//     declaration back.
package heartbeat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// LabelComponent marks heartbeat Leases with the agent that renews them, so
// that a controller can watch only its agents' Leases.
const LabelComponent = "heartbeat.kubext.io/component"

// AnnotationIncarnation holds a token drawn by each Heartbeat (each run of
// the agent) and written with its every create and update: a renewal that
// patches without a read is tested on it, so that it cannot land on a
// Lease that another run of the agent has written since.
const AnnotationIncarnation = "heartbeat.kubext.io/incarnation"

// LeaseName is the name of the Lease the agent of component renews for node.
func LeaseName(component, node string) string { return component + "-" + node }

// Config configures a Heartbeat.
type Config struct {
	// Client reaches the API server directly (not through a cache); give
	// it SendOnce(...), so that a refused request is not tried again
	// behind the Heartbeat's own pace and backoff.
	Client LeasesGetter
	// Namespace and Component name the Lease: <component>-<node>.
	Namespace, Component, Node string
	// Duration is the lease duration written to the Lease (whole seconds,
	// at least 1 s): how long the controller waits without observing a
	// renewal before it moves the agent's work elsewhere.
	Duration time.Duration
	// RenewInterval is how often the agent renews (default 1 s).
	RenewInterval time.Duration
	// FenceAfter is how long after the start of the last successful renewal
	// the agent gives up its hold (default Duration - RenewInterval). It
	// must be shorter than Duration.
	FenceAfter time.Duration
	// OnLost is called once when the hold lapses; OnRegained once when a
	// renewal succeeds again after that; OnRenewed after successful
	// renewals. OnLost and OnRegained are called in order, one at a time;
	// OnRenewed runs one at a time on its own, and renewals that succeed
	// while it runs lead to one more call once it returns (the latest
	// renewal wins). None of them holds up renewing or fencing.
	OnLost, OnRegained, OnRenewed func()
	// Needed, if set, says whether the agent has any use for its Lease
	// now. While it is false the heartbeat writes nothing (a node with no
	// work costs the API server nothing): the hold lapses as it would
	// after failed renewals, with OnLost, and the controller stops
	// counting on the node. Renewals resume at the next tick once it is
	// true again, or at once on Wake. It is called on the loop that
	// renews and fences, so it must not block.
	Needed func() bool
	// Idle, if set, says the agent holds nothing on its Lease now (the
	// ip-agent: every hold on its witnesses' word). Renewals then write
	// IdleDuration and come only every IdleRenewInterval: the Lease is
	// only liveness information, and costs a fraction of the writes. The
	// hold still lapses FenceAfter after each renewal (OnLost, then
	// OnRegained at the next), so nothing may be taken on the Lease
	// without a renewal at the full rate: as soon as Idle turns false the
	// next tick renews. It is called on the renewing loop and must not
	// block.
	Idle                            func() bool
	IdleDuration, IdleRenewInterval time.Duration
	// Annotations, if set, are written on the Lease with every renewal
	// (the ip-agent's witness generation and declarations); Wake writes
	// them at once. It must not block.
	Annotations func() map[string]string
	Log         logr.Logger
	// now is time.Now, replaceable in tests.
	now func() time.Time
}

// Heartbeat renews one Lease. It runs until its context ends.
type Heartbeat struct {
	cfg    Config
	notify *notifier
	wake   chan struct{}

	mu        sync.Mutex
	lastStart time.Time // start of the last successful renewal
	held      bool
	lastIdle  bool // the last renewal was an idle one
	lease     *coordinationv1.Lease
	// idleDue is how long after the last renewal's start the next idle
	// one is due: IdleRenewInterval less up to an eighth, drawn again at
	// every renewal.
	idleDue time.Duration
	// backoff spaces the idle renewals that follow a failed one; retryAt
	// is when the next may go. Both are reset by a success.
	backoff wait.Backoff
	retryAt time.Time
	// news says a woken renewal failed: its news (a declaration) goes out
	// at every tick until a renewal lands, whatever the idle pace says,
	// and, once the hold has lapsed, as the backoff allows.
	news bool

	// The following are used by the renewing loop only.
	// incarnation is this Heartbeat's AnnotationIncarnation.
	incarnation string
	// unsure says the outcome of the last write is unknown (or an update
	// conflicted): lease may be stale, and the next renewal is a patch
	// tested on the incarnation, unless it has annotations to change.
	unsure bool
	// landed are the annotations the last write known to have landed
	// carried.
	landed map[string]string
	// failures counts the renewals that failed since the last one that
	// landed: the first is logged where the user sees it, the rest only
	// at V(1), and the next success says how many there were.
	failures int
	// renewedOnce says a renewal of this run has landed (the first is
	// logged: a restarted agent says when the controller can see it).
	renewedOnce bool
}

// New checks the configuration and fills in defaults.
func New(cfg Config) (*Heartbeat, error) {
	if cfg.Client == nil || cfg.Namespace == "" || cfg.Component == "" || cfg.Node == "" {
		return nil, fmt.Errorf("heartbeat: client, namespace, component and node are required")
	}
	if cfg.Duration < time.Second {
		return nil, fmt.Errorf("heartbeat: lease duration %s is shorter than 1s", cfg.Duration)
	}
	if cfg.Duration%time.Second != 0 {
		return nil, fmt.Errorf("heartbeat: lease duration %s is not a whole number of seconds", cfg.Duration)
	}
	if cfg.RenewInterval == 0 {
		cfg.RenewInterval = time.Second
	}
	if cfg.RenewInterval < time.Millisecond {
		return nil, fmt.Errorf("heartbeat: renew interval %s is shorter than 1ms", cfg.RenewInterval)
	}
	if cfg.FenceAfter == 0 {
		cfg.FenceAfter = cfg.Duration - cfg.RenewInterval
	}
	if cfg.FenceAfter >= cfg.Duration || cfg.RenewInterval >= cfg.FenceAfter {
		return nil, fmt.Errorf("heartbeat: need renew interval (%s) < fence after (%s) < lease duration (%s)",
			cfg.RenewInterval, cfg.FenceAfter, cfg.Duration)
	}
	if cfg.Idle != nil && (cfg.IdleDuration%time.Second != 0 || cfg.IdleDuration < cfg.Duration ||
		cfg.IdleRenewInterval < cfg.RenewInterval || cfg.IdleRenewInterval >= cfg.IdleDuration) {
		return nil, fmt.Errorf("heartbeat: need renew interval (%s) <= idle renew interval (%s) < idle lease duration (%s, whole seconds, at least the lease duration %s)",
			cfg.RenewInterval, cfg.IdleRenewInterval, cfg.IdleDuration, cfg.Duration)
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.OnLost == nil {
		cfg.OnLost = func() {}
	}
	if cfg.OnRegained == nil {
		cfg.OnRegained = func() {}
	}
	if cfg.OnRenewed == nil {
		cfg.OnRenewed = func() {}
	}
	h := &Heartbeat{cfg: cfg, notify: newNotifier(), wake: make(chan struct{}, 1),
		incarnation: strconv.FormatUint(rand.Uint64(), 36)}
	h.succeeded()
	return h, nil
}

// idleRetryCap bounds the wait between two attempts of an idle renewal,
// as a fraction of IdleRenewInterval: a quarter leaves several attempts
// before the idle Lease runs out (it lasts at least twice as long).
const idleRetryCap = 4

// succeeded resets what failures built up and draws the next idle
// renewal's due time. Called with mu held, or before Start.
func (h *Heartbeat) succeeded() {
	h.idleDue = time.Duration(float64(h.cfg.IdleRenewInterval) * (1 - rand.Float64()/8))
	h.backoff = wait.Backoff{Duration: h.cfg.RenewInterval, Factor: 2, Jitter: 0.5, Steps: math.MaxInt32,
		Cap: max(h.cfg.IdleRenewInterval/idleRetryCap, h.cfg.RenewInterval)}
	h.retryAt, h.news = time.Time{}, false
}

// failed notes a renewal that did not land. The next attempt waits for
// the backoff's next step, or for the wait the API server asked for
// (Retry-After) if that is longer, when it keeps no hold (renewNow): an
// idle renewal, or any once the hold has lapsed. A renewal that is not
// idle waits at most maxLapsedWait for the backoff.
func (h *Heartbeat) failed(start time.Time, idle, woken bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.news = h.news || woken
	wait := h.backoff.Step()
	if !idle {
		wait = min(wait, maxLapsedWait*h.cfg.RenewInterval)
	}
	if s, ok := apierrors.SuggestsClientDelay(err); ok {
		wait = max(wait, time.Duration(s)*time.Second)
	}
	h.retryAt = start.Add(wait)
}

// maxLapsedWait bounds the backoff of a renewal that is not idle, in
// renew intervals: what it adds to a Lease-held node's outage once the API
// server answers again.
const maxLapsedWait = 2

// Held reports whether the agent may act: its last successful renewal
// started less than FenceAfter ago.
func (h *Heartbeat) Held() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held && h.cfg.now().Sub(h.lastStart) < h.cfg.FenceAfter
}

// LastRenewal is when the last successful renewal started, while the hold
// lasts; zero otherwise. The controller cannot have seen that renewal
// before this time, so it cannot take the node for lost before this time
// plus the lease duration.
func (h *Heartbeat) LastRenewal() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.held {
		return time.Time{}
	}
	return h.lastStart
}

// NeedLeaderElection is false: every agent renews its own Lease.
func (h *Heartbeat) NeedLeaderElection() bool { return false }

// Start renews the Lease every RenewInterval until ctx ends, and checks the
// hold more often than that so that fencing is never late by more than a
// fraction of the interval.
func (h *Heartbeat) Start(ctx context.Context) error {
	stop := h.notify.start(ctx, h.cfg.OnRenewed)
	defer stop()
	// The hold is checked on a goroutine of its own, so that fencing is on
	// time whatever a renewal's write waits for.
	checking := make(chan struct{})
	go func() {
		defer close(checking)
		check := time.NewTicker(h.cfg.RenewInterval / 4)
		defer check.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-check.C:
				h.checkLapse()
			}
		}
	}()
	defer func() { <-checking }()
	renew := time.NewTicker(h.cfg.RenewInterval)
	defer renew.Stop()
	h.renew(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-renew.C:
			h.renew(ctx)
		case <-h.wake:
			h.renewNow(ctx, true)
		}
	}
}

// checkLapse ends the hold FenceAfter after the start of the last
// successful renewal. It runs on the checking goroutine and on the
// renewing loop; OnLost and OnRegained are queued under mu, so that they
// are called in the order the hold changed.
func (h *Heartbeat) checkLapse() {
	h.mu.Lock()
	lapsed := h.held && h.cfg.now().Sub(h.lastStart) >= h.cfg.FenceAfter
	if lapsed {
		h.held = false
		h.notify.change(h.cfg.OnLost)
	}
	quiet := h.lastIdle
	h.mu.Unlock()
	if lapsed {
		// Between idle renewals the hold lapses by design: quietly.
		h.cfg.Log.V(verbosity(quiet)).Info("Lost the heartbeat lease: fencing", "lease", LeaseName(h.cfg.Component, h.cfg.Node))
	}
}

// Wake asks for a renewal now rather than at the next tick, idle or not:
// Needed has just turned true, or the Annotations have news (a witness's
// declaration, which the controller waits for to fail over).
func (h *Heartbeat) Wake() { signal(h.wake) }

// renew writes one renewal at a tick, bounded by the time left before
// fencing.
func (h *Heartbeat) renew(ctx context.Context) { h.renewNow(ctx, false) }

// renewNow writes one renewal; woken, even if an idle one was recent.
func (h *Heartbeat) renewNow(ctx context.Context, woken bool) {
	if h.cfg.Needed != nil && !h.cfg.Needed() {
		// Nothing to hold: write nothing, and let the hold lapse.
		h.checkLapse()
		return
	}
	idle := h.cfg.Idle != nil && h.cfg.Idle()
	start := h.cfg.now()
	if !woken {
		h.mu.Lock()
		held := h.held && start.Sub(h.lastStart) < h.cfg.FenceAfter
		// An idle renewal waits for its due time, unless news failed
		// to go out; after a failure, a renewal that keeps no hold
		// waits for the backoff, news or not (one that keeps a hold
		// goes at every tick).
		recent := idle && !h.news && h.lastIdle && start.Sub(h.lastStart) < h.idleDue
		backingOff := start.Before(h.retryAt) && (!held || idle && !h.news)
		h.mu.Unlock()
		if recent || backingOff {
			h.checkLapse()
			return
		}
	}
	// A renewal that keeps a hold on the Lease may take only the time left
	// before the hold lapses: a success after that could not extend it.
	// An idle one keeps no hold on the Lease (the lapse is checked on its
	// own goroutine either way), so it may wait for a slow API server up
	// to a quarter of its interval: one abandoned sooner has usually
	// landed all the same, and costs a conflict and a read to find out.
	left := h.cfg.FenceAfter
	h.mu.Lock()
	if h.held {
		left -= start.Sub(h.lastStart)
	}
	h.mu.Unlock()
	if left <= 0 {
		// The hold lapsed before this renewal started (the check has not
		// run yet): whatever the write does, the agent must fence first
		// (not every client checks an expired context before it sends),
		// and OnLost is queued before the OnRegained of the write below.
		// The write is still made, as for any renewal after a lapse: a
		// woken one carries news (a witness's declaration, which the
		// controller waits for to fail over) that must not wait for the
		// next tick, eight seconds away when idle.
		h.checkLapse()
		left = h.cfg.FenceAfter
	}
	if idle {
		left = max(left, h.cfg.IdleRenewInterval/idleRetryCap)
	}
	ctx, cancel := context.WithTimeout(ctx, left)
	defer cancel()
	if err := h.write(ctx, start, idle); err != nil {
		// An agent whose renewals fail is passed over by the controller:
		// say so when it starts, not only at a verbosity nobody runs with.
		level := 1
		if h.failures == 0 {
			level = 0
		}
		h.failures++
		h.cfg.Log.V(level).Info("Lease renewal failed", "lease", LeaseName(h.cfg.Component, h.cfg.Node),
			"error", err.Error(), "failedInARow", h.failures)
		h.failed(start, idle, woken, err)
		h.checkLapse()
		return
	}
	if !h.renewedOnce {
		h.renewedOnce = true
		h.cfg.Log.Info("First Lease renewal of this run landed", "lease", LeaseName(h.cfg.Component, h.cfg.Node), "idle", idle)
	}
	if h.failures > 0 {
		h.cfg.Log.Info("Lease renewal landed again", "lease", LeaseName(h.cfg.Component, h.cfg.Node), "failedBefore", h.failures)
		h.failures = 0
	}
	h.mu.Lock()
	// A write that took longer than FenceAfter (an idle one may) is a
	// renewal, but too late to hold anything by.
	fresh := h.cfg.now().Sub(start) < h.cfg.FenceAfter
	regained := !h.held && fresh
	h.lastStart, h.held, h.lastIdle = start, h.held || fresh, idle
	h.succeeded()
	if regained {
		h.notify.change(h.cfg.OnRegained)
	}
	h.mu.Unlock()
	if regained {
		h.cfg.Log.V(verbosity(idle)).Info("Holding the heartbeat lease", "lease", LeaseName(h.cfg.Component, h.cfg.Node))
	}
	h.notify.renewed()
}

// verbosity is the level of the hold's comings and goings: routine
// between idle renewals.
func verbosity(idle bool) int {
	if idle {
		return 1
	}
	return 0
}

func (h *Heartbeat) write(ctx context.Context, start time.Time, idle bool) error {
	leases := h.cfg.Client.Leases(h.cfg.Namespace)
	name := LeaseName(h.cfg.Component, h.cfg.Node)
	annotations := h.annotations()
	if h.unsure && maps.Equal(annotations, h.landed) {
		l, err := leases.Patch(ctx, name, types.JSONPatchType, h.renewalPatch(start, idle), metav1.PatchOptions{})
		if err != nil {
			// Still unknown, or refused before it was tried: patch again.
			// Anything else (the test failed: another run of the agent
			// wrote the Lease; it is gone; patch is not allowed): read it.
			if !timedOut(err) && !apierrors.IsTooManyRequests(err) && !apierrors.IsServiceUnavailable(err) {
				h.unsure, h.lease = false, nil
			}
			return err
		}
		h.unsure, h.lease = false, l
		return nil
	}
	if h.lease == nil || h.unsure {
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			l, err = leases.Create(ctx, h.desired(&coordinationv1.Lease{}, start, idle, annotations), metav1.CreateOptions{})
			if err != nil {
				return err
			}
			h.lease, h.unsure, h.landed = l, false, annotations
			return nil
		case err != nil:
			return err
		}
		h.lease, h.unsure = l, false
	}
	l, err := leases.Update(ctx, h.desired(h.lease.DeepCopy(), start, idle, annotations), metav1.UpdateOptions{})
	if err != nil {
		switch {
		case apierrors.IsNotFound(err):
			h.lease = nil
		case apierrors.IsConflict(err) || timedOut(err):
			// A write that timed out has usually landed (the API server
			// goes on with it), and an update from the old copy would
			// only conflict; a conflict says the Lease changed, most
			// likely by such a write of ours. Throttled (429) or refused,
			// the copy is still the one to update from.
			h.unsure = true
		}
		return err
	}
	h.lease, h.landed = l, annotations
	return nil
}

// annotations are the annotations every write of this run carries.
func (h *Heartbeat) annotations() map[string]string {
	a := map[string]string{}
	if h.cfg.Annotations != nil {
		maps.Copy(a, h.cfg.Annotations())
	}
	a[AnnotationIncarnation] = h.incarnation
	return a
}

// jsonPatchOp is one operation of a JSON patch (RFC 6902).
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// renewalPatch is a renewal as a JSON patch that holds only if the Lease
// is still this run's (see the package documentation for why no other
// precondition is needed): the spec fields of desired, no annotation.
func (h *Heartbeat) renewalPatch(start time.Time, idle bool) []byte {
	want := h.desired(&coordinationv1.Lease{}, start, idle, nil).Spec
	ops := []jsonPatchOp{
		{Op: "test", Path: "/metadata/annotations/" + escapePointer(AnnotationIncarnation), Value: h.incarnation},
		{Op: "add", Path: "/spec/holderIdentity", Value: want.HolderIdentity},
		{Op: "add", Path: "/spec/leaseDurationSeconds", Value: want.LeaseDurationSeconds},
		{Op: "add", Path: "/spec/renewTime", Value: want.RenewTime},
	}
	h.mu.Lock()
	held := h.held
	h.mu.Unlock()
	if !held {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/spec/acquireTime", Value: want.AcquireTime})
	}
	b, err := json.Marshal(ops)
	if err != nil {
		panic(fmt.Sprintf("heartbeat: encoding a renewal patch: %v", err)) // strings, numbers and times only
	}
	return b
}

// escapePointer escapes a JSON pointer's reference token (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// timedOut tells a write whose outcome is unknown: the client gave up
// waiting, or the API server answered that it did.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)
}

func (h *Heartbeat) desired(l *coordinationv1.Lease, start time.Time, idle bool, annotations map[string]string) *coordinationv1.Lease {
	l.Name, l.Namespace = LeaseName(h.cfg.Component, h.cfg.Node), h.cfg.Namespace
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[LabelComponent] = h.cfg.Component
	if len(annotations) > 0 {
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		maps.Copy(l.Annotations, annotations)
	}
	l.Spec.HolderIdentity = ptr.To(h.cfg.Node)
	d := h.cfg.Duration
	if idle {
		d = h.cfg.IdleDuration
	}
	l.Spec.LeaseDurationSeconds = ptr.To(int32(d / time.Second))
	l.Spec.RenewTime = &metav1.MicroTime{Time: start}
	h.mu.Lock()
	held := h.held
	h.mu.Unlock()
	if l.Spec.AcquireTime == nil || !held {
		l.Spec.AcquireTime = &metav1.MicroTime{Time: start}
	}
	return l
}

// notifier calls the callbacks off the heartbeat's loop: OnLost and
// OnRegained in the order they happened on one goroutine, OnRenewed on
// another, coalesced so that at most one runs and one more is pending.
// A callback that hangs delays only the callbacks queued behind it.
type notifier struct {
	mu      sync.Mutex
	changes []func() // OnLost and OnRegained, in order
	wake    chan struct{}
	renew   chan struct{}
}

func newNotifier() *notifier {
	return &notifier{wake: make(chan struct{}, 1), renew: make(chan struct{}, 1)}
}

// start runs the two goroutines until ctx ends or stop is called. stop
// does not wait for a callback under way (one that hangs must not hold up
// the agent's shutdown); callbacks still queued are dropped.
func (n *notifier) start(ctx context.Context, onRenewed func()) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	go n.runChanges(ctx)
	go n.runRenewed(ctx, onRenewed)
	return cancel
}

// change queues OnLost or OnRegained.
func (n *notifier) change(fn func()) {
	n.mu.Lock()
	n.changes = append(n.changes, fn)
	n.mu.Unlock()
	signal(n.wake)
}

// renewed asks for one more OnRenewed.
func (n *notifier) renewed() { signal(n.renew) }

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default: // one is pending already
	}
}

func (n *notifier) runChanges(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.wake:
		}
		for {
			n.mu.Lock()
			if len(n.changes) == 0 {
				n.mu.Unlock()
				break
			}
			fn := n.changes[0]
			n.changes = n.changes[1:]
			n.mu.Unlock()
			fn()
		}
	}
}

func (n *notifier) runRenewed(ctx context.Context, onRenewed func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.renew:
			onRenewed()
		}
	}
}
