package lab

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/kubext/kubext/test/lab/labnet"
)

// Deployed mode: kubext installed into the lab from a rendered manifest,
// the way a user installs it, and its own pods run by the lab. kwok runs no
// containers, so the lab plays the kubelet for kubext's pods (the pods of
// the install namespace labelled app.kubernetes.io/name=kubext: the manager
// replicas, the ip-agents, the reboot-agents): each container of such a pod
// runs as a process with exactly the command, args and environment of the
// applied pod spec (env values, fieldRefs, ConfigMap and Secret refs,
// $(VAR) expansion), its volumes at their mountPaths, its securityContext's
// user, capabilities, no_new_privs and read-only root, and the identity of
// the pod's ServiceAccount, presented the in-cluster way.
//
// How a container becomes a process:
//   - command[0] names the binary: /manager runs bin/manager; anything but
//     kubext's own binaries is refused.
//   - `lab sandbox` (test/lab/sandbox.go) is the pod's init, in new mount
//     and PID namespaces: it builds a root file system holding only the
//     binary at its path, /proc, /sys, a few devices, the CA bundle and the
//     pod's volumes, and execs the program in it.
//   - Network: a hostNetwork pod runs in its node's namespace; any other
//     pod gets a system pod namespace with its pod IP plugged into the root
//     namespace ([labnet.Network.AddSystemPod]), so the API server reaches it
//     at its endpoint IP (webhooks, with --enable-aggregator-routing), and,
//     for the pod subnet, behind its node ([labnet.Network.ConnectSystemPod]),
//     so the manager reaches the Redis members by pod IP.
//   - Identity: a token of the pod's ServiceAccount from the TokenRequest
//     API bound to the Pod, so its claims carry the pod's node, as a
//     kubelet-issued token does; it reaches the program through the pod's
//     own kube-api-access projected volume at
//     /var/run/secrets/kubernetes.io/serviceaccount, with
//     KUBERNETES_SERVICE_HOST/PORT set as a kubelet sets them. The address
//     is the lab's: the API server through a forwarder on the bridge
//     address (the lab has no kube-proxy for the kubernetes Service).
//   - Host paths: a node's /run/kubext is its SentinelDir, which holds its
//     reboot sentinel, and its /var/run the lab's directory of that node
//     (NodeDir); other host paths are refused. The node's
//     /proc/sys/kernel/random/boot_id is the Node's simulated boot ID.
//   - Lifecycle: a pod deleted, replaced or no longer Running has its
//     processes stopped (SIGTERM, then SIGKILL after its grace period); a
//     container that exits is restarted (restartPolicy Always); KillNode
//     kills a node's pods' processes as a crash would, and none run there
//     until ReviveNode; a hostPID pod's reboot signal to its init reboots
//     the simulated node (all its pods' processes die and start again).

// Binaries the lab runs for container commands: kubext's own, and nothing
// else.
var deployedBinaries = []string{"manager", "ip-agent", "reboot-agent", "pulsar-consumer"}

// imageUser is the image's non-root user (USER in the image config), used
// for containers that ask for runAsNonRoot without a runAsUser.
const imageUser = 65532

// InstallOptions say what to install in [Lab.Install].
type InstallOptions struct {
	// Manifest is a rendered install manifest (e.g. dist/install.yaml).
	// Empty: the lab renders config/default with `kubectl kustomize`.
	Manifest string
	// Namespace is where kubext's pods run (default kubext-system).
	Namespace string
}

// Deployed is kubext installed into the lab, with its pods running as
// processes; see Install.
type Deployed struct {
	lab *Lab
	// Namespace is the install's namespace.
	Namespace string
	// Manifest is the file that was applied.
	Manifest string

	cancel context.CancelFunc
	done   chan struct{}
	kick   chan struct{}
	lister func() ([]*corev1.Pod, error)

	mu   sync.Mutex
	pods map[types.UID]*podRun
	// down are nodes whose pods run nothing: killed or rebooting.
	down map[string]bool
	errs map[string]string
}

// podRun is what the lab runs for one pod.
type podRun struct {
	key, node, netns, dir string
	uid                   types.UID
	grace                 time.Duration
	system                bool // has a system pod namespace
	fwd                   *labnet.Forwarder
	containers            []*containerRun
	rebootRequest         string
	// tokens are the pod's bound service-account tokens, refreshed as a
	// kubelet refreshes them.
	tokens []*boundToken
	// gone is set (under Deployed.mu) once the pod's processes are being
	// torn down: nothing may restart them.
	gone bool
}

type containerRun struct {
	name, spec string
	proc       *Process
	restarts   int
	started    time.Time
}

