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
