package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/rebootplan"
)

// rebootScenario: a reboot agent per node, a RebootGroup, reboots asked
// for with the kubectl plugin and by a node's sentinel file, the plan, and
// the rolling reboot followed live until every node is back and uncordoned.
func rebootScenario(ctx context.Context, d *demo) error {
	k := &labKubectl{ctx: ctx, d: d}
	if d.deployed != nil {
		say("The installer's reboot-agent DaemonSet runs one agent per node; its reboot signal reaches the lab, which reboots the simulated node")
	} else {
		say("Starting a reboot agent for each node (its reboot: the lab's simulated one, 2 s down)")
		for _, node := range d.lab.Nodes {
			if _, err := d.lab.StartRebootAgent(ctx, node, d.lab.RebootCommandArgs(node, 2*time.Second)...); err != nil {
				return err
			}
		}
	}
	if err := k.show("apply", "-f", filepath.Join(d.root, "config", "samples", "reboot_v1alpha1_rebootgroup.yaml")); err != nil {
		return err
	}
	say("Bad input is refused by the API server:")
	if _, err := k.kubectl("patch", "rebootgroup", "workers", "--type=merge", "-p", `{"spec":{"maxUnavailable":"0%"}}`); err != nil {
		say("%s", firstLine(err))
	} else {
		return fmt.Errorf("maxUnavailable 0%% was accepted")
	}

	first, last := d.lab.Nodes[0], d.lab.Nodes[len(d.lab.Nodes)-1]
	if err := plugin(ctx, d, "reboot", first); err != nil {
		return err
	}
	say("$ touch %s   # node %s's /run/kubext/reboot-required (relayed from /run/reboot-required): its agent asks by itself", d.lab.SentinelFile(last), last)
	if err := os.WriteFile(d.lab.SentinelFile(last), nil, 0o644); err != nil {
		return err
	}
	if _, err := k.until("node/"+last, `.metadata.annotations.reboot\.kubext\.io/needed`, "true"); err != nil {
		return err
	}
	for _, node := range d.lab.Nodes[1 : len(d.lab.Nodes)-1] {
		if _, err := k.kubectl("annotate", "node", node, rebootv1.AnnotationNeeded+"=true"); err != nil {
			return err
		}
	}
	say("(and `kubectl annotate node N %s=true` for the others)", rebootv1.AnnotationNeeded)
	if err := plugin(ctx, d, "reboot", "plan"); err != nil {
		return err
	}
	say("For the demo: no window, one node at a time, a 2-second soak")
	if err := k.show("patch", "rebootgroup", "workers", "--type=merge", "-p",
		`{"spec":{"windows":null,"maxUnavailable":1,"soakSeconds":2}}`); err != nil {
		return err
	}
	if err := plugin(ctx, d, "reboot", "plan"); err != nil {
		return err
	}

	say("Live progress (one line per change):")
	if err := d.followReboots(ctx); err != nil {
		// Say what holds the rollout before giving up.
		_ = plugin(ctx, d, "reboot", "status")
		return fmt.Errorf("the reboots did not finish within 3m: %w", err)
	}
	if err := k.show("get", "rebootgroups"); err != nil {
		return err
	}
	if err := plugin(ctx, d, "reboot", "status"); err != nil {
		return err
	}
	return k.show("get", "events", "--field-selector", "involvedObject.name="+first, "--sort-by=.lastTimestamp")
}

// plugin runs `kubectl kubext ARGS` against the lab and prints the command
// and its output. (kubectl takes no flags before a plugin's name, so the
// lab's --kubeconfig goes after.)
func plugin(ctx context.Context, d *demo, args ...string) error {
	say("$ kubectl kubext %s", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, filepath.Join(d.lab.K8sDir(), "kubectl"), append(append([]string{"kubext"}, args...), "--kubeconfig", d.lab.Kubeconfig)...)
	out, err := cmd.CombinedOutput()
	fmt.Print(indent(string(out)))
	if err != nil {
		return fmt.Errorf("kubectl kubext %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// followReboots prints the nodes' reboot states whenever one changes,
// until every node asked has been rebooted and released.
func (d *demo) followReboots(ctx context.Context) error {
	cs, err := d.lab.Clientset()
	if err != nil {
		return err
	}
	start := time.Now()
	last := ""
	maxDown := 0
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // the next poll retries
		}
		slices.SortFunc(nodes.Items, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
		var states []string
		done, down := 0, 0
		for i := range nodes.Items {
			s := rebootState(&nodes.Items[i])
			if s == "done" {
				done++
			}
			if rebootplan.NodeFrom(&nodes.Items[i]).Unavailable() {
				down++
			}
			states = append(states, fmt.Sprintf("%s %-9s", nodes.Items[i].Name, s))
		}
		maxDown = max(maxDown, down)
		if line := strings.Join(states, " | "); line != last {
			say("%6.1fs  %s", time.Since(start).Seconds(), line)
			last = line
		}
		if done == len(nodes.Items) {
			say("Every node rebooted once and uncordoned in %s; never more than %d unavailable at once (maxUnavailable 1)",
				time.Since(start).Round(100*time.Millisecond), maxDown)
			return true, nil
		}
		return false, nil
	})
}

// rebootState names where a node is in the reboot protocol.
func rebootState(n *corev1.Node) string {
	a := n.Annotations
	_, approved := a[rebootv1.AnnotationInProgress]
	_, ordered := a[rebootv1.AnnotationNow]
	ready := rebootplan.NodeFrom(n).Ready == corev1.ConditionTrue
	switch {
	case ordered && a[rebootv1.AnnotationBootID] == n.Status.NodeInfo.BootID && ready:
		return "ordered"
	case ordered && !ready:
		return "down"
	case ordered:
		return "soaking"
	case approved:
		return "draining"
	case a[rebootv1.AnnotationNeeded] == "true":
		return "waiting"
	case a[rebootv1.AnnotationRebootedAt] != "":
		return "done"
	}
	return "-"
}

func firstLine(err error) string {
	s := err.Error()
	if i := strings.Index(s, "\n"); i >= 0 {
		s = s[i+1:]
	}
	if i := strings.Index(s, "\n"); i >= 0 {
		s = s[:i]
	}
	return s
}
