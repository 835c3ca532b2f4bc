// Package witnesskey provides the key the ip-agents sign their witness
// messages with (internal/witness.Codec): a Secret in kubext's namespace
// that the manager creates once, with random bytes, and that the agents'
// DaemonSet mounts. Only the agents and the manager can read it; anyone
// who holds it can vouch for a node, so it is never logged.
package witnesskey

import (
	"context"
	"crypto/rand"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DataKey is the Secret's key holding the witness key.
const DataKey = "key"

// Size is the length of a generated key: HMAC-SHA256 gains nothing from
// more, and witness.NewCodec refuses less.
const Size = 32

// Ensure creates the Secret with a new random key unless it exists; an
// existing Secret is never changed (the agents hold its key, and a user may
// have provided their own). It fails if an existing one holds no usable
// key, saying so without showing it. r should read from the API server:
// the manager may get this one Secret, not list or watch Secrets.
func Ensure(ctx context.Context, r client.Reader, w client.Writer, namespace, name string) error {
	s := &corev1.Secret{}
	err := r.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, s)
	if apierrors.IsNotFound(err) {
		key := make([]byte, Size)
		if _, err := rand.Read(key); err != nil {
			return err
		}
		s = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
				Labels: map[string]string{"app.kubernetes.io/name": "kubext", "app.kubernetes.io/component": "witness-key"}},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{DataKey: key},
		}
		err = w.Create(ctx, s)
		if apierrors.IsAlreadyExists(err) {
			return Ensure(ctx, r, w, namespace, name) // another replica made it
		}
		if err != nil {
			return fmt.Errorf("creating the witness key Secret %s/%s: %w", namespace, name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the witness key Secret %s/%s: %w", namespace, name, err)
	}
	if n := len(s.Data[DataKey]); n < Size {
		return fmt.Errorf("the witness key Secret %s/%s holds %d bytes under %q, fewer than %d: delete it and the manager makes a new one, then restart the ip-agents",
			namespace, name, n, DataKey, Size)
	}
	return nil
}
