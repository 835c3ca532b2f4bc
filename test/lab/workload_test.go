package lab

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestIsRedisImage(t *testing.T) {
	g := NewWithT(t)
	for _, image := range []string{"redis:7.2.5", "docker.io/library/redis:7.2.5", "registry:5000/mirror/redis@sha256:abc", "redis"} {
		g.Expect(isRedisImage(image)).To(BeTrue(), image)
	}
	for _, image := range []string{"valkey/valkey:8", "redis-stack:7", "docker.io/bitnami/redis-sentinel:7", "registry:5000/redis/server:7", ""} {
		g.Expect(isRedisImage(image)).To(BeFalse(), image)
	}
}

func TestRedisArgv(t *testing.T) {
	g := NewWithT(t)
	argv := func(c corev1.Container) []string {
		a, err := redisArgv(&c)
		g.Expect(err).NotTo(HaveOccurred())
		return a
	}
	// The image's entrypoint: options or a .conf file go to redis-server.
	g.Expect(argv(corev1.Container{Args: []string{"--port", "6379"}})).To(Equal([]string{"redis-server", "--port", "6379"}))
	g.Expect(argv(corev1.Container{Args: []string{"/etc/redis.conf"}})).To(Equal([]string{"redis-server", "/etc/redis.conf"}))
	g.Expect(argv(corev1.Container{})).To(Equal([]string{"redis-server"}))
	g.Expect(argv(corev1.Container{Args: []string{"redis-server", "--port", "1"}})).To(Equal([]string{"redis-server", "--port", "1"}))
	g.Expect(argv(corev1.Container{Command: []string{"/usr/local/bin/redis-server"}, Args: []string{"--port", "1"}})).
		To(Equal([]string{"/usr/local/bin/redis-server", "--port", "1"}))
	for _, c := range []corev1.Container{{Args: []string{"sh", "-c", "rm -rf /"}}, {Command: []string{"redis-cli"}}} {
		_, err := redisArgv(&c)
		g.Expect(err).To(MatchError(ContainSubstring("runs only redis-server")))
	}
}

func TestRewritePath(t *testing.T) {
	g := NewWithT(t)
	mounts := map[string]string{"/data": "/lab/w/volumes/data"}
	g.Expect(rewritePath("/data", mounts)).To(Equal("/lab/w/volumes/data"))
	g.Expect(rewritePath("/data/appendonly.aof", mounts)).To(Equal("/lab/w/volumes/data/appendonly.aof"))
	g.Expect(rewritePath("/database", mounts)).To(Equal("/database"))
	g.Expect(rewritePath("6379", mounts)).To(Equal("6379"))
}

func TestRunAsNeverRoot(t *testing.T) {
	g := NewWithT(t)
	pod := &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](1000)}}}
	c := &corev1.Container{}
	uid, gid, err := runAs(pod, c)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect([]int{uid, gid}).To(Equal([]int{1000, 1000}))
	c.SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](0)}
	_, _, err = runAs(pod, c)
	g.Expect(err).To(MatchError(ContainSubstring("no workload as root")))
}