// Install applies kubext's install manifest to the lab with server-side
// apply, as a user does, and starts running kubext's own pods (see the
// deployed-mode notes above). It needs the lab network (root) and bin/
// holding lab, manager, ip-agent and reboot-agent. Stop (or Down) stops the
// pods' processes; the installed objects stay.
func (l *Lab) Install(ctx context.Context, opts InstallOptions) (*Deployed, error) {
	if l.Net == nil {
		return nil, errors.New("lab: deployed mode needs the lab network (root)")
	}
	if opts.Namespace == "" {
		opts.Namespace = SystemNamespace
	}
	manifest := opts.Manifest
	if manifest == "" {
		root, err := RepoRoot()
		if err != nil {
			return nil, err
		}
		out, err := exec.CommandContext(ctx, filepath.Join(l.K8sDir(), "kubectl"), "kustomize", filepath.Join(root, "config", "default")).Output()
		if err != nil {
			return nil, fmt.Errorf("kubectl kustomize config/default: %w", err)
		}
		manifest = filepath.Join(l.Dir, "install.yaml")
		if err := os.WriteFile(manifest, out, 0o644); err != nil {
			return nil, err
		}
	}
	// The namespaced objects can reach the API server before it has seen
	// the Namespace the same apply created (its lifecycle admission reads a
	// cache): "namespaces ... not found". A user applies again; so does the
	// lab, a few times at most.
	for attempt := 1; ; attempt++ {
		_, err := l.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-f", manifest)
		if err == nil {
			break
		}
		if attempt == 5 || !strings.Contains(err.Error(), "namespaces \"") || !strings.Contains(err.Error(), "not found") {
			return nil, err
		}
		l.log("Applying %s again: %s", manifest, "its namespace was not known to the API server yet")
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	l.log("Installed kubext from %s (server-side apply)", manifest)
	// As a user would before creating kubext's objects: a client that
	// looked at the API group while one of its CRDs was not served yet
	// ("no matches for kind IP") keeps that view.
	if _, err := l.Kubectl(ctx, "wait", "--for", "condition=Established", "--timeout", "60s", "crd", "--all"); err != nil {
		return nil, fmt.Errorf("waiting for kubext's CRDs to be served: %w", err)
	}
	if err := l.waitAdmissionKnowsIPs(ctx); err != nil {
		return nil, err
	}
	if err := l.setWitnessAllowFrom(ctx, opts.Namespace); err != nil {
		return nil, err
	}
	d, err := l.runDeployed(ctx, opts.Namespace)
	if err != nil {
		return nil, err
	}
	d.Manifest = manifest
	return d, nil
}

// waitAdmissionKnowsIPs waits until the API server's admission can take an
// IP: the install's MutatingAdmissionPolicy (ip-finalizer) needs the kind's
// schema, which the API server reads from its own OpenAPI every 5 s, so a
// create soon after the CRD is established is refused with 503 "Resource
// kind ... not found. There can be a delay ...". A user retries; the lab
// waits, with a server-side dry run (any other answer, such as the
// webhook's not serving yet, is past that point).
func (l *Lab) waitAdmissionKnowsIPs(ctx context.Context) error {
	cfg, err := l.RESTConfig()
	if err != nil {
		return err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ips := dc.Resource(schema.GroupVersionResource{Group: "ip.kubext.io", Version: "v1alpha1", Resource: "ips"})
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ip.kubext.io/v1alpha1", "kind": "IP",
		"metadata": map[string]any{"name": "lab-admission-check"},
		"spec":     map[string]any{"address": "192.0.2.1"},
	}}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, last = ips.Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return !apierrors.IsServiceUnavailable(last), nil
	})
	if err != nil {
		return fmt.Errorf("the API server's admission does not take IPs a minute after the install: %v", last)
	}
	return nil
}

// setWitnessAllowFrom adapts the ip-agent ConfigMap as config.yaml asks a
// user to: the witness port takes datagrams from the lab's node network
// only (the lab's pods are outside it).
func (l *Lab) setWitnessAllowFrom(ctx context.Context, namespace string) error {
	cs, err := l.Clientset()
	if err != nil {
		return err
	}
	cms, err := cs.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	patch := fmt.Appendf(nil, `{"data":{"witness-allow-from":%q}}`, l.Net.Subnet.String())
	for _, cm := range cms.Items {
		if _, isAgents := cm.Data["exclude-snat"]; !isAgents {
			continue
		}
		if _, err := cs.CoreV1().ConfigMaps(namespace).Patch(ctx, cm.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "lab"}); err != nil {
			return err
		}
		l.log("Set witness-allow-from=%s in ConfigMap %s/%s", l.Net.Subnet, namespace, cm.Name)
	}
	return nil
}

