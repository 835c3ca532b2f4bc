package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/staticip"
)

// awsScenario: the seeds' own environment. The lab models a VPC (an EC2
// endpoint serving the in-memory EC2 of internal/provider/aws/ec2double,
// one instance and network interface per node, a network that routes a
// secondary private IP only to the node whose interface holds it); the
// manager is switched to the aws provider as a user on AWS would switch
// it; an address of the BYOIP range follows its pod from one node's
// interface to another's, moved by EC2 in one call.
func awsScenario(ctx context.Context, d *demo) error {
	if d.lab.Net == nil {
		say("(skipped: the VPC model needs the lab network, i.e. root)")
		return nil
	}
	c, err := staticip.NewClient(d.lab)
	if err != nil {
		return err
	}
	subnet := d.lab.Net.Subnet
	private := netip.PrefixFrom(staticip.Nth(subnet, 160), 29)
	addr := staticip.Nth(subnet, 162)
	vpc, err := d.lab.StartVPC(ctx, lab.VPCOptions{Addresses: private, OnGateway: d.deployed != nil})
	if err != nil {
		return err
	}
	defer func() { _ = vpc.Stop() }()
	say("The lab's VPC: EC2 endpoint %s, nodes are instances (spec.providerID aws:///lab-1a/i-...), %s routed by EC2's assignment only", vpc.Endpoint, private)
	if err := d.enableAWS(ctx, vpc); err != nil {
		return err
	}
	if d.deployed == nil {
		if err := d.startIPAgents(ctx); err != nil {
			return err
		}
	}
	pods, err := d.lab.StartPodNetwork(ctx)
	if err != nil {
		return err
	}
	defer pods.Stop()

	say("Creating IPPool %q (provider aws, %s) and IP %q (%s), claimed by 2 pods", "byoip", private, "partner-aws", addr)
	objs := []client.Object{
		&ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "byoip"}, Spec: ipv1.IPPoolSpec{Addresses: []string{private.String()},
			Provider: ipv1.ProviderAWS, Claimants: &ipv1.PoolClaimants{Namespaces: []string{"default"}}}},
		&ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "partner-aws"}, Spec: ipv1.IPSpec{Address: addr.String(), Pool: "byoip"}},
		staticip.Deployment("partner-aws", "partner-aws", 2),
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return err
		}
	}
	ip, err := staticip.WaitIP(ctx, c, "partner-aws", 2*time.Minute, func(ip *ipv1.IP) bool {
		return staticip.Ready(ip) && len(ip.Status.Standbys) == 1 && ip.Status.AWS != nil
	})
	if err != nil {
		return err
	}
	if err := plugin(ctx, d, "ip", "explain", "partner-aws"); err != nil {
		return err
	}
	say("EC2 says %s is on %s (%s's interface)", addr, vpc.HolderENI(addr), vpc.NodeOfENI(vpc.HolderENI(addr)))
	reply, err := staticip.AskUntil(d.lab.Net.ClientNamespace(), addr, staticip.PodName(ip.Status.Pod), 20*time.Second)
	if err != nil {
		return err
	}
	say("Partner -> %s answered by %q on %s", addr, reply, ip.Status.Node)

	dead, standby := ip.Status.Node, staticip.PodName(ip.Status.Standbys[0])
	say("Killing node %s ...", dead)
	calls := vpc.EC2.Mutating()
	if err := d.lab.KillNode(ctx, dead); err != nil {
		return err
	}
	start := time.Now()
	// A minute: the leading manager may have been on the dead node, and
	// its successor waits for the leader lease first.
	if reply, err = staticip.AskUntil(d.lab.Net.ClientNamespace(), addr, standby, time.Minute); err != nil {
		return err
	}
	say("Partner -> %s answered by %q after %s; EC2 moved it to %s (%s) with %d mutating call(s)", addr, reply,
		time.Since(start).Round(10*time.Millisecond), vpc.HolderENI(addr), vpc.NodeOfENI(vpc.HolderENI(addr)), vpc.EC2.Mutating()-calls)
	if err := d.lab.ReviveNode(ctx, dead); err != nil {
		return err
	}
	// The scenarios after this one place pods on it again.
	if err := d.lab.WaitNodeUsable(ctx, dead, time.Minute); err != nil {
		return err
	}
	if d.deployed == nil {
		if _, err := d.lab.StartIPAgent(ctx, dead); err != nil {
			return err
		}
	}

	say("Deleting IP partner-aws: the address leaves EC2 before the IP goes")
	for i := len(objs) - 1; i >= 0; i-- {
		if pool, isPool := objs[i].(*ipv1.IPPool); isPool {
			// The in-use policy refuses the delete until the manager has
			// counted the IP's departure, as it would a user's.
			if err := waitPoolEmpty(ctx, c, pool); err != nil {
				return err
			}
		}
		if err := c.Delete(ctx, objs[i]); err != nil {
			return err
		}
		if _, isIP := objs[i].(*ipv1.IP); isIP {
			if err := waitGone(ctx, c, objs[i]); err != nil {
				return err
			}
			say("IP deleted; EC2 holds %s on %q (none)", addr, vpc.HolderENI(addr))
		}
	}
	return vpc.Err()
}

