package ip

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/ipam"
	"github.com/kubext/kubext/internal/ipcond"
	"github.com/kubext/kubext/internal/statuspatch"
)

// maxAllocationAttempts bounds the retries when other clients take the
// addresses this controller picks from a pool.
const maxAllocationAttempts = 32

// pickingHold is how long an address this controller just reserved is
// still skipped by its other workers: long enough for the cache to show
// the reservation.
const pickingHold = 5 * time.Second

// picking are the addresses this controller's workers are reserving, or
// reserved so recently that the cache may not show it yet. Only a hint
// against collisions between its own workers: the API server decides who
// gets an address (reserve), whatever this says.
type picking struct {
	mu    sync.Mutex
	until map[netip.Addr]time.Time // zero: being reserved now
	now   func() time.Time
}

// busy reports whether a worker is reserving addr or just reserved it.
func (p *picking) busy(addr netip.Addr) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	until, ok := p.until[addr]
	return ok && (until.IsZero() || p.now().Before(until))
}

// take marks addr as being reserved, unless another worker has it.
func (p *picking) take(addr netip.Addr) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.until == nil {
		p.until = map[netip.Addr]time.Time{}
	}
	now := p.now()
	if until, ok := p.until[addr]; ok && (until.IsZero() || now.Before(until)) {
		return false
	}
	for a, until := range p.until {
		if !until.IsZero() && !now.Before(until) {
			delete(p.until, a)
		}
	}
	p.until[addr] = time.Time{}
	return true
}

// release keeps addr skipped until until.
func (p *picking) release(addr netip.Addr, until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.until[addr] = until
}

