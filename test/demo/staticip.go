package main

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/staticip"
)

// staticIPScenario: a partner whitelists one address; it answers from the
// holder pod, the pod's own traffic leaves from it, and when the holder's
// node dies the standby answers at the same address within seconds.
func staticIPScenario(ctx context.Context, d *demo) error {
	if d.lab.Net == nil {
		say("(skipped: the static IP data plane needs the lab network, i.e. root)")
		return nil
	}
	c, err := staticip.NewClient(d.lab)
	if err != nil {
		return err
	}
	if d.deployed != nil {
		say("The installer's ip-agent DaemonSet runs one agent per node, in each node's network namespace")
	} else {
		say("Starting one ip-agent per node, inside each node's network namespace")
		if err := d.startIPAgents(ctx); err != nil {
			return err
		}
	}
	pods, err := d.lab.StartPodNetwork(ctx)
	if err != nil {
		return err
	}
	defer pods.Stop()

	subnet := d.lab.Net.Subnet
	poolCIDR := netip.PrefixFrom(staticip.Nth(subnet, 96), 28)
	addr := staticip.Nth(subnet, 100)
	say("Creating IPPool %q (%s, failover Witness: the nodes vouch for each other), claimable from namespace default only, and IP %q with the fixed address %s",
		"partners", poolCIDR, "telco-gw", addr)
	if err := c.Create(ctx, &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "partners"},
		Spec: ipv1.IPPoolSpec{Addresses: []string{poolCIDR.String()}, Failover: ipv1.FailoverWitness,
			Claimants: &ipv1.PoolClaimants{Namespaces: []string{"default"}}}}); err != nil {
		return err
	}
	if err := c.Create(ctx, &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "telco-gw"},
		Spec: ipv1.IPSpec{Address: addr.String()}}); err != nil {
		return err
	}
	say("Deploying 2 pods that claim it (annotation %s: telco-gw), on different nodes", ipv1.AnnotationIP)
	if err := c.Create(ctx, staticip.Deployment("telco-gw", "telco-gw", 2)); err != nil {
		return err
	}
	ip, err := staticip.WaitIP(ctx, c, "telco-gw", time.Minute, func(ip *ipv1.IP) bool {
		return staticip.Ready(ip) && len(ip.Status.Standbys) == 1
	})
	if err != nil {
		return err
	}
	if out, err := d.lab.Kubectl(ctx, "get", "ips", "-o", "wide"); err == nil {
		fmt.Print(indent(string(out)))
	}
	reply, err := staticip.AskUntil(d.lab.Net.ClientNamespace(), addr, staticip.PodName(ip.Status.Pod), 20*time.Second)
	if err != nil {
		return err
	}
	say("Partner -> %s:%d answered by %q (holder, on %s); standby: %s", addr, lab.PodServerPort, reply, ip.Status.Node, ip.Status.Standbys[0])
	if src, err := staticip.SourceSeenByClient(d.lab, pods, ip.Status.Pod); err == nil {
		say("Pod %s -> partner: the partner sees the connection coming from %s", staticip.PodName(ip.Status.Pod), src)
	} else {
		say("(egress check failed: %v)", err)
	}

	if err := intruderScenario(ctx, d, c, ip); err != nil {
		return err
	}
	if err := stallScenario(ctx, d, c, ip.Name, addr, staticip.PodName(ip.Status.Pod)); err != nil {
		return err
	}

	say("Killing node %s (agent stopped, network cut, NotReady) ...", ip.Status.Node)
	dead := ip.Status.Node
	if err := d.lab.KillNode(ctx, dead); err != nil {
		return err
	}
	start := time.Now()
	standby := staticip.PodName(ip.Status.Standbys[0])
	reply, err = staticip.AskUntil(d.lab.Net.ClientNamespace(), addr, standby, 30*time.Second)
	if err != nil {
		return err
	}
	say("Partner -> %s answered by %q after %s — same address, no DNS, no partner change",
		addr, reply, time.Since(start).Round(10*time.Millisecond))
	if out, err := d.lab.Kubectl(ctx, "get", "ips"); err == nil {
		fmt.Print(indent(string(out)))
	}
	say("Reviving %s: its agent comes back in a new generation, its old one declared silent, and stays silent", dead)
	if err := d.lab.ReviveNode(ctx, dead); err != nil {
		return err
	}
	// The scenarios after this one place pods on it again.
	if err := d.lab.WaitNodeUsable(ctx, dead, time.Minute); err != nil {
		return err
	}
	if d.deployed == nil { // deployed, the lab restarts the node's pods itself
		args, err := d.lab.WitnessArgs()
		if err != nil {
			return err
		}
		if _, err := d.lab.StartIPAgent(ctx, dead, args...); err != nil {
			return err
		}
	}
	time.Sleep(2 * time.Second)
	reply, err = staticip.AskFrom(d.lab.Net.ClientNamespace(), addr, time.Second)
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

