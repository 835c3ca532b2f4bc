package witnesskey

import (
	"bytes"
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestEnsureCreatesOnceAndNeverReplaces(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().Build()
	if err := Ensure(ctx, c, c, "kubext-system", "kubext-witness-key"); err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "kubext-system", Name: "kubext-witness-key"}, s); err != nil {
		t.Fatal(err)
	}
	first := bytes.Clone(s.Data[DataKey])
	if len(first) != Size || bytes.Equal(first, make([]byte, Size)) {
		t.Fatalf("key of %d bytes, all zero: %v", len(first), bytes.Equal(first, make([]byte, Size)))
	}
	if err := Ensure(ctx, c, c, "kubext-system", "kubext-witness-key"); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "kubext-system", Name: "kubext-witness-key"}, s); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, s.Data[DataKey]) {
		t.Fatal("the key changed on the second call")
	}
}

func TestEnsureRefusesAShortKeyWithoutShowingIt(t *testing.T) {
	short := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "k"}, Data: map[string][]byte{DataKey: []byte("hunter2")}}
	c := fake.NewClientBuilder().WithObjects(short).Build()
	err := Ensure(context.Background(), c, c, "ns", "k")
	if err == nil || !strings.Contains(err.Error(), "7 bytes") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("got %v", err)
	}
}