// allocationError is an allocation that cannot succeed until something
// changes (a pool appears, an address is freed); it becomes the Allocated
// condition rather than a retry.
func allocationError(reason, format string, args ...any) *statuspatch.Error {
	return &statuspatch.Error{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// reconcileAddress makes sure an address is reserved for the IP. It returns
// false when placement has to wait: no address yet, or a reassign is still
// detaching the old one.
func (r *Reconciler) reconcileAddress(ctx context.Context, ip *ipv1.IP) (bool, error) {
	if ip.Status.Address != "" && ip.Spec.Address != "" && ip.Spec.Address != ip.Status.Address {
		if done, err := r.releaseForReassign(ctx, ip); err != nil || !done {
			return false, err
		}
	}
	addr, pool, err := r.allocate(ctx, ip)
	if aerr := statuspatch.As(err); aerr != nil && keepsAddress(ip, aerr) {
		return r.keepAddress(ctx, ip, aerr)
	}
	if aerr := statuspatch.As(err); aerr != nil {
		if c := meta.FindStatusCondition(ip.Status.Conditions, ipv1.ConditionAllocated); c == nil || c.Reason != aerr.Reason {
			r.Recorder.Eventf(ip, nil, corev1.EventTypeWarning, aerr.Reason, "Allocate", "%s", aerr.Message)
		}
		ipcond.Set(ip, metav1.Condition{Type: ipv1.ConditionAllocated, Status: metav1.ConditionFalse,
			Reason: aerr.Reason, Message: aerr.Message})
		ipcond.Set(ip, metav1.Condition{Type: ipv1.ConditionAttached, Status: metav1.ConditionFalse,
			Reason: ipv1.ReasonWaitingForAgent, Message: "no address is allocated"})
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("allocating an address for IP %s: %w", ip.Name, err)
	}
	if ip.Status.Address != addr.String() {
		// The Event comes at the end of the reconcile (toldReservation):
		// usually the Attached Event tells it.
		allocations.WithLabelValues(pool).Inc()
	}
	ip.Status.Address, ip.Status.Pool, ip.Status.Assigned = addr.String(), pool, true
	if ip.Status.Original == nil || ip.Status.Original.Address != addr.String() {
		ip.Status.Original = &ipv1.IPSpec{Address: addr.String(), Pool: ip.Spec.Pool, Reassign: ip.Spec.Reassign}
	}
	ipcond.Set(ip, metav1.Condition{Type: ipv1.ConditionAllocated, Status: metav1.ConditionTrue,
		Reason: ipv1.ReasonAddressAllocated, Message: fmt.Sprintf("%s is reserved from pool %s%s", addr, pool, r.deletingNote(ctx, addr))})
	return true, nil
}

// keepsAddress reports whether an allocation failure leaves the IP's
// assigned address in place: its pool was deleted, or shrunk so that it no
// longer contains the address. An address on a partner's allow-list is
// never taken away by a change to the pool, and its failover does not
// freeze either.
func keepsAddress(ip *ipv1.IP, aerr *statuspatch.Error) bool {
	if aerr.Reason != ipv1.ReasonPoolNotFound && aerr.Reason != ipv1.ReasonAddressOutsidePool {
		return false
	}
	if !ip.Status.Assigned || ip.Status.Address == "" {
		return false
	}
	if ip.Spec.Address == "" {
		return true
	}
	want, err := ipam.Canonical(ip.Spec.Address)
	return err == nil && want.String() == ip.Status.Address
}

// keepAddress keeps the assigned address reserved although its pool no
// longer hands it out, and says so.
func (r *Reconciler) keepAddress(ctx context.Context, ip *ipv1.IP, why *statuspatch.Error) (bool, error) {
	addr, err := ipam.Canonical(ip.Status.Address)
	if err != nil {
		return false, fmt.Errorf("status.address of IP %s: %w", ip.Name, err)
	}
	if err := r.reserve(ctx, ip, addr, ip.Status.Pool); err != nil {
		return false, fmt.Errorf("keeping %s reserved for IP %s: %w", addr, ip.Name, err)
	}
	ipcond.Set(ip, metav1.Condition{Type: ipv1.ConditionAllocated, Status: metav1.ConditionTrue,
		Reason: ipv1.ReasonAddressAllocated, Message: fmt.Sprintf(
			"%s stays reserved for this IP although %s: an assigned address is never taken away by a pool change", addr, why.Message)})
	return true, nil
}

// deletingNote tells, for the Allocated message, that someone asked to
// delete the reservation: it stays until this IP lets the address go.
func (r *Reconciler) deletingNote(ctx context.Context, addr netip.Addr) string {
	a := &networkingv1.IPAddress{}
	if err := r.Get(ctx, types.NamespacedName{Name: ipam.Name(addr)}, a); err != nil || a.DeletionTimestamp.IsZero() {
		return ""
	}
	return " (its IPAddress was deleted; the reservation stays until this IP has let the address go from every node)"
}

// allocate finds the IP's pool and address and reserves the address.
func (r *Reconciler) allocate(ctx context.Context, ip *ipv1.IP) (netip.Addr, string, error) {
	var want netip.Addr
	if ip.Spec.Address != "" {
		a, err := ipam.Canonical(ip.Spec.Address)
		if err != nil {
			return netip.Addr{}, "", allocationError(ipv1.ReasonAddressOutsidePool, "%s", err)
		}
		want = a
	}
	poolName, pool, err := r.poolFor(ctx, ip, want)
	if err != nil {
		return netip.Addr{}, "", err
	}
	if want.IsValid() {
		if err := pool.CanRequest(want); err != nil {
			return netip.Addr{}, "", allocationError(ipv1.ReasonAddressOutsidePool, "pool %s cannot hand out %s: %v", poolName, want, err)
		}
		return want, poolName, r.reserve(ctx, ip, want, poolName)
	}
	if a, err := ipam.Canonical(ip.Status.Address); err == nil {
		if !pool.Contains(a) {
			return netip.Addr{}, "", allocationError(ipv1.ReasonAddressOutsidePool, "pool %s no longer contains %s", poolName, a)
		}
		return a, poolName, r.reserve(ctx, ip, a, poolName)
	}
	// A reservation made before a crash, not yet recorded in status.
	owned := &networkingv1.IPAddressList{}
	if err := r.List(ctx, owned, client.MatchingFields{indexParent: ip.Name}); err != nil {
		return netip.Addr{}, "", fmt.Errorf("listing the reservations of IP %s: %w", ip.Name, err)
	}
	for _, a := range owned.Items {
		if addr, err := ipam.Canonical(a.Name); err == nil && pool.Contains(addr) {
			return addr, poolName, nil
		}
	}
	return r.allocateFromPool(ctx, ip, pool, poolName)
}

// allocateFromPool reserves the lowest free address of the pool. The cache
// may lag; the API server has the last word, so a taken address is skipped
// and the next one tried.
func (r *Reconciler) allocateFromPool(ctx context.Context, ip *ipv1.IP, pool *ipam.Pool, poolName string) (netip.Addr, string, error) {
	reserved := &networkingv1.IPAddressList{}
	// Read only: at thousands of addresses a deep copy per allocation
	// would cost more than the allocation.
	if err := r.List(ctx, reserved, client.UnsafeDisableDeepCopy); err != nil {
		return netip.Addr{}, "", fmt.Errorf("listing IPAddresses to allocate from pool %s for IP %s: %w", poolName, ip.Name, err)
	}
	used := make(map[netip.Addr]bool, len(reserved.Items))
	for _, a := range reserved.Items {
		if addr, err := ipam.Canonical(a.Name); err == nil {
			used[addr] = true
		}
	}
	for range maxAllocationAttempts {
		// Skip what the other workers are reserving right now (the cache
		// shows it only later): they would otherwise all try the same
		// lowest free address, and all but one lose a round trip.
		addr, ok := pool.Next(func(a netip.Addr) bool { return used[a] || r.picking.busy(a) })
		if !ok {
			return netip.Addr{}, "", allocationError(ipv1.ReasonPoolExhausted, "pool %s has no free address left", poolName)
		}
		if !r.picking.take(addr) {
			used[addr] = true // taken by another worker since Next
			continue
		}
		err := r.reserve(ctx, ip, addr, poolName)
		r.picking.release(addr, r.now().Add(pickingHold))
		if aerr := statuspatch.As(err); aerr != nil {
			used[addr] = true
			continue
		}
		return addr, poolName, err
	}
	return netip.Addr{}, "", fmt.Errorf("pool %s: %d addresses were taken by others while allocating; retrying", poolName, maxAllocationAttempts)
}

// poolFor returns the pool the IP uses: spec.pool, or the pool containing
// spec.address.
func (r *Reconciler) poolFor(ctx context.Context, ip *ipv1.IP, want netip.Addr) (string, *ipam.Pool, error) {
	if ip.Spec.Pool != "" {
		p := &ipv1.IPPool{}
		if err := r.Get(ctx, types.NamespacedName{Name: ip.Spec.Pool}, p); err != nil {
			if apierrors.IsNotFound(err) {
				return "", nil, allocationError(ipv1.ReasonPoolNotFound, "IPPool %s does not exist", ip.Spec.Pool)
			}
			return "", nil, fmt.Errorf("reading IPPool %s of IP %s: %w", ip.Spec.Pool, ip.Name, err)
		}
		pool, err := ipam.NewPool(p.Spec.Addresses, p.Spec.Reserved)
		if err != nil {
			return "", nil, allocationError(ipv1.ReasonPoolNotFound, "IPPool %s is invalid: %v", p.Name, err)
		}
		if want.IsValid() && !pool.Contains(want) {
			return "", nil, allocationError(ipv1.ReasonAddressOutsidePool, "%s is not in pool %s (%s)", want, p.Name, pool)
		}
		return p.Name, pool, nil
	}
	pools := &ipv1.IPPoolList{}
	if err := r.List(ctx, pools); err != nil {
		return "", nil, fmt.Errorf("listing pools: %w", err)
	}
	// Overlapping pools (reported PoolOverlap) must not make the IP's pool
	// flip between reconciles: the pool it has keeps it, else the oldest.
	slices.SortFunc(pools.Items, func(a, b ipv1.IPPool) int {
		return cmp.Or(cmp.Compare(boolRank(a.Name != ip.Status.Pool), boolRank(b.Name != ip.Status.Pool)),
			a.CreationTimestamp.Compare(b.CreationTimestamp.Time), strings.Compare(a.Name, b.Name))
	})
	for _, p := range pools.Items {
		pool, err := ipam.NewPool(p.Spec.Addresses, p.Spec.Reserved)
		if err == nil && pool.Contains(want) {
			return p.Name, pool, nil
		}
	}
	return "", nil, allocationError(ipv1.ReasonPoolNotFound, "no IPPool contains %s", want)
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// reserve creates the IPAddress object named by the address. The API server
// refuses a second object of the same name, which is what makes an address
// belong to one IP only, whoever creates it and however fast.
func (r *Reconciler) reserve(ctx context.Context, ip *ipv1.IP, addr netip.Addr, pool string) error {
	name := ipam.Name(addr)
	existing := &networkingv1.IPAddress{}
	err := r.Get(ctx, types.NamespacedName{Name: name}, existing)
	if err == nil {
		if err := r.owned(ip, existing); err != nil {
			return err
		}
		return r.holdReservation(ctx, existing)
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading reservation %s for IP %s: %w", name, ip.Name, err)
	}
	a := &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{
			Name:       name,
			Finalizers: []string{ipv1.ReservationFinalizer},
			Labels: map[string]string{
				ipv1.LabelPool:                 pool,
				networkingv1.LabelManagedBy:    ipv1.ManagedBy,
				"app.kubernetes.io/managed-by": ipv1.ManagedBy,
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: ipv1.GroupVersion.String(), Kind: "IP", Name: ip.Name, UID: ip.UID,
			}},
		},
		Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{
			Group: ipv1.GroupVersion.Group, Resource: "ips", Name: ip.Name,
		}},
	}
	err = r.Create(ctx, a)
	if apierrors.IsAlreadyExists(err) {
		// Someone was faster; see who.
		if err := r.Get(ctx, types.NamespacedName{Name: name}, existing); err != nil {
			return fmt.Errorf("reading reservation %s, created meanwhile, for IP %s: %w", name, ip.Name, err)
		}
		return r.owned(ip, existing)
	}
	if err != nil {
		return fmt.Errorf("reserve %s for IP %s: %w", name, ip.Name, err)
	}
	return nil
}

