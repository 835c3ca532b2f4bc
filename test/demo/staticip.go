package main

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

// staticIPScenario: a partner whitelists one address; it answers from the
// holder pod, the pod's own traffic leaves from it, and when the holder's
// node dies the standby answers at the same address within seconds.
func staticIPScenario(ctx context.Context, d *demo) error {
	if d.lab.Net == nil {
		say("(skipped: the static IP data plane needs the lab network, i.e. root)")
		return nil
	}
	c, err := ipClient(d.lab)
	if err != nil {
		return err
	}
	say("Starting one ip-agent per node, inside each node's network namespace")
	for _, n := range d.lab.Nodes {
		if _, err := d.lab.StartIPAgent(ctx, n); err != nil {
			return err
		}
	}
	pods, err := d.lab.StartPodNetwork(ctx)
	if err != nil {
		return err
	}
	defer pods.Stop()

	subnet := d.lab.Net.Subnet
	poolCIDR := netip.PrefixFrom(nth(subnet, 96), 28)
	addr := nth(subnet, 100)
	say("Creating IPPool %q (%s) and IP %q with the fixed address %s", "partners", poolCIDR, "telco-gw", addr)
	if err := c.Create(ctx, &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "partners"},
		Spec: ipv1.IPPoolSpec{Addresses: []string{poolCIDR.String()}}}); err != nil {
		return err
	}
	if err := c.Create(ctx, &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "telco-gw"},
		Spec: ipv1.IPSpec{Address: addr.String()}}); err != nil {
		return err
	}
	say("Deploying 2 pods that claim it (annotation %s: telco-gw), on different nodes", ipv1.AnnotationIP)
	if err := c.Create(ctx, gatewayDeployment()); err != nil {
		return err
	}
	ip, err := waitIP(ctx, c, "telco-gw", func(ip *ipv1.IP) bool { return ready(ip) && len(ip.Status.Standbys) == 1 })
	if err != nil {
		return err
	}
	if out, err := d.lab.Kubectl(ctx, "get", "ips", "-o", "wide"); err == nil {
		fmt.Print(indent(string(out)))
	}
	reply, err := askUntil(d.lab.Net.ClientNamespace(), addr, podOf(ip.Status.Pod), 20*time.Second)
	if err != nil {
		return err
	}
	say("Partner -> %s:%d answered by %q (holder, on %s); standby: %s", addr, lab.PodServerPort, reply, ip.Status.Node, ip.Status.Standbys[0])
	if src, err := egressSource(d.lab, pods, ip.Status.Pod); err == nil {
		say("Pod %s -> partner: the partner sees the connection coming from %s", podOf(ip.Status.Pod), src)
	} else {
		say("(egress check failed: %v)", err)
	}

	say("Killing node %s (agent stopped, network cut, NotReady) ...", ip.Status.Node)
	dead := ip.Status.Node
	if err := d.lab.KillNode(ctx, dead); err != nil {
		return err
	}
	start := time.Now()
	standby := podOf(ip.Status.Standbys[0])
	reply, err = askUntil(d.lab.Net.ClientNamespace(), addr, standby, 30*time.Second)
	if err != nil {
		return err
	}
	say("Partner -> %s answered by %q after %s — same address, no DNS, no partner change",
		addr, reply, time.Since(start).Round(10*time.Millisecond))
	if out, err := d.lab.Kubectl(ctx, "get", "ips"); err == nil {
		fmt.Print(indent(string(out)))
	}
	say("Reviving %s: its agent comes back without the lease and stays silent", dead)
	if err := d.lab.ReviveNode(ctx, dead); err != nil {
		return err
	}
	if _, err := d.lab.StartIPAgent(ctx, dead); err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	reply, err = ask(d.lab.Net.ClientNamespace(), addr, time.Second)
	if err != nil {
		return err
	}
	say("Partner -> %s still answered by %q", addr, reply)
	if out, err := d.lab.Kubectl(ctx, "get", "events", "-n", "default", "--field-selector", "involvedObject.kind=IP,involvedObject.name=telco-gw",
		"-o", "custom-columns=REASON:.reason,MESSAGE:.message", "--sort-by", ".metadata.creationTimestamp"); err == nil {
		say("Events of IP telco-gw:")
		fmt.Print(indent(string(out)))
	}
	return nil
}

func ipClient(l *lab.Lab) (client.Client, error) {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(ipv1.AddToScheme(scheme))
	cfg, err := l.RESTConfig()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

func gatewayDeployment() *appsv1.Deployment {
	labels := map[string]string{"app": "telco-gw"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "telco-gw", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{ipv1.AnnotationIP: "telco-gw"}},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "gw", Image: "registry.k8s.io/pause:3.10"}},
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

func ready(ip *ipv1.IP) bool {
	return meta.IsStatusConditionTrue(ip.Status.Conditions, ipv1.ConditionReady)
}

func waitIP(ctx context.Context, c client.Client, name string, ok func(*ipv1.IP) bool) (*ipv1.IP, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		ip := &ipv1.IP{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, ip); err == nil && ok(ip) {
			return ip, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("IP %s did not become ready: %v", name, ip.Status.Conditions)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ask connects to the address from the client namespace and returns what
// the pod behind it says.
func ask(clientNS string, addr netip.Addr, timeout time.Duration) (string, error) {
	var reply string
	err := labnet.Do(clientNS, func() error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(addr, lab.PodServerPort).String(), timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		b, err := io.ReadAll(c)
		reply = strings.TrimSpace(string(b))
		return err
	})
	return reply, err
}

// askUntil probes every 50 ms until the wanted pod answers.
func askUntil(clientNS string, addr netip.Addr, want string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		reply, err := ask(clientNS, addr, 100*time.Millisecond)
		if err == nil && reply == want {
			return reply, nil
		}
		if time.Now().After(deadline) {
			return reply, fmt.Errorf("%s did not answer as %s within %s (last: %q, %v)", addr, want, timeout, reply, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// egressSource has the pod connect to the client namespace and returns the
// source address the client saw.
func egressSource(l *lab.Lab, pods *lab.PodNetwork, pod string) (string, error) {
	var ln net.Listener
	if err := labnet.Do(l.Net.ClientNamespace(), func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(l.Net.ClientAddr(), 7071).String())
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
	if err := labnet.Do(pods.PodNamespace(pod), func() error {
		c, err := net.DialTimeout("tcp", netip.AddrPortFrom(l.Net.ClientAddr(), 7071).String(), 3*time.Second)
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
		return "", fmt.Errorf("no connection arrived")
	}
}

func nth(p netip.Prefix, n int) netip.Addr {
	a := p.Masked().Addr()
	for range n {
		a = a.Next()
	}
	return a
}

func podOf(key string) string {
	_, name, _ := strings.Cut(key, "/")
	return name
}

func indent(s string) string {
	return "      " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n      ") + "\n"
}
