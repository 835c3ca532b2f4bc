package redis

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
	"github.com/kubext/kubext/internal/ownedapply"
)

// The manager may get Secrets (the one a Redis names, by name; never listed
// or watched) and create them (the password it generates for a Redis that
// names none). RBAC cannot say which Secrets it creates: the admission
// policy config/policy/manager-secrets.yaml does, refusing any Secret of
// the manager's but an Opaque <redis>-auth owned by its Redis (and its
// webhook certificate's).
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create

// errNoSecret: the password Secret or its key does not exist, or kubext
// may not read it.
var errNoSecret = errors.New("password Secret not found or not readable")

// passwordBytes is how much randomness a generated password holds (256
// bits), written as 43 characters of unpadded URL-safe base64: nothing the
// kubelet's $(VAR) expansion or a client's command line would mangle.
const passwordBytes = 32

// passwordRef is the Secret key of the password the members require: the
// spec's, or the one kubext generates; nil when the Redis asks for none.
func passwordRef(rd *cachev1.Redis) *cachev1.SecretKeyRef {
	switch {
	case rd.Spec.Authentication == cachev1.AuthenticationNone:
		return nil
	case rd.Spec.PasswordSecretKeyRef != nil:
		ref := *rd.Spec.PasswordSecretKeyRef
		return &ref
	}
	return &cachev1.SecretKeyRef{Name: cachev1.GeneratedPasswordSecretName(rd.Name), Key: cachev1.GeneratedPasswordKey}
}

// generates tells whether kubext generates the Redis's password.
func generates(rd *cachev1.Redis) bool {
	return rd.Spec.Authentication != cachev1.AuthenticationNone && rd.Spec.PasswordSecretKeyRef == nil
}

// password is the password the members require ("" for none): read from
// the Secret the spec names, or from the one kubext generated, which it
// creates first when it does not exist. It returns errNoSecret, with the
// Ready condition saying why, when there is none to read, and
// ownedapply.ErrNotControlled when a Secret of the generated one's name is
// not the Redis's. It records the Secret in the status.
func (r *Reconciler) password(ctx context.Context, rd *cachev1.Redis) (string, error) {
	ref := passwordRef(rd)
	rd.Status.PasswordSecretKeyRef = ref
	switch {
	case ref == nil:
		return "", nil
	case generates(rd):
		return r.generatedPassword(ctx, rd, ref)
	}
	secret := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: rd.Namespace, Name: ref.Name}, secret)
	if apierrors.IsNotFound(err) {
		setCondition(rd, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonSecretNotFound,
			"Secret %s (spec.passwordSecretKeyRef) does not exist: the members cannot start without it", ref.Name)
		return "", errNoSecret
	}
	if apierrors.IsForbidden(err) {
		setCondition(rd, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonSecretForbidden,
			"kubext may not read Secret %s (spec.passwordSecretKeyRef): its manager is granted Secrets only in some namespaces, not %s "+
				"(the chart's rbac.redisSecretNamespaces); it cannot manage the members without the password", ref.Name, rd.Namespace)
		return "", errNoSecret
	}
	if err != nil {
		return "", fmt.Errorf("reading Secret %s/%s (spec.passwordSecretKeyRef): %w", rd.Namespace, ref.Name, err)
	}
	pw, ok := secret.Data[ref.Key]
	if !ok {
		setCondition(rd, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonSecretNotFound,
			"Secret %s (spec.passwordSecretKeyRef) has no key %q: the members cannot start without it", ref.Name, ref.Key)
		return "", errNoSecret
	}
	return string(pw), nil
}

// generatedPassword reads the password kubext generated for the Redis, or
// generates it: a Secret <name>-auth of type Opaque, controlled by the
// Redis (deleted with it), created once and never changed by kubext.
func (r *Reconciler) generatedPassword(ctx context.Context, rd *cachev1.Redis, ref *cachev1.SecretKeyRef) (string, error) {
	key := client.ObjectKey{Namespace: rd.Namespace, Name: ref.Name}
	secret := &corev1.Secret{}
	err := r.APIReader.Get(ctx, key, secret)
	switch {
	case apierrors.IsNotFound(err):
		return r.createPassword(ctx, rd, ref)
	case apierrors.IsForbidden(err):
		setCondition(rd, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonSecretForbidden,
			"kubext may not read Secret %s (the password it generates for a Redis without spec.passwordSecretKeyRef): its manager "+
				"is granted Secrets only in some namespaces, not %s (the chart's rbac.redisSecretNamespaces)", ref.Name, rd.Namespace)
		return "", errNoSecret
	case err != nil:
		return "", fmt.Errorf("reading Secret %s (the Redis's generated password): %w", key, err)
	}
	if !metav1.IsControlledBy(secret, rd) {
		// Not the one kubext generated: its password may be known to
		// whoever made it.
		setCondition(rd, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonObjectExists,
			"Secret %s exists and is not controlled by this Redis; delete or rename it, or name it in spec.passwordSecretKeyRef", ref.Name)
		return "", ownedapply.ErrNotControlled
	}
	pw := secret.Data[ref.Key]
	if len(pw) == 0 {
		setCondition(rd, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonSecretNotFound,
			"Secret %s, the password kubext generated, has lost its key %q: delete the Secret and kubext generates a new password "+
				"(then restart the members)", ref.Name, ref.Key)
		return "", errNoSecret
	}
	return string(pw), nil
}

// createPassword generates the Redis's password into a new Secret.
func (r *Reconciler) createPassword(ctx context.Context, rd *cachev1.Redis, ref *cachev1.SecretKeyRef) (string, error) {
	raw := make([]byte, passwordBytes)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("generating a password: %w", err)
	}
	pw := base64.RawURLEncoding.EncodeToString(raw)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: rd.Namespace, Name: ref.Name, Labels: labels(rd),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rd, cachev1.GroupVersion.WithKind("Redis"))},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{ref.Key: []byte(pw)},
	}
	err := r.Create(ctx, secret, client.FieldOwner(FieldOwner))
	switch {
	case apierrors.IsAlreadyExists(err):
		// Made meanwhile (by another replica of the manager, or a user):
		// the next round reads it.
		return "", fmt.Errorf("creating Secret %s/%s: %w", rd.Namespace, ref.Name, err)
	case apierrors.IsForbidden(err):
		setCondition(rd, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonSecretForbidden,
			"kubext may not create Secret %s (the password it generates for a Redis without spec.passwordSecretKeyRef) in %s: %v",
			ref.Name, rd.Namespace, err)
		return "", errNoSecret
	case apierrors.IsInvalid(err):
		// An admission policy refused it (config/policy/manager-secrets.yaml
		// allows exactly this Secret, so something else has a say).
		setCondition(rd, cachev1.ConditionReady, metav1.ConditionFalse, cachev1.ReasonRejected,
			"The API server refused Secret %s: %v", ref.Name, err)
		return "", errNoSecret
	case err != nil:
		return "", fmt.Errorf("creating Secret %s/%s: %w", rd.Namespace, ref.Name, err)
	}
	r.Recorder.Eventf(rd, secret, corev1.EventTypeNormal, "Created", "Apply", "Created Secret %s with a generated password", ref.Name)
	return pw, nil
}