// holdReservation puts the finalizer on a reservation made without it (by
// an earlier version).
func (r *Reconciler) holdReservation(ctx context.Context, a *networkingv1.IPAddress) error {
	if controllerutil.ContainsFinalizer(a, ipv1.ReservationFinalizer) || !a.DeletionTimestamp.IsZero() {
		return nil
	}
	orig := a.DeepCopy()
	controllerutil.AddFinalizer(a, ipv1.ReservationFinalizer)
	if err := r.Patch(ctx, a, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("adding the finalizer to reservation %s: %w", a.Name, err)
	}
	return nil
}

// owned checks that an existing reservation is this IP's.
func (r *Reconciler) owned(ip *ipv1.IP, a *networkingv1.IPAddress) error {
	if parentIP(a) == ip.Name {
		return nil
	}
	holder := "another object"
	if ref := a.Spec.ParentRef; ref != nil {
		holder = ref.Resource
		if ref.Group != "" {
			holder += "." + ref.Group
		}
		if ref.Namespace != "" {
			holder += " " + ref.Namespace + "/" + ref.Name
		} else {
			holder += " " + ref.Name
		}
	}
	return allocationError(ipv1.ReasonAddressInUse, "%s is already reserved by %s", a.Name, holder)
}

// release deletes the IP's reservations (at most one, but a crash between
// two reassigns could leave more).
func (r *Reconciler) release(ctx context.Context, ip *ipv1.IP, except string) error {
	owned := &networkingv1.IPAddressList{}
	if err := r.List(ctx, owned, client.MatchingFields{indexParent: ip.Name}); err != nil {
		return fmt.Errorf("listing the reservations of IP %s: %w", ip.Name, err)
	}
	for i := range owned.Items {
		a := &owned.Items[i]
		if a.Name == except {
			continue
		}
		// Delete first: the object shows it is going; then let it go.
		uid := a.UID
		if err := r.Delete(ctx, a, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("releasing %s of IP %s: %w", a.Name, ip.Name, err)
		}
		if err := statuspatch.DropFinalizer(ctx, r.Client, a, ipv1.ReservationFinalizer); err != nil {
			return fmt.Errorf("releasing %s of IP %s: %w", a.Name, ip.Name, err)
		}
		r.Recorder.Eventf(ip, nil, corev1.EventTypeNormal, "Released", "Release", "Released %s", a.Name)
	}
	return nil
}

