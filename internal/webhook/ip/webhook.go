// Package ip refuses IPs and IPPools that conflict with other objects,
// with a message that says which and why, at the API. Single-object checks
// are CEL rules in the CRDs; these need other objects, which CEL cannot see.
//
// The webhooks are installed with failurePolicy Ignore, so that a fresh
// install never blocks creating or editing IPs and pools before the manager
// serves them; with its self-provisioned certificate (internal/webhookcert)
// the manager switches them to Fail once its server answers with a
// certificate the API server verifies, since only a webhook can make these
// checks at the API. The IP and IPPool controllers still report the same
// problems as conditions (AddressOutsidePool, PoolNotFound, PoolOverlap),
// so they remain the backstop for whatever gets past the webhook, e.g. two
// overlapping pools created at the same instant, or anything written while
// the webhooks were still Ignore.
package ip

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

// SetupWithManager serves both validating webhooks from the manager's
// webhook server. The pool webhook lists the pools from the API server:
// two pools created one right after the other (a GitOps sync) must see
// each other, and the cache may not have the first yet; pools are few and
// created rarely. The IP webhook reads them through the cache (IPs are
// many), and reads them again from the API server before it refuses an IP:
// its pool may have been created the moment before.
func SetupWithManager(mgr ctrl.Manager) error {
	if err := ctrl.NewWebhookManagedBy(mgr, &ipv1.IPPool{}).
		WithValidator(&poolsValidator[*ipv1.IPPool]{
			reader: mgr.GetAPIReader(),
			check:  checkPoolOverlap,
			// Other updates pass, so that an overlap that got in anyway (see
			// the package comment) never blocks e.g. removing a finalizer.
			changed: func(old, pool *ipv1.IPPool) bool { return !slices.Equal(old.Spec.Addresses, pool.Spec.Addresses) },
		}).
		Complete(); err != nil {
		return err
	}
	return ctrl.NewWebhookManagedBy(mgr, &ipv1.IP{}).
		WithValidator(&poolsValidator[*ipv1.IP]{
			reader:  mgr.GetClient(),
			confirm: mgr.GetAPIReader(),
			check:   checkIPAddress,
			// Other updates pass: an IP whose pool shrank since it was
			// created must stay editable and deletable (its finalizer removed).
			changed: func(old, ip *ipv1.IP) bool {
				return old.Spec.Address != ip.Spec.Address || old.Spec.Pool != ip.Spec.Pool
			},
		}).
		Complete()
}

// The webhooks read the pools, whichever controllers the manager runs.
// +kubebuilder:rbac:groups=ip.kubext.io,resources=ippools,verbs=get;list;watch

// +kubebuilder:webhook:path=/validate-ip-kubext-io-v1alpha1-ippool,mutating=false,failurePolicy=ignore,sideEffects=None,groups=ip.kubext.io,resources=ippools,verbs=create;update,versions=v1alpha1,name=vippool.ip.kubext.io,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-ip-kubext-io-v1alpha1-ip,mutating=false,failurePolicy=ignore,sideEffects=None,groups=ip.kubext.io,resources=ips,verbs=create;update,versions=v1alpha1,name=vip.ip.kubext.io,admissionReviewVersions=v1

// poolsValidator checks an object against every IPPool on create, and on
// update when changed says the fields the check reads have changed.
// Deletes always pass: the pool finalizer guards pools in use.
type poolsValidator[T runtime.Object] struct {
	reader client.Reader
	// confirm, if set, is read again before a refusal (reader is a cache).
	confirm client.Reader
	check   func(T, []ipv1.IPPool) error
	changed func(old, obj T) bool
}

// ValidateCreate checks obj against the pools.
func (v *poolsValidator[T]) ValidateCreate(ctx context.Context, obj T) (admission.Warnings, error) {
	return nil, v.validate(ctx, obj)
}

// ValidateUpdate checks obj again when the fields the check reads changed.
func (v *poolsValidator[T]) ValidateUpdate(ctx context.Context, old, obj T) (admission.Warnings, error) {
	if !v.changed(old, obj) {
		return nil, nil
	}
	return nil, v.validate(ctx, obj)
}

// ValidateDelete allows every delete.
func (v *poolsValidator[T]) ValidateDelete(context.Context, T) (admission.Warnings, error) {
	return nil, nil
}

func (v *poolsValidator[T]) validate(ctx context.Context, obj T) error {
	pools := &ipv1.IPPoolList{}
	if err := v.reader.List(ctx, pools); err != nil {
		return err
	}
	err := v.check(obj, pools.Items)
	if err == nil || v.confirm == nil {
		return err
	}
	// Refused from the cache: the pool that allows obj may have been
	// created a moment ago (a GitOps sync applies a pool and its IPs back
	// to back), so ask the API server before saying no.
	if err := v.confirm.List(ctx, pools); err != nil {
		return err
	}
	return v.check(obj, pools.Items)
}