// runDeployed starts the loop that runs the install's pods.
func (l *Lab) runDeployed(ctx context.Context, namespace string) (*Deployed, error) {
	for _, b := range append([]string{"lab"}, deployedBinaries[:3]...) {
		if _, err := os.Stat(filepath.Join(l.BinDir, b)); err != nil {
			return nil, fmt.Errorf("lab: %s is missing: run `make build` and build bin/lab first", filepath.Join(l.BinDir, b))
		}
	}
	cs, err := l.Clientset()
	if err != nil {
		return nil, err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "app.kubernetes.io/name=kubext" }))
	informer := factory.Core().V1().Pods()
	d := &Deployed{
		lab: l, Namespace: namespace,
		done: make(chan struct{}), kick: make(chan struct{}, 1),
		pods: map[types.UID]*podRun{}, down: map[string]bool{}, errs: map[string]string{},
		lister: func() ([]*corev1.Pod, error) { return informer.Lister().List(labels.Everything()) },
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { d.trigger() },
		UpdateFunc: func(_, _ any) { d.trigger() },
		DeleteFunc: func(any) { d.trigger() },
	}); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cancel = cancel
	factory.Start(runCtx.Done())
	syncCtx, syncCancel := context.WithTimeout(ctx, 30*time.Second)
	defer syncCancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), informer.Informer().HasSynced) {
		cancel()
		factory.Shutdown()
		return nil, errors.New("lab: the deployed pods' cache did not sync")
	}
	l.mu.Lock()
	if l.deployed != nil {
		l.mu.Unlock()
		cancel()
		factory.Shutdown()
		return nil, errors.New("lab: kubext's pods already run in this lab")
	}
	l.deployed = d
	l.mu.Unlock()
	go func() {
		defer close(d.done)
		defer d.stopAll()
		defer factory.Shutdown()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			d.reconcile(runCtx)
			select {
			case <-runCtx.Done():
				return
			case <-d.kick:
			case <-tick.C:
			}
		}
	}()
	return d, nil
}

func (d *Deployed) trigger() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Stop stops every process of the install's pods (the installed objects
// stay). It is idempotent.
func (d *Deployed) Stop() {
	d.cancel()
	<-d.done
	l := d.lab
	l.mu.Lock()
	if l.deployed == d {
		l.deployed = nil
	}
	l.mu.Unlock()
}

// Errors are the pods the lab could not run, by "namespace/name", with why
// (e.g. a container command that is not a kubext binary).
func (d *Deployed) Errors() map[string]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]string, len(d.errs))
	for k, v := range d.errs {
		out[k] = v
	}
	return out
}

// Running lists the pods ("namespace/name") whose containers all run now.
func (d *Deployed) Running() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, r := range d.pods {
		ok := true
		for _, c := range r.containers {
			ok = ok && c.proc != nil && c.proc.Running()
		}
		if ok {
			out = append(out, r.key)
		}
	}
	slices.Sort(out)
	return out
}

// Process is the running process of a container of a pod ("namespace/name"),
// or nil.
func (d *Deployed) Process(pod, container string) *Process {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range d.pods {
		if r.key != pod {
			continue
		}
		for _, c := range r.containers {
			if c.name == container && c.proc != nil && c.proc.Running() {
				return c.proc
			}
		}
	}
	return nil
}

// nodeDown stops the node's pods' processes at once (SIGKILL, as a crash)
// and runs none there until nodeUp.
func (d *Deployed) nodeDown(node string) {
	d.mu.Lock()
	d.down[node] = true
	var runs []*podRun
	for uid, r := range d.pods {
		if r.node == node {
			r.gone = true
			runs = append(runs, r)
			delete(d.pods, uid)
		}
	}
	d.mu.Unlock()
	for _, r := range runs {
		d.teardown(r, 0)
	}
}

func (d *Deployed) nodeUp(node string) {
	d.mu.Lock()
	delete(d.down, node)
	d.mu.Unlock()
	d.trigger()
}

// reconcile makes the processes match the pods; it runs on the loop
// goroutine only.
func (d *Deployed) reconcile(ctx context.Context) {
	pods, err := d.lister()
	if err != nil {
		return
	}
	want := map[types.UID]*corev1.Pod{}
	d.mu.Lock()
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" &&
			slices.Contains(d.lab.Nodes, p.Spec.NodeName) && !d.down[p.Spec.NodeName] {
			want[p.UID] = p
		}
	}
	var stale []*podRun
	for uid, r := range d.pods {
		if want[uid] == nil {
			r.gone = true
			stale = append(stale, r)
			delete(d.pods, uid)
		}
	}
	d.mu.Unlock()
	for _, r := range stale {
		d.lab.log("Deployed: stopping the processes of pod %s", r.key)
		d.teardown(r, r.grace)
	}
	for uid, p := range want {
		if ctx.Err() != nil {
			return
		}
		d.mu.Lock()
		r := d.pods[uid]
		d.mu.Unlock()
		key := p.Namespace + "/" + p.Name
		if r == nil {
			r, err = d.start(ctx, p)
			if err != nil {
				d.report(key, err)
				continue
			}
			d.mu.Lock()
			down := d.down[r.node]
			if !down {
				delete(d.errs, key)
				d.pods[uid] = r
			}
			d.mu.Unlock()
			if down { // the node died while the pod was starting
				d.teardown(r, 0)
			}
			continue
		}
		d.restartExited(r)
		d.refreshTokens(ctx, r)
		if r.rebootRequest != "" {
			if _, err := os.Stat(r.rebootRequest); err == nil {
				_ = os.Remove(r.rebootRequest)
				go d.rebootNode(context.WithoutCancel(ctx), r.node)
			}
		}
	}
}