// releaseForReassign detaches and releases the old address when
// spec.address changed under spec.reassign. It returns true once the old
// address is gone and the new one can be reserved.
func (r *Reconciler) releaseForReassign(ctx context.Context, ip *ipv1.IP) (bool, error) {
	if detached, err := r.detach(ctx, ip, fmt.Sprintf("moving to %s", ip.Spec.Address)); err != nil || !detached {
		return false, err
	}
	old := ip.Status.Address
	if err := r.releaseEC2(ctx, ip); err != nil {
		return false, err
	}
	if err := r.release(ctx, ip, ""); err != nil {
		return false, err
	}
	r.Recorder.Eventf(ip, nil, corev1.EventTypeNormal, "Reassigned", "Reassign", "Released %s to move to %s", old, ip.Spec.Address)
	ip.Status.Address, ip.Status.Assigned, ip.Status.Original = "", false, nil
	return true, nil
}

// toldReservation records an Allocated Event for an address reserved in
// this reconcile (the IP had none, or another, at its start) that no
// placement will tell: an IP placed in the reconcile that reserved its
// address gets one Event for both, Attached, which names the address and
// its pool. Events are most of what a converging cluster writes beside
// the IPs themselves (docs/benchmarks.md, "Static IP at scale"), so a
// routine step costs one, not two.
func (r *Reconciler) toldReservation(ip *ipv1.IP, hadAddress string, lastMove *metav1.Time) {
	if ip.Status.Address == "" || ip.Status.Address == hadAddress {
		return
	}
	if m := ip.Status.LastMoveTime; m != nil && (lastMove == nil || !m.Equal(lastMove)) {
		return // placed: the Attached Event names the address and its pool
	}
	r.Recorder.Eventf(ip, nil, corev1.EventTypeNormal, "Allocated", "Allocate", "Reserved %s from pool %s", ip.Status.Address, ip.Status.Pool)
}
