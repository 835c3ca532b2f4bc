package redis

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
)

// A scale down keeps the primary's pod until it has handed over.
func TestReplicasKeepThePrimaryUntilItHandsOver(t *testing.T) {
	g := NewWithT(t)
	rd := &cachev1.Redis{ObjectMeta: metav1.ObjectMeta{Name: "cache"}, Spec: cachev1.RedisSpec{Size: 2}}
	for primary, want := range map[string]int32{
		"":          2,
		"cache-0":   2,
		"cache-1":   2,
		"cache-2":   3,
		"cache-4":   5,
		"cache-x":   2,
		"other-9":   2,
		"cache-1-9": 2,
	} {
		rd.Status.Primary = primary
		g.Expect(replicas(rd)).To(Equal(want), primary)
		g.Expect(*desiredStatefulSet(rd).Spec.Replicas).To(Equal(want), primary)
	}
}