func (d *Deployed) report(key string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.errs[key] != err.Error() {
		d.errs[key] = err.Error()
		d.lab.log("Deployed: pod %s: %v", key, err)
	}
}

// restartExited restarts containers whose program exited, as a kubelet
// does for restartPolicy Always (after a second, so a crash loop is
// visible in the log rather than a busy loop).
func (d *Deployed) restartExited(r *podRun) {
	// Held while starting, so that a teardown (which marks the pod gone
	// under the lock first) stops what is started here.
	d.mu.Lock()
	defer d.mu.Unlock()
	if r.gone {
		return
	}
	for _, c := range r.containers {
		if c.proc.Running() || time.Since(c.started) < time.Second {
			continue
		}
		c.restarts++
		d.lab.log("Deployed: container %s of pod %s exited; restart %d (see %s)", c.name, r.key, c.restarts, c.proc.Log)
		p, err := d.startContainer(r, c.name, c.spec)
		if err != nil {
			d.lab.log("Deployed: pod %s: restarting %s: %v", r.key, c.name, err)
			continue
		}
		c.proc, c.started = p, time.Now()
	}
}

// rebootNode is a reboot of the node its reboot-agent asked its init for
// (RebootFor stops the node's pods' processes and starts them again).
func (d *Deployed) rebootNode(ctx context.Context, node string) {
	d.lab.log("Deployed: node %s reboots (its reboot-agent signalled its init)", node)
	if err := d.lab.RebootFor(ctx, node, 0); err != nil {
		d.lab.log("Deployed: rebooting %s: %v", node, err)
	}
}

// stopAll stops every pod's processes when the loop ends.
func (d *Deployed) stopAll() {
	d.mu.Lock()
	runs := make([]*podRun, 0, len(d.pods))
	for uid, r := range d.pods {
		r.gone = true
		runs = append(runs, r)
		delete(d.pods, uid)
	}
	d.mu.Unlock()
	for _, r := range runs {
		d.teardown(r, r.grace)
	}
}

// teardown stops a pod's processes (grace 0: SIGKILL at once) and removes
// its network namespace and files.
func (d *Deployed) teardown(r *podRun, grace time.Duration) {
	for _, c := range r.containers {
		if c.proc == nil {
			continue
		}
		if grace == 0 {
			c.proc.Kill()
		} else {
			c.proc.Stop(grace)
		}
	}
	if r.fwd != nil {
		_ = r.fwd.Close()
	}
	if r.system {
		if err := d.lab.Net.RemoveSystemPod(r.key); err != nil {
			d.lab.log("Deployed: pod %s: %v", r.key, err)
		}
	}
	_ = os.RemoveAll(r.dir)
}

// start runs a pod's containers.
func (d *Deployed) start(ctx context.Context, pod *corev1.Pod) (r *podRun, err error) {
	l := d.lab
	if len(pod.Spec.InitContainers) > 0 {
		return nil, errors.New("init containers are not supported by the lab")
	}
	r = &podRun{
		key: pod.Namespace + "/" + pod.Name, node: pod.Spec.NodeName, uid: pod.UID,
		dir:   filepath.Join(l.Dir, "pods", pod.Namespace+"_"+pod.Name),
		grace: 30 * time.Second,
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		r.grace = time.Duration(*g) * time.Second
	}
	defer func() {
		if err != nil {
			d.teardown(r, 0)
		}
	}()
	_ = os.RemoveAll(r.dir)
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return r, err
	}
	// Prepare everything that can fail before a process starts.
	cs, err := l.Clientset()
	if err != nil {
		return r, err
	}
	var specs []*SandboxSpec
	for i := range pod.Spec.Containers {
		spec, err := d.containerSpec(ctx, cs, pod, &pod.Spec.Containers[i], r)
		if err != nil {
			return r, fmt.Errorf("container %s: %w", pod.Spec.Containers[i].Name, err)
		}
		specs = append(specs, spec)
	}
	if pod.Spec.HostNetwork {
		r.netns = l.Net.NodeNamespace(r.node)
	} else {
		addr, err := netip.ParseAddr(pod.Status.PodIP)
		if err != nil {
			return r, fmt.Errorf("pod IP %q: %w", pod.Status.PodIP, err)
		}
		if r.netns, err = l.Net.AddSystemPod(r.key, addr); err != nil {
			return r, err
		}
		r.system = true
		// Behind its node on the pod network too, as in a cluster: the
		// manager dials the Redis members by pod IP.
		if l.Net.NodeNamespace(r.node) != "" && l.Net.PodSubnet.IsValid() {
			if err := l.Net.ConnectSystemPod(r.key, r.node, addr); err != nil {
				return r, err
			}
		}
	}
	host, port, err := d.apiServerFor(r)
	if err != nil {
		return r, err
	}
	for i, spec := range specs {
		spec.Env = append([]string{"KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port,
			"KUBERNETES_SERVICE_PORT_HTTPS=" + port}, spec.Env...)
		name := pod.Spec.Containers[i].Name
		path := filepath.Join(r.dir, name+".json")
		data, err := json.MarshalIndent(spec, "", "  ")
		if err != nil {
			return r, err
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return r, err
		}
		c := &containerRun{name: name, spec: path}
		r.containers = append(r.containers, c)
		if c.proc, err = d.startContainer(r, name, path); err != nil {
			return r, err
		}
		c.started = time.Now()
	}
	l.log("Deployed: pod %s runs on %s (%d containers)", r.key, r.node, len(r.containers))
	return r, nil
}

