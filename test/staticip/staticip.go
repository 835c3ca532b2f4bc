// Package staticip drives static IPs on the lab from the outside: it is
// what the e2e tests, the demo and the failover benchmark share to create
// claiming workloads and to talk to a fixed address the way a partner
// would, from the lab's client namespace.
package staticip

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/lab/labnet"
)

// NewClient is a client for the lab that knows the IP types.
func NewClient(l *lab.Lab) (client.Client, error) {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(ipv1.AddToScheme(scheme))
	cfg, err := l.RESTConfig()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// Deployment runs replicas pods in the default namespace that claim the IP,
// each on its own node.
func Deployment(name, ip string, replicas int32) *appsv1.Deployment {
	return DeploymentIn("default", name, ip, replicas)
}

// DeploymentIn is Deployment in another namespace.
func DeploymentIn(namespace, name, ip string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{ipv1.AnnotationIP: ip}},
				Spec: corev1.PodSpec{
					Containers:                    []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
					TerminationGracePeriodSeconds: ptr.To[int64](0),
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
							LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: "kubernetes.io/hostname",
						}},
					}},
				},
			},
		},
	}
}

// Ready reports the IP's Ready condition.
func Ready(ip *ipv1.IP) bool {
	return meta.IsStatusConditionTrue(ip.Status.Conditions, ipv1.ConditionReady)
}

// WaitIP polls the IP until ok holds.
func WaitIP(ctx context.Context, c client.Client, name string, timeout time.Duration, ok func(*ipv1.IP) bool) (*ipv1.IP, error) {
	deadline := time.Now().Add(timeout)
	for {
		ip := &ipv1.IP{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, ip); err == nil && ok(ip) {
			return ip, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("IP %s not as expected within %s: %+v", name, timeout, ip.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Ask connects to the address from the calling goroutine's network
// namespace and returns what the pod behind it says (its name).
func Ask(addr netip.Addr, timeout time.Duration) (string, error) {
	c, err := net.DialTimeout("tcp", netip.AddrPortFrom(addr, lab.PodServerPort).String(), timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	b, err := io.ReadAll(c)
	return strings.TrimSpace(string(b)), err
}

// AskFrom is Ask from a network namespace (the client's, usually).
func AskFrom(namespace string, addr netip.Addr, timeout time.Duration) (reply string, err error) {
	err = labnet.Do(namespace, func() error {
		reply, err = Ask(addr, timeout)
		return err
	})
	return reply, err
}

// AskUntil asks every 50 ms until the wanted pod answers.
func AskUntil(namespace string, addr netip.Addr, want string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		reply, err := AskFrom(namespace, addr, 100*time.Millisecond)
		if err == nil && reply == want {
			return reply, nil
		}
		if time.Now().After(deadline) {
			return reply, fmt.Errorf("%s did not answer as %s within %s (last %q, %v)", addr, want, timeout, reply, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SourceSeenByClient has the pod connect to a server in the lab's client
// namespace and returns the source address the server saw.
func SourceSeenByClient(l *lab.Lab, pods *lab.PodNetwork, pod string) (string, error) {
	ns := pods.PodNamespace(pod)
	if ns == "" {
		return "", fmt.Errorf("pod %s has no namespace in the lab pod network", pod)
	}
	return SourceSeenFrom(l, ns)
}

// SourceSeenFrom connects from a network namespace to a server in the
// lab's client namespace and returns the source address the server saw.
func SourceSeenFrom(l *lab.Lab, ns string) (string, error) {
	server := netip.AddrPortFrom(l.Net.ClientAddr(), 7071).String()
	var ln net.Listener
	if err := labnet.Do(l.Net.ClientNamespace(), func() (err error) {
		ln, err = net.Listen("tcp", server)
		return err
	}); err != nil {
		return "", err
	}
	defer ln.Close()
	seen := make(chan string, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			c.Close()
			seen <- host
		}
	}()
	if err := labnet.Do(ns, func() error {
		c, err := net.DialTimeout("tcp", server, 3*time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	}); err != nil {
		return "", err
	}
	select {
	case h := <-seen:
		return h, nil
	case <-time.After(3 * time.Second):
		return "", fmt.Errorf("the client saw no connection")
	}
}

// PodName is the name part of a namespace/name key.
func PodName(key string) string {
	_, name, _ := strings.Cut(key, "/")
	return name
}

// Nth is the n-th address of the prefix (0 is the network address).
func Nth(p netip.Prefix, n int) netip.Addr {
	a := p.Masked().Addr()
	for range n {
		a = a.Next()
	}
	return a
}