// intruderScenario: a pod in another namespace claims telco-gw; it is
// refused, and the holder keeps the address.
func intruderScenario(ctx context.Context, d *demo, c client.Client, ip *ipv1.IP) error {
	say("A pod in namespace %q claims telco-gw too (annotation %s: telco-gw) ...", "intruder", ipv1.AnnotationIP)
	if err := d.lab.EnsureNamespace(ctx, "intruder"); err != nil {
		return err
	}
	if err := c.Create(ctx, staticip.DeploymentIn("intruder", "intruder", "telco-gw", 1)); err != nil {
		return err
	}
	var events []byte
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := d.lab.Kubectl(ctx, "get", "events", "-n", "intruder", "--field-selector", "reason=ClaimRefused",
			"-o", "custom-columns=TYPE:.type,REASON:.reason,OBJECT:.involvedObject.name,MESSAGE:.message")
		if err == nil && strings.Count(string(out), "\n") > 1 {
			events = out
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the intruder's claim was not refused (no ClaimRefused Event within 30 s)")
		}
		time.Sleep(250 * time.Millisecond)
	}
	say("Refused: the pod's Events say why")
	fmt.Print(indent(string(events)))
	now := &ipv1.IP{}
	if err := c.Get(ctx, client.ObjectKey{Name: "telco-gw"}, now); err != nil {
		return err
	}
	if now.Status.Pod != ip.Status.Pod {
		return fmt.Errorf("telco-gw moved from %s to %s", ip.Status.Pod, now.Status.Pod)
	}
	say("telco-gw is still held by %s; standbys %v. The plugin says who may claim it and why the intruder may not:", now.Status.Pod, now.Status.Standbys)
	if err := plugin(ctx, d, "ip", "explain", "telco-gw"); err != nil {
		return err
	}
	return c.Delete(ctx, staticip.DeploymentIn("intruder", "intruder", "telco-gw", 1))
}

// stallScenario: kube-apiserver frozen for 5 s; the holder keeps
// answering on its witnesses' word (with the Lease it would go dark after
// 1.5 s). A hold starts on the holder's Lease and moves to its witnesses'
// word once they vouch for it, a moment after the IP is Ready; the freeze
// waits for that, and what the partner saw during it is checked, not
// assumed. A hold that got no witnesses (none was eligible when it was
// placed) gets them named within seconds of one becoming eligible, so a
// hold still on the Lease after 30 s fails the demo: the freeze would
// silence it.
func stallScenario(ctx context.Context, d *demo, c client.Client, name string, addr netip.Addr, holder string) error {
	ip, err := staticip.WaitIP(ctx, c, name, 30*time.Second, func(ip *ipv1.IP) bool { return ip.Status.AttachedGeneration > 0 })
	if err != nil {
		return fmt.Errorf("%s is still held on the holder's heartbeat Lease after 30 s, so a frozen API server would silence it: %w", name, err)
	}
	say("%s is now held on its witnesses' word (%v, generation %d), not on the holder's Lease", name, ip.Status.Witnesses, ip.Status.AttachedGeneration)
	say("Freezing kube-apiserver for 5 s (SIGSTOP) while the partner asks every 100 ms ...")
	resume, err := d.lab.PauseComponent(lab.ComponentAPIServer, 15*time.Second)
	if err != nil {
		return err
	}
	asked, answered := 0, 0
	var longest time.Duration
	lastAnswer := time.Now()
	for end := lastAnswer.Add(5 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		asked++
		if got, err := staticip.AskFrom(d.lab.Net.ClientNamespace(), addr, 300*time.Millisecond); err == nil && got == holder {
			answered++
			lastAnswer = time.Now()
		}
		longest = max(longest, time.Since(lastAnswer))
	}
	if err := resume(); err != nil {
		return err
	}
	say("API server frozen 5 s: %d of %d asks answered by %q, longest silence %s", answered, asked, holder, longest.Round(10*time.Millisecond))
	switch {
	case longest > 1500*time.Millisecond:
		// An ask lost now and then on a loaded machine is not an outage;
		// the Lease's fence (1.5 s without the API server) would be one.
		return fmt.Errorf("%s went silent for %s while the API server was frozen although its witnesses held it", addr, longest.Round(10*time.Millisecond))
	default:
		say("The holder kept answering: its witnesses vouched for it while nobody could reach the API server")
	}
	// A manager run by the demo may have lost its leader Lease meanwhile
	// and left; installed, the kubelet (the lab) restarts it.
	return d.managerBack(ctx)
}

func indent(s string) string {
	return "      " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n      ") + "\n"
}

// startIPAgents starts one ip-agent per node, once per demo (local mode).
func (d *demo) startIPAgents(ctx context.Context) error {
	if d.ipAgents {
		return nil
	}
	args, err := d.lab.WitnessArgs()
	if err != nil {
		return err
	}
	for _, n := range d.lab.Nodes {
		if _, err := d.lab.StartIPAgent(ctx, n, args...); err != nil {
			return err
		}
	}
	d.ipAgents = true
	return nil
}