// apiServerFor is where the pod's programs reach the API server: for a
// hostNetwork pod the lab's forwarder on the bridge; for a system pod a
// forwarder on the bridge address that accepts only the pod's veth.
func (d *Deployed) apiServerFor(r *podRun) (host, port string, err error) {
	l := d.lab
	if !r.system {
		cfg, err := clientcmd.LoadFromFile(l.AgentKubeconfig)
		if err != nil {
			return "", "", err
		}
		for _, c := range cfg.Clusters {
			h, p, err := net.SplitHostPort(strings.TrimPrefix(c.Server, "https://"))
			return h, p, err
		}
		return "", "", errors.New("the agent kubeconfig names no cluster")
	}
	target, err := l.apiServerAddr()
	if err != nil {
		return "", "", err
	}
	r.fwd, err = labnet.Forward(net.JoinHostPort(l.Net.Gateway().String(), "0"), target, r.netns)
	if err != nil {
		return "", "", err
	}
	h, p, err := net.SplitHostPort(r.fwd.Addr())
	return h, p, err
}

// startContainer starts `lab sandbox` for a container: in new mount and PID
// namespaces, inside the pod's network namespace.
func (d *Deployed) startContainer(r *podRun, name, spec string) (*Process, error) {
	l := d.lab
	cmd := labnet.Command(context.Background(), r.netns, filepath.Join(l.BinDir, "lab"), "sandbox", spec)
	cmd.Env = []string{}
	p, err := l.run("pod-"+strings.ReplaceAll(r.key, "/", "-")+"-"+name, r.netns, cmd,
		&syscall.SysProcAttr{Setpgid: true, Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID})
	if err != nil {
		return nil, err
	}
	p.Node = r.node
	return p, nil
}

// containerSpec turns a container of the pod into a SandboxSpec: binary,
// command, args and env resolved as a kubelet does, volumes, security
// context and the service-account token.
func (d *Deployed) containerSpec(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, c *corev1.Container, r *podRun) (*SandboxSpec, error) {
	l := d.lab
	if len(c.Command) == 0 {
		return nil, errors.New("no command: the lab runs only containers whose command names a kubext binary")
	}
	base := filepath.Base(c.Command[0])
	if c.Command[0] != "/"+base || !slices.Contains(deployedBinaries, base) {
		return nil, fmt.Errorf("command %q is not one of kubext's binaries (/%s)", c.Command[0], strings.Join(deployedBinaries, ", /"))
	}
	if err := checkStatic(filepath.Join(l.BinDir, base)); err != nil {
		return nil, err
	}
	sc := c.SecurityContext
	if sc != nil && sc.Privileged != nil && *sc.Privileged {
		return nil, errors.New("privileged containers are not run by the lab")
	}
	env, err := resolveEnv(ctx, cs, pod, c)
	if err != nil {
		return nil, err
	}
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	args := make([]string, 0, len(c.Command)-1+len(c.Args))
	for _, a := range append(slices.Clone(c.Command[1:]), c.Args...) {
		args = append(args, expandVars(a, vars))
	}
	spec := &SandboxSpec{
		Root:    filepath.Join(r.dir, c.Name+".root"),
		Binary:  filepath.Join(l.BinDir, base),
		Command: c.Command[0],
		Args:    args,
		Env: append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOSTNAME=" + pod.Name},
			env...),
	}
	if err := os.MkdirAll(spec.Root, 0o755); err != nil {
		return nil, err
	}
	spec.UID, spec.GID = 0, 0
	psc := pod.Spec.SecurityContext
	nonRoot := (psc != nil && ptr.Deref(psc.RunAsNonRoot, false)) || (sc != nil && ptr.Deref(sc.RunAsNonRoot, false))
	if nonRoot {
		spec.UID, spec.GID = imageUser, imageUser
	}
	if psc != nil && psc.RunAsUser != nil {
		spec.UID = int(*psc.RunAsUser)
	}
	if sc != nil && sc.RunAsUser != nil {
		spec.UID = int(*sc.RunAsUser)
	}
	if nonRoot && spec.UID == 0 {
		return nil, errors.New("runAsNonRoot with runAsUser 0")
	}
	if psc != nil && psc.RunAsGroup != nil {
		spec.GID = int(*psc.RunAsGroup)
	}
	if sc != nil && sc.RunAsGroup != nil {
		spec.GID = int(*sc.RunAsGroup)
	}
	// The container runtime's default capabilities, unless dropped.
	caps := []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
		"NET_BIND_SERVICE", "SYS_CHROOT", "MKNOD", "AUDIT_WRITE", "SETFCAP"}
	if sc != nil && sc.Capabilities != nil {
		for _, drop := range sc.Capabilities.Drop {
			if drop == "ALL" {
				caps = nil
				break
			}
			caps = slices.DeleteFunc(caps, func(c string) bool { return c == string(drop) })
		}
		for _, add := range sc.Capabilities.Add {
			caps = append(caps, string(add))
		}
	}
	spec.Capabilities = caps
	spec.NoNewPrivs = sc != nil && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
	spec.ReadOnlyRoot = sc != nil && ptr.Deref(sc.ReadOnlyRootFilesystem, false)
	if pod.Spec.HostPID {
		r.rebootRequest = filepath.Join(r.dir, "reboot-request")
		spec.RebootRequest = r.rebootRequest
	}
	// The node's kernel: its boot ID is the simulated node's.
	bootID, err := l.writeBootIDFile(ctx, r.node)
	if err != nil {
		return nil, err
	}
	spec.Mounts = append(spec.Mounts, SandboxMount{Source: bootID, Target: "/proc/sys/kernel/random/boot_id", ReadOnly: true})
	for _, m := range c.VolumeMounts {
		src, err := d.volume(ctx, cs, pod, m.Name, r)
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", m.Name, err)
		}
		if m.SubPath != "" {
			src = filepath.Join(src, m.SubPath)
		}
		spec.Mounts = append(spec.Mounts, SandboxMount{Source: src, Target: m.MountPath, ReadOnly: m.ReadOnly})
	}
	return spec, nil
}

