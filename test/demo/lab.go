package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/lab/labnet"
)

// labScenario shows what the lab is: nodes scheduled by the real control
// plane, the manager holding the leader lease, a simulated reboot, and the
// network namespaces talking over the bridge.
func labScenario(ctx context.Context, d *demo) error {
	cs, err := d.lab.Clientset()
	if err != nil {
		return err
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	say("%-8s %-6s %-16s %s", "NODE", "READY", "INTERNAL-IP", "BOOT-ID")
	for _, n := range nodes.Items {
		ip := "-"
		for _, a := range n.Status.Addresses {
			if a.Type == "InternalIP" {
				ip = a.Address
			}
		}
		say("%-8s %-6t %-16s %s", n.Name, lab.NodeReady(&n), ip, n.Status.NodeInfo.BootID)
	}

	for range 50 { // the manager is ready before it has won the election
		lease, err := cs.CoordinationV1().Leases(lab.SystemNamespace).Get(ctx, "manager.kubext.io", metav1.GetOptions{})
		if err == nil && lease.Spec.HolderIdentity != nil {
			say("Leader lease %s/manager.kubext.io held by %s", lab.SystemNamespace, *lease.Spec.HolderIdentity)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n, err := countMetrics(d.metricsURL); err == nil {
		say("Manager exports %d Prometheus series at %s", n, d.metricsURL)
	}

	node := d.lab.Nodes[len(d.lab.Nodes)-1]
	before, err := d.lab.BootID(ctx, node)
	if err != nil {
		return err
	}
	say("Simulating a reboot of %s ...", node)
	start := time.Now()
	if err := d.lab.Reboot(ctx, node); err != nil {
		return err
	}
	after, err := d.lab.BootID(ctx, node)
	if err != nil {
		return err
	}
	say("%s went NotReady and came back Ready in %s; boot ID %s -> %s", node,
		time.Since(start).Round(100*time.Millisecond), short(before), short(after))

	if d.lab.Net == nil {
		return nil
	}
	n := d.lab.Net
	say("Network: bridge %s, gateway %s, client namespace %s (%s)", n.Bridge(), n.Gateway(), n.ClientNamespace(), n.ClientAddr())
	var ln net.Listener
	if err := labnet.Do(n.ClientNamespace(), func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(n.ClientAddr().String(), "7000"))
		return err
	}); err != nil {
		return err
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "the client saw you as %s\n", c.RemoteAddr())
			c.Close()
		}
	}()
	for _, node := range d.lab.Nodes {
		var reply string
		err := labnet.Do(n.NodeNamespace(node), func() error {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(n.ClientAddr().String(), "7000"), 2*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			b, err := io.ReadAll(c)
			reply = strings.TrimSpace(string(b))
			return err
		})
		if err != nil {
			return fmt.Errorf("%s cannot reach the client: %w", node, err)
		}
		say("%s (%s) -> client: %q", node, n.NodeNamespace(node), reply)
	}
	return nil
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func countMetrics(url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); line != "" && !strings.HasPrefix(line, "#") {
			n++
		}
	}
	return n, sc.Err()
}
