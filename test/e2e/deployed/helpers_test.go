package deployed

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	stablev1 "github.com/kubext/kubext/api/stable/v1"
	"github.com/kubext/kubext/test/lab"
)

// adminClient is the test's own client: the lab's admin, which plays the
// user of the cluster (kubext's components never use it).
func adminClient(t *testing.T) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(ipv1.AddToScheme(scheme))
	utilruntime.Must(rebootv1.AddToScheme(scheme))
	utilruntime.Must(stablev1.AddToScheme(scheme))
	cfg, err := theLab.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// podOf is the name of the install's pod of a component on a node
// ("namespace/name"), from the running ones.
func podOf(component, node string) string {
	for _, key := range deployed.Running() {
		if strings.Contains(key, "-"+component+"-") && podNode(key) == node {
			return key
		}
	}
	return ""
}

// runningPodOf waits (up to a minute) for the pod of one of the install's
// components to run on node, and returns its key: the lab starts a
// DaemonSet's pods one node after the other, and a test that starts right
// after the install may come before its node's.
func runningPodOf(g Gomega, component, node string) string {
	var key string
	g.Eventually(func() string {
		key = podOf(component, node)
		return key
	}, time.Minute, 250*time.Millisecond).ShouldNot(BeEmpty(), "no %s running on %s", component, node)
	return key
}

// podNode is the node of a running pod of the install.
func podNode(key string) string {
	ns, name, _ := strings.Cut(key, "/")
	cs, err := theLab.Clientset()
	if err != nil {
		return ""
	}
	p, err := cs.CoreV1().Pods(ns).Get(ctxBG, name, getOpts)
	if err != nil {
		return ""
	}
	return p.Spec.NodeName
}

// programStatus reads the /proc status of the program a sandbox's init
// (pid) runs: its only child.
func programStatus(pid int) (map[string]string, error) {
	// Each thread lists the children it forked.
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil {
		return nil, err
	}
	var f []string
	for _, t := range tasks {
		children, err := os.ReadFile(t)
		if err != nil {
			return nil, err
		}
		f = append(f, strings.Fields(string(children))...)
	}
	if len(f) != 1 {
		return nil, fmt.Errorf("init %d has children %q, want one", pid, f)
	}
	child, err := strconv.Atoi(f[0])
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", child))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out, nil
}

// agentsOnDuty gives every node's ip-agent something to do, so that it
// renews its heartbeat: a pool without a nodeSelector, for the test's
// duration. An agent whose node no pool selects writes nothing.
func agentsOnDuty(t *testing.T) {
	t.Helper()
	c := adminClient(t)
	pool := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "agents-on-duty"},
		Spec: ipv1.IPPoolSpec{Addresses: []string{"192.0.2.248/29"}}}
	if err := c.Create(context.Background(), pool); err != nil {
		t.Fatalf("creating pool %s: %v", pool.Name, err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), pool) })
	cs, err := theLab.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, n := range theLab.Nodes {
			l, err := cs.CoordinationV1().Leases(lab.SystemNamespace).Get(ctx, "ip-agent-"+n, metav1.GetOptions{})
			if err != nil || l.Spec.RenewTime == nil || time.Since(l.Spec.RenewTime.Time) > 5*time.Second {
				return false, nil //nolint:nilerr // not renewing yet
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the ip-agents did not renew their heartbeats once a pool selected their nodes: %v", err)
	}
}

// killNode kills a node of the lab for the rest of the test; unless the
// test revives it first, the cleanup does, and waits until the install is
// whole again, so that the next test does not meet a manager that is not
// serving yet.
func killNode(t *testing.T, node string) (revive func()) {
	t.Helper()
	if err := theLab.KillNode(ctxBG, node); err != nil {
		t.Fatalf("killing node %s: %v", node, err)
	}
	revived := false
	revive = func() {
		t.Helper()
		if revived {
			return
		}
		revived = true
		if err := theLab.ReviveNode(ctxBG, node); err != nil {
			t.Fatalf("reviving node %s: %v", node, err)
		}
		if err := theLab.WaitNodeReady(ctxBG, node, true, time.Minute); err != nil {
			t.Fatalf("node %s did not come back: %v", node, err)
		}
		waitInstallWhole(t)
	}
	t.Cleanup(revive)
	return revive
}

// waitInstallWhole waits until every pod of the install runs and passes
// its probes: the lab marks pods Ready without running their readiness
// probes, so a Service may route to a manager that does not serve yet.
func waitInstallWhole(t *testing.T) {
	t.Helper()
	want := 2 + 2*len(theLab.Nodes)
	var last string
	err := wait.PollUntilContextTimeout(ctxBG, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if running := deployed.Running(); len(running) != want {
			last = fmt.Sprintf("%d of %d pods run: %v", len(running), want, running)
			return false, nil
		}
		failed, err := deployed.Probe(ctx)
		if err != nil || len(failed) > 0 {
			last = fmt.Sprintf("probes failed: %v %v", failed, err)
			return false, nil //nolint:nilerr // retried until the deadline
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the install is not whole again: %s", last)
	}
}

// spreadManagers makes sure that killing node leaves a manager replica
// alive: the replicas are spread by a preferred anti-affinity only, so
// both may run on one node (scheduled while the others were not ready).
// It deletes the replica that does not lead; the Deployment's new one
// goes to another node.
func spreadManagers(t *testing.T, node string) {
	t.Helper()
	cs, err := theLab.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	pods, err := cs.CoreV1().Pods(lab.SystemNamespace).List(ctxBG, metav1.ListOptions{LabelSelector: "control-plane=controller-manager"})
	if err != nil {
		t.Fatal(err)
	}
	var on []string
	for _, p := range pods.Items {
		if p.Spec.NodeName == node && p.DeletionTimestamp == nil {
			on = append(on, p.Name)
		}
	}
	if len(on) < 2 || len(on) < len(pods.Items) {
		return
	}
	lease, err := cs.CoordinationV1().Leases(lab.SystemNamespace).Get(ctxBG, "manager.kubext.io", getOpts)
	if err != nil {
		t.Fatal(err)
	}
	victim := on[0]
	if lease.Spec.HolderIdentity != nil && strings.HasPrefix(*lease.Spec.HolderIdentity, victim+"_") {
		victim = on[1]
	}
	t.Logf("both manager replicas run on %s: deleting %s so that one runs elsewhere", node, victim)
	if err := cs.CoreV1().Pods(lab.SystemNamespace).Delete(ctxBG, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctxBG, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(lab.SystemNamespace).List(ctx, metav1.ListOptions{LabelSelector: "control-plane=controller-manager"})
		if err != nil {
			return false, nil //nolint:nilerr // retried until the deadline
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" && p.Spec.NodeName != node && p.DeletionTimestamp == nil {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no manager replica was scheduled off %s", node)
	}
	waitInstallWhole(t)
}