// checkStatic refuses a binary that needs a dynamic loader: the image holds
// only static binaries, and so does the sandbox's root.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; the image's binaries are static: build with CGO_ENABLED=0 make build", path)
		}
	}
	return nil
}

// resolveEnv is the container's environment as a kubelet computes it:
// envFrom, then env in order, values with $(VAR) expanded.
func resolveEnv(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, c *corev1.Container) ([]string, error) {
	var order []string
	vars := map[string]string{}
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	for _, from := range c.EnvFrom {
		data, err := refData(ctx, cs, pod.Namespace, from.ConfigMapRef, from.SecretRef)
		if err != nil {
			return nil, err
		}
		for k, v := range data {
			set(from.Prefix+k, v)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expandVars(e.Value, vars))
			continue
		}
		v, err := envValueFrom(ctx, cs, pod, e.ValueFrom)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		set(e.Name, v)
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vars[k])
	}
	return out, nil
}

func envValueFrom(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, from *corev1.EnvVarSource) (string, error) {
	switch {
	case from.FieldRef != nil:
		return podField(pod, from.FieldRef.FieldPath)
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		cm, err := cs.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		v, ok := cm.Data[ref.Key]
		if !ok && !ptr.Deref(ref.Optional, false) {
			return "", fmt.Errorf("the ConfigMap %s has no key %s", ref.Name, ref.Key)
		}
		return v, nil
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		s, err := cs.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		v, ok := s.Data[ref.Key]
		if !ok && !ptr.Deref(ref.Optional, false) {
			return "", fmt.Errorf("the Secret %s has no key %s", ref.Name, ref.Key)
		}
		return string(v), nil
	}
	return "", errors.New("resourceFieldRef and fileKeyRef are not supported by the lab")
}

// refData reads a ConfigMap's or a Secret's data.
func refData(ctx context.Context, cs kubernetes.Interface, ns string, cmRef *corev1.ConfigMapEnvSource, sRef *corev1.SecretEnvSource) (map[string]string, error) {
	out := map[string]string{}
	switch {
	case cmRef != nil:
		cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, cmRef.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		for k, v := range cm.Data {
			out[k] = v
		}
	case sRef != nil:
		s, err := cs.CoreV1().Secrets(ns).Get(ctx, sRef.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		for k, v := range s.Data {
			out[k] = string(v)
		}
	}
	return out, nil
}

// podField is a fieldRef's value.
func podField(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP":
		return pod.Status.PodIP, nil
	case "status.hostIP":
		return pod.Status.HostIP, nil
	}
	if k, ok := strings.CutPrefix(path, "metadata.labels['"); ok {
		return pod.Labels[strings.TrimSuffix(k, "']")], nil
	}
	if k, ok := strings.CutPrefix(path, "metadata.annotations['"); ok {
		return pod.Annotations[strings.TrimSuffix(k, "']")], nil
	}
	return "", fmt.Errorf("fieldRef %s is not supported by the lab", path)
}

