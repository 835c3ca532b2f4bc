package redis

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
	"github.com/kubext/kubext/test/testenv"
)

// create asks the API server to create a Redis without keeping it.
func create(t *testing.T, name string, s cachev1.RedisSpec) error {
	rd := &cachev1.Redis{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: s}
	return k8s.Create(t.Context(), rd, client.DryRunAll)
}

func TestSpecValidation(t *testing.T) {
	valid := map[string]cachev1.RedisSpec{
		"defaults":    size(1),
		"tag":         {Size: 100, Image: "registry.example.com:5000/cache/redis:7.2.5-alpine"},
		"digest":      {Size: 3, Image: "redis@sha256:" + strings.Repeat("ab", 32)},
		"password":    {Size: 3, PasswordSecretKeyRef: &cachev1.SecretKeyRef{Name: "redis.auth-1", Key: "redis_password.txt"}},
		"persisted":   {Size: 3, Persistence: &cachev1.Persistence{Size: resource.MustParse("500Mi"), StorageClassName: ptr.To("standard")}},
		"no password": {Size: 1, Authentication: cachev1.AuthenticationNone},
		"explicit":    {Size: 1, Authentication: cachev1.AuthenticationPassword, PasswordSecretKeyRef: &cachev1.SecretKeyRef{Name: "auth"}},
	}
	for name, s := range valid {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(create(t, "valid", s)).To(Succeed())
		})
	}

	invalid := map[string]struct {
		spec    cachev1.RedisSpec
		message string
	}{
		"size 0":         {size(0), "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1"},
		"size 101":       {size(101), "spec.size in body should be less than or equal to 100"},
		"latest":         {cachev1.RedisSpec{Size: 1, Image: "redis:latest"}, "image must not be :latest; pin a version tag such as redis:7.2.5"},
		"no tag":         {cachev1.RedisSpec{Size: 1, Image: "redis"}, "image must be pinned to a version tag or a digest"},
		"registry port":  {cachev1.RedisSpec{Size: 1, Image: "registry:5000/redis"}, "image must be pinned to a version tag or a digest"},
		"space":          {cachev1.RedisSpec{Size: 1, Image: "redis 7"}, "image must not contain whitespace"},
		"secret name":    {cachev1.RedisSpec{Size: 1, PasswordSecretKeyRef: &cachev1.SecretKeyRef{Name: "Auth"}}, "name must be the name of a Secret"},
		"secret key":     {cachev1.RedisSpec{Size: 1, PasswordSecretKeyRef: &cachev1.SecretKeyRef{Name: "auth", Key: "a/b"}}, "key must be a Secret data key"},
		"no secret name": {cachev1.RedisSpec{Size: 1, PasswordSecretKeyRef: &cachev1.SecretKeyRef{}}, "spec.passwordSecretKeyRef.name"},
		"empty volume":   {cachev1.RedisSpec{Size: 1, Persistence: &cachev1.Persistence{Size: resource.MustParse("0")}}, "persistence.size must be more than 0, e.g. 1Gi"},
		"storage class":  {cachev1.RedisSpec{Size: 1, Persistence: &cachev1.Persistence{Size: resource.MustParse("1Gi"), StorageClassName: ptr.To("")}}, "spec.persistence.storageClassName"},
		"none and a secret": {cachev1.RedisSpec{Size: 1, Authentication: cachev1.AuthenticationNone, PasswordSecretKeyRef: &cachev1.SecretKeyRef{Name: "auth"}},
			"passwordSecretKeyRef names a password, authentication None asks for none: set one or the other"},
		"authentication":  {cachev1.RedisSpec{Size: 1, Authentication: "Secret"}, `spec.authentication: Unsupported value: "Secret"`},
		"negative volume": {cachev1.RedisSpec{Size: 1, Persistence: &cachev1.Persistence{Size: resource.MustParse("-1Gi")}}, "persistence.size must be more than 0, e.g. 1Gi"},
	}
	for name, tc := range invalid {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(create(t, "invalid", tc.spec)).To(MatchError(ContainSubstring(tc.message)))
		})
	}
}

func TestNameValidation(t *testing.T) {
	g := NewWithT(t)
	g.Expect(create(t, strings.Repeat("a", 52), size(1))).To(Succeed())
	for _, name := range []string{strings.Repeat("a", 53), "redis.cache", "0cache"} {
		g.Expect(create(t, name, size(1))).To(MatchError(ContainSubstring("the name of a Redis must be at most 52 lower case letters")), name)
	}
}

func TestPersistenceCannotChange(t *testing.T) {
	f := newFixture(t)
	key := f.redis("persist", cachev1.RedisSpec{Size: 1, Persistence: &cachev1.Persistence{Size: resource.MustParse("1Gi")}})
	rd := &cachev1.Redis{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}}
	const message = "persistence cannot be added, removed or changed once the Redis exists"
	f.G.Expect(k8s.Patch(f.Ctx, rd, testenv.MergePatch(`{"spec":{"persistence":{"size":"2Gi"}}}`))).To(MatchError(ContainSubstring(message)))
	f.G.Expect(k8s.Patch(f.Ctx, rd, testenv.MergePatch(`{"spec":{"persistence":null}}`))).To(MatchError(ContainSubstring(message)))
	f.G.Expect(k8s.Patch(f.Ctx, rd, testenv.MergePatch(`{"spec":{"size":2}}`))).To(Succeed(), "other fields still change")

	plain := f.redis("plain", size(1))
	rd = &cachev1.Redis{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: plain.Name}}
	f.G.Expect(k8s.Patch(f.Ctx, rd, testenv.MergePatch(`{"spec":{"persistence":{"size":"1Gi"}}}`))).To(MatchError(ContainSubstring(message)))
}