// enableAWS turns the manager's aws provider on against the lab's EC2:
// installed, the way a user changes an installation (the manager's args
// and its credentials' environment), otherwise by restarting the local
// manager with the flags.
func (d *demo) enableAWS(ctx context.Context, vpc *lab.VPC) error {
	flags := []string{"--aws-provider", "--aws-region=lab-1", "--aws-endpoint=" + vpc.Endpoint}
	// The lab's EC2 checks no signature; on AWS the SDK's default chain
	// finds the credentials (IRSA, instance profile...), see docs/aws.md.
	env := map[string]string{"AWS_ACCESS_KEY_ID": "AKIDLAB", "AWS_SECRET_ACCESS_KEY": "lab", "AWS_EC2_METADATA_DISABLED": "true"}
	if d.deployed == nil {
		for k, v := range env {
			if err := os.Setenv(k, v); err != nil {
				return err
			}
		}
		say("Restarting the manager with %v", flags)
		d.manager.Kill()
		m, err := d.lab.StartManager(ctx, "manager-aws", flags...)
		if err != nil {
			return err
		}
		d.manager, d.metricsURL = m, m.MetricsURL
		return nil
	}
	k := &labKubectl{ctx: ctx, d: d}
	ns, deploy := d.deployed.Namespace, "deployment/kubext-controller-manager"
	var ops []string
	for _, f := range flags {
		ops = append(ops, fmt.Sprintf(`{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":%q}`, f))
	}
	// The installer's manager container has no env of its own yet.
	var vars []string
	for _, name := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_EC2_METADATA_DISABLED"} {
		vars = append(vars, fmt.Sprintf(`{"name":%q,"value":%q}`, name, env[name]))
	}
	ops = append(ops, `{"op":"add","path":"/spec/template/spec/containers/0/env","value":[`+strings.Join(vars, ",")+`]}`)
	if err := k.show("patch", "-n", ns, deploy, "--type=json", "-p", "["+strings.Join(ops, ",")+"]"); err != nil {
		return err
	}
	if err := k.show("rollout", "status", "-n", ns, deploy, "--timeout=2m"); err != nil {
		return err
	}
	if err := d.webhooksServe(ctx); err != nil {
		return fmt.Errorf("the restarted manager: %w", err)
	}
	return nil
}

// waitPoolEmpty waits until the pool's status counts no allocated address.
func waitPoolEmpty(ctx context.Context, c client.Client, pool *ipv1.IPPool) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
			return err
		}
		if pool.Status.Allocated == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("IPPool %s still counts %d allocated addresses after a minute", pool.Name, pool.Status.Allocated)
}

// waitGone waits until o no longer exists.
func waitGone(ctx context.Context, c client.Client, o client.Object) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return client.IgnoreNotFound(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s still exists after a minute", o.GetName())
}