// expandVars expands $(VAR) with vars as Kubernetes does: an unknown
// variable stays as written, and $$ is a literal $.
func expandVars(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// volume materialises one of the pod's volumes for a mount and returns
// the host path to bind.
func (d *Deployed) volume(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, name string, r *podRun) (string, error) {
	var vol *corev1.Volume
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == name {
			vol = &pod.Spec.Volumes[i]
		}
	}
	if vol == nil {
		return "", errors.New("no such volume in the pod")
	}
	dir := filepath.Join(r.dir, "volumes", name)
	files := map[string][]byte{}
	switch {
	case vol.HostPath != nil:
		return d.lab.hostPath(r.node, vol.HostPath.Path)
	case vol.EmptyDir != nil:
		// World-writable as the kubelet makes it (0777, not reduced by the
		// umask): a non-root container writes there.
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return "", err
		}
		return dir, os.Chmod(dir, 0o777)
	case vol.ConfigMap != nil:
		data, err := refData(ctx, cs, pod.Namespace, &corev1.ConfigMapEnvSource{LocalObjectReference: vol.ConfigMap.LocalObjectReference}, nil)
		if err != nil {
			return "", err
		}
		addItems(files, data, vol.ConfigMap.Items)
	case vol.Secret != nil:
		data, err := refData(ctx, cs, pod.Namespace, nil, &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: vol.Secret.SecretName}})
		if err != nil {
			return "", err
		}
		addItems(files, data, vol.Secret.Items)
	case vol.Projected != nil:
		for _, src := range vol.Projected.Sources {
			if err := d.projected(ctx, cs, pod, src, files, dir, r); err != nil {
				return "", err
			}
		}
	default:
		return "", errors.New("only hostPath, emptyDir, configMap, secret and projected volumes are supported by the lab")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for p, data := range files {
		path := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return "", err
		}
		// World-readable as a kubelet's defaultMode 0644: the program may
		// run as the image's non-root user.
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}

func addItems(files map[string][]byte, data map[string]string, items []corev1.KeyToPath) {
	if len(items) == 0 {
		for k, v := range data {
			files[k] = []byte(v)
		}
		return
	}
	for _, it := range items {
		if v, ok := data[it.Key]; ok {
			files[it.Path] = []byte(v)
		}
	}
}

// projected fills one source of a projected volume: the kube-api-access
// volume the ServiceAccount admission adds to every pod is a bound token,
// the kube-root-ca.crt ConfigMap and the namespace.
func (d *Deployed) projected(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, src corev1.VolumeProjection, files map[string][]byte, dir string, r *podRun) error {
	switch {
	case src.ServiceAccountToken != nil:
		t := src.ServiceAccountToken
		bt := &boundToken{path: filepath.Join(dir, t.Path), namespace: pod.Namespace, account: pod.Spec.ServiceAccountName}
		bt.req = authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To(ptr.Deref(t.ExpirationSeconds, 3607)),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}
		if t.Audience != "" {
			bt.req.Audiences = []string{t.Audience}
		}
		tok, err := bt.request(ctx, cs)
		if err != nil {
			return err
		}
		files[t.Path] = tok
		r.tokens = append(r.tokens, bt)
	case src.ConfigMap != nil:
		data, err := refData(ctx, cs, pod.Namespace, &corev1.ConfigMapEnvSource{LocalObjectReference: src.ConfigMap.LocalObjectReference}, nil)
		if err != nil {
			return err
		}
		addItems(files, data, src.ConfigMap.Items)
	case src.Secret != nil:
		data, err := refData(ctx, cs, pod.Namespace, nil, &corev1.SecretEnvSource{LocalObjectReference: src.Secret.LocalObjectReference})
		if err != nil {
			return err
		}
		addItems(files, data, src.Secret.Items)
	case src.DownwardAPI != nil:
		for _, it := range src.DownwardAPI.Items {
			if it.FieldRef == nil {
				return errors.New("downwardAPI resourceFieldRef is not supported by the lab")
			}
			v, err := podField(pod, it.FieldRef.FieldPath)
			if err != nil {
				return err
			}
			files[it.Path] = []byte(v)
		}
	default:
		return errors.New("unsupported projected volume source")
	}
	return nil
}

// hostPath maps a node's host path to the lab: /run/kubext is the node's
// sentinel directory, /var/run the node's directory. Other paths are
// refused rather than exposing the machine's own.
func (l *Lab) hostPath(node, path string) (string, error) {
	switch filepath.Clean(path) {
	case "/run/kubext", "/var/run/kubext":
		dir := l.SentinelDir(node)
		return dir, os.MkdirAll(dir, 0o755)
	case "/var/run", "/run":
		dir := l.NodeDir(node)
		return dir, os.MkdirAll(dir, 0o755)
	}
	return "", fmt.Errorf("hostPath %s is not simulated by the lab (only /var/run is)", path)
}

// writeBootIDFile writes the node's boot ID (from its status) where its
// pods see /proc/sys/kernel/random/boot_id, and returns that file.
func (l *Lab) writeBootIDFile(ctx context.Context, node string) (string, error) {
	id, err := l.BootID(ctx, node)
	if err != nil {
		return "", err
	}
	return l.bootIDFile(node), l.setBootIDFile(node, id)
}

