package deployed

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	stablev1 "github.com/kubext/kubext/api/stable/v1"
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