func (l *Lab) bootIDFile(node string) string { return filepath.Join(l.NodeDir(node), "boot_id") }

func (l *Lab) setBootIDFile(node, id string) error {
	if err := os.MkdirAll(l.NodeDir(node), 0o755); err != nil {
		return err
	}
	// Replace, not rewrite: a bind mount of the old file keeps the old
	// inode, as a running kernel would keep its boot ID until it reboots
	// (the processes that see it are restarted by the reboot).
	tmp := l.bootIDFile(node) + "." + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, l.bootIDFile(node))
}

// Probe runs the httpGet liveness and readiness probes of every container
// of the install's running pods once, as a kubelet would (from the node for
// a hostNetwork pod, at the pod's IP otherwise), and returns what failed by
// "namespace/name/container liveness|readiness". A probe whose port is not
// the one the program listens on (a flag and a manifest that disagree)
// fails here. The lab does not act on probes by itself.
func (d *Deployed) Probe(ctx context.Context) (map[string]error, error) {
	pods, err := d.lister()
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	runs := map[types.UID]*podRun{}
	for uid, r := range d.pods {
		runs[uid] = r
	}
	d.mu.Unlock()
	failed := map[string]error{}
	for _, p := range pods {
		r := runs[p.UID]
		if r == nil {
			continue
		}
		for _, c := range p.Spec.Containers {
			for kind, probe := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
				if probe == nil || probe.HTTPGet == nil {
					continue
				}
				if err := d.probeHTTP(ctx, p, &c, r, probe.HTTPGet); err != nil {
					failed[r.key+"/"+c.Name+" "+kind] = err
				}
			}
		}
	}
	return failed, nil
}

func (d *Deployed) probeHTTP(ctx context.Context, pod *corev1.Pod, c *corev1.Container, r *podRun, get *corev1.HTTPGetAction) error {
	host := get.Host
	if host == "" {
		host = pod.Status.PodIP
	}
	port := get.Port.IntValue()
	if get.Port.StrVal != "" {
		for _, p := range c.Ports {
			if p.Name == get.Port.StrVal {
				port = int(p.ContainerPort)
			}
		}
	}
	if port == 0 {
		return fmt.Errorf("no port %q in the container", get.Port.String())
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	var status string
	ask := func() error {
		var dialer net.Dialer
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		conn, err := dialer.DialContext(dctx, "tcp", addr)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", get.Path, addr); err != nil {
			return err
		}
		buf := make([]byte, 64)
		n, err := conn.Read(buf)
		if n == 0 {
			return err
		}
		status, _, _ = strings.Cut(string(buf[:n]), "\r\n")
		return nil
	}
	if pod.Spec.HostNetwork {
		err := labnet.Do(r.netns, ask)
		if err != nil {
			return fmt.Errorf("GET http://%s%s from node %s: %w", addr, get.Path, r.node, err)
		}
	} else if err := ask(); err != nil {
		return fmt.Errorf("GET http://%s%s: %w", addr, get.Path, err)
	}
	if f := strings.Fields(status); len(f) < 2 || f[1] < "200" || f[1] >= "400" {
		return fmt.Errorf("GET http://%s%s: %q", addr, get.Path, status)
	}
	return nil
}

// boundToken is a projected service-account token of a pod.
type boundToken struct {
	path, namespace, account string
	req                      authenticationv1.TokenRequestSpec
	issued                   time.Time
	expiry                   time.Duration
}

// request asks the TokenRequest API for a token bound to the pod.
func (bt *boundToken) request(ctx context.Context, cs kubernetes.Interface) ([]byte, error) {
	tok, err := cs.CoreV1().ServiceAccounts(bt.namespace).CreateToken(ctx, bt.account,
		&authenticationv1.TokenRequest{Spec: bt.req}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token of ServiceAccount %s bound to the pod: %w", bt.account, err)
	}
	bt.issued, bt.expiry = time.Now(), time.Until(tok.Status.ExpirationTimestamp.Time)
	return []byte(tok.Status.Token), nil
}

// refreshTokens renews the pod's tokens past 80% of their lifetime, as a
// kubelet does; client-go in the program rereads the file.
func (d *Deployed) refreshTokens(ctx context.Context, r *podRun) {
	for _, bt := range r.tokens {
		if time.Since(bt.issued) < bt.expiry*4/5 {
			continue
		}
		cs, err := d.lab.Clientset()
		if err != nil {
			return
		}
		tok, err := bt.request(ctx, cs)
		if err == nil {
			// Replaced, not rewritten: a reader never sees half a token.
			tmp := bt.path + ".new"
			if err = os.WriteFile(tmp, tok, 0o644); err == nil {
				err = os.Rename(tmp, bt.path)
			}
		}
		if err != nil {
			d.lab.log("Deployed: pod %s: refreshing its token: %v", r.key, err)
		}
	}
}
