package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/lab/labnet"
)

// PodServerPort is the TCP port on which every pod of the [PodNetwork]
// answers each connection with its name and a newline. The server listens
// on all addresses of the pod's namespace.
const PodServerPort = 8080

const (
	// podNetResync is how often the pod network retries what failed.
	podNetResync = time.Second
	// podServerReady bounds the wait for a new pod server to answer.
	podServerReady = 5 * time.Second
)

// PodNetwork gives the lab's pods a data plane, a minimal stand-in for a
// CNI: every pod that claims a static IP (it carries the ip.kubext.io/ip
// annotation), is Running on a lab node and has a pod IP gets a network
// namespace with that IP behind its node's namespace ([labnet.Network.AddPod])
// and a TCP server on [PodServerPort] inside it that answers with the pod's
// name (`lab podserver`, run with [Lab.Start], so Down stops it too). When
// the pod is deleted, stops running, moves or changes its IP, the server is
// stopped and the namespace removed.
//
// The workload pods (see workload.go: the members of a Redis) get a
// namespace too, routed as on a cluster's flat pod network, and run their
// containers' real program instead of the pod server, while their node is
// Ready.
//
// The client namespace cannot reach pod IPs; only a node agent's NAT can
// make a pod reachable from outside, and a pod's own traffic reaches the
// client (through its node) only with a source address the client can
// answer, i.e. after the agent's SNAT.
type PodNetwork struct {
	lab    *Lab
	bin    string
	cs     kubernetes.Interface
	nodes  corev1listers.NodeLister
	cancel context.CancelFunc
	done   chan struct{}
	kick   chan struct{}

	// pods is written only by the loop goroutine, under mu.
	mu   sync.Mutex
	pods map[string]*podPlumbing // by "namespace/name"
	// errs is the last error per pod, logged once (loop goroutine only).
	errs    map[string]string
	stopErr error // set when done is closed
}

// podPlumbing is what the pod network made for one pod.
type podPlumbing struct {
	uid       types.UID
	name      string
	node      string
	addr      netip.Addr
	namespace string
	server    *Process
	bootID    string
	// workload is what runs for a workload pod (nil for the pod server).
	workload *workloadRun
}

// podWant is what the pod network should make for one pod.
type podWant struct {
	uid  types.UID
	name string
	node string
	addr netip.Addr
	// pod and bootID are set for a workload pod: what to run, and the boot
	// of its node it runs in.
	pod    *corev1.Pod
	bootID string
}

// StartPodNetwork starts the lab's pod network, or returns the one already
// running: there is at most one per Lab, and tests share it. It runs until
// Stop, Down, or until ctx ends. It needs the lab network and bin/lab.
func (l *Lab) StartPodNetwork(ctx context.Context) (*PodNetwork, error) {
	if l.Net == nil {
		return nil, errors.New("lab: the pod network needs the lab network (root)")
	}
	if !l.Net.PodSubnet.IsValid() {
		return nil, errors.New("lab: the lab network has no pod subnet (brought up by an older lab?)")
	}
	l.podNetStart.Lock()
	defer l.podNetStart.Unlock()
	l.mu.Lock()
	running := l.podNet
	l.mu.Unlock()
	if running != nil {
		return running, nil
	}
	bin := filepath.Join(l.BinDir, "lab")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("lab: %s is missing: run `make tools` (it builds the lab CLI) first", bin)
	}
	cs, err := l.Clientset()
	if err != nil {
		return nil, err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		// A pod that leaves Running leaves the cache.
		o.FieldSelector = fields.OneTermEqualSelector("status.phase", string(corev1.PodRunning)).String()
	}))
	informer := factory.Core().V1().Pods()
	// Nodes, for workload pods: they run while their node is Ready, and
	// start again after it boots.
	nodeFactory := informers.NewSharedInformerFactory(cs, 0)
	nodeInformer := nodeFactory.Core().V1().Nodes()
	pn := &PodNetwork{
		lab:  l,
		bin:  bin,
		done: make(chan struct{}),
		kick: make(chan struct{}, 1),
		pods: map[string]*podPlumbing{},
		errs: map[string]string{},
	}
	kick := func(any) { pn.trigger() }
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    kick,
		UpdateFunc: func(_, _ any) { pn.trigger() },
		DeleteFunc: kick,
	}); err != nil {
		return nil, err
	}
	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, _ any) { pn.trigger() },
	}); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	pn.cancel = cancel
	factory.Start(runCtx.Done())
	nodeFactory.Start(runCtx.Done())
	syncCtx, syncCancel := context.WithTimeout(ctx, 30*time.Second)
	defer syncCancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), informer.Informer().HasSynced, nodeInformer.Informer().HasSynced) {
		cancel()
		factory.Shutdown()
		nodeFactory.Shutdown()
		return nil, errors.New("lab: the pod network's pod cache did not sync")
	}
	lister := informer.Lister()
	pn.nodes = nodeInformer.Lister()
	pn.cs = cs
	l.mu.Lock()
	l.podNet = pn
	l.mu.Unlock()
	go func() {
		defer close(pn.done)
		defer pn.cleanup()
		defer factory.Shutdown()
		defer nodeFactory.Shutdown()
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
		tick := time.NewTicker(podNetResync)
		defer tick.Stop()
		for {
			pods, err := lister.List(labels.Everything())
			if err == nil {
				pn.reconcile(runCtx, pods)
			}
			select {
			case <-runCtx.Done():
				return
			case <-pn.kick:
			case <-tick.C:
			}
		}
	}()
	l.log("Pod network started: pods that claim a static IP get a namespace and a server on port %d; Redis members run redis-server", PodServerPort)
	return pn, nil
}

func (pn *PodNetwork) trigger() {
	select {
	case pn.kick <- struct{}{}:
	default:
	}
}

// PodNamespace returns the network namespace of the pod ("namespace/name")
// once its server answers, or "" while it has none. Tests open connections
// from the pod with [labnet.Do] or [labnet.Command] in it.
func (pn *PodNetwork) PodNamespace(podKey string) string {
	pn.mu.Lock()
	defer pn.mu.Unlock()
	if p, ok := pn.pods[podKey]; ok {
		return p.namespace
	}
	return ""
}

// Pods lists the pods ("namespace/name") that have a namespace and a server.
func (pn *PodNetwork) Pods() []string {
	pn.mu.Lock()
	defer pn.mu.Unlock()
	out := make([]string, 0, len(pn.pods))
	for k := range pn.pods {
		out = append(out, k)
	}
	return out
}

// Close stops the pod network: every pod server is stopped and every pod
// namespace removed. It is idempotent; a later StartPodNetwork starts anew.
func (pn *PodNetwork) Close() error {
	pn.cancel()
	<-pn.done
	return pn.stopErr
}

// Stop is Close for `defer pn.Stop()`: it logs an error instead of
// returning it (Down removes whatever is left).
func (pn *PodNetwork) Stop() {
	if err := pn.Close(); err != nil {
		pn.lab.log("Pod network: stopping: %v", err)
	}
}

// cleanup unplugs every pod once the loop has ended.
func (pn *PodNetwork) cleanup() {
	var errs []error
	for key := range pn.pods {
		errs = append(errs, pn.remove(key, false))
	}
	pn.stopErr = errors.Join(errs...)
	l := pn.lab
	l.mu.Lock()
	if l.podNet == pn {
		l.podNet = nil
	}
	l.mu.Unlock()
}

// wanted picks the pods that should have a namespace.
func (pn *PodNetwork) wanted(pods []*corev1.Pod) map[string]podWant {
	out := map[string]podWant{}
	for _, p := range pods {
		_, claims := p.Annotations[ipv1.AnnotationIP]
		workload := !claims && runsWorkload(p)
		if !claims && !workload {
			continue
		}
		if p.Status.Phase != corev1.PodRunning || p.Spec.HostNetwork || pn.lab.Net.NodeNamespace(p.Spec.NodeName) == "" {
			continue
		}
		addr, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil {
			continue
		}
		w := podWant{uid: p.UID, name: p.Name, node: p.Spec.NodeName, addr: addr}
		if workload {
			bootID, up := pn.nodeUp(p.Spec.NodeName)
			if !up || p.DeletionTimestamp != nil {
				continue
			}
			w.pod, w.bootID = p, bootID
		}
		out[p.Namespace+"/"+p.Name] = w
	}
	return out
}

// reconcile makes the pod namespaces match the pods; it runs on the loop
// goroutine, the only writer of pn.pods.
func (pn *PodNetwork) reconcile(ctx context.Context, pods []*corev1.Pod) {
	want := pn.wanted(pods)
	for key, have := range pn.pods {
		w, ok := want[key]
		if ok && w.uid == have.uid && w.node == have.node && w.addr == have.addr && w.bootID == have.bootID {
			if have.workload != nil {
				pn.restartExited(key, have.namespace, have.workload)
			}
			continue
		}
		// A workload pod whose node went down or rebooted dies with it.
		_, up := pn.nodeUp(have.node)
		crash := have.workload != nil && (!up || ok && w.bootID != have.bootID)
		if err := pn.remove(key, crash); err != nil {
			pn.report(key, err)
		}
	}
	for key, w := range want {
		if ctx.Err() != nil {
			return
		}
		if _, ok := pn.pods[key]; ok {
			continue
		}
		if err := pn.add(ctx, key, w); err != nil {
			pn.report(key, err)
			continue
		}
		delete(pn.errs, key)
	}
	for key := range pn.errs {
		if _, ok := want[key]; !ok {
			delete(pn.errs, key)
		}
	}
}

// report logs a pod's error once (until it changes).
func (pn *PodNetwork) report(key string, err error) {
	if pn.errs[key] != err.Error() {
		pn.errs[key] = err.Error()
		pn.lab.log("Pod network: pod %s: %v", key, err)
	}
}

// nodeUp reports whether the node is Ready, and its boot ID.
func (pn *PodNetwork) nodeUp(name string) (bootID string, up bool) {
	node, err := pn.nodes.Get(name)
	if err != nil {
		return "", false
	}
	return node.Status.NodeInfo.BootID, NodeReady(node)
}

// add plumbs a pod and starts its server or its workload.
func (pn *PodNetwork) add(ctx context.Context, key string, w podWant) (err error) {
	n := pn.lab.Net
	ns, err := n.AddPod(w.node, key, w.addr)
	if err != nil {
		return err
	}
	p := &podPlumbing{uid: w.uid, name: w.name, node: w.node, addr: w.addr, namespace: ns, bootID: w.bootID}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.unplug(n, key, true))
		}
	}()
	if w.pod != nil {
		if p.workload, err = pn.prepareWorkload(ctx, pn.cs, w.pod, ns); err != nil {
			return err
		}
		if err := n.RoutePod(w.node, w.addr); err != nil {
			return err
		}
		if err := pn.startWorkload(ctx, key, ns, n.NodeNamespace(w.node), w.addr, p.workload); err != nil {
			return err
		}
		pn.lab.log("Pod network: pod %s runs on %s at %s", key, w.node, w.addr)
		pn.mu.Lock()
		pn.pods[key] = p
		pn.mu.Unlock()
		return nil
	}
	p.server, err = pn.lab.Start("pod-"+strings.ReplaceAll(key, "/", "-"), ns, pn.bin,
		[]string{"podserver", "--listen", ":" + strconv.Itoa(PodServerPort), "--reply", w.name})
	if err != nil {
		return err
	}
	if err := waitPodServer(ctx, n.NodeNamespace(w.node), w.addr, w.name, p.server); err != nil {
		return err
	}
	pn.mu.Lock()
	pn.pods[key] = p
	pn.mu.Unlock()
	return nil
}

// remove stops a pod's server or workload (crash: at once, as a node going
// down would) and removes its namespace.
func (pn *PodNetwork) remove(key string, crash bool) error {
	p := pn.pods[key]
	pn.mu.Lock()
	delete(pn.pods, key)
	pn.mu.Unlock()
	if p.workload != nil {
		how := "stopped"
		if crash {
			how = "killed (its node is down or rebooted)"
		}
		pn.lab.log("Pod network: pod %s %s", key, how)
	}
	return p.unplug(pn.lab.Net, key, crash)
}

func (p *podPlumbing) unplug(n *labnet.Network, key string, crash bool) error {
	if p.server != nil {
		p.server.Stop(2 * time.Second)
	}
	var errs []error
	if p.workload != nil {
		p.workload.stop(crash)
		// A pod whose node went down keeps its routes, which lead to the
		// dead node, as a cluster's routes to its pod CIDR would: traffic
		// to it times out there rather than leave through the root
		// namespace's default route. AddPod replaces them when it is back.
		if !crash {
			errs = append(errs, n.UnroutePod(p.node, p.addr))
		}
	}
	return errors.Join(append(errs, n.RemovePod(p.node, key))...)
}

// waitPodServer waits until the pod's server answers with its name when
// dialled from its node's namespace.
func waitPodServer(ctx context.Context, nodeNS string, addr netip.Addr, name string, server *Process) error {
	target := netip.AddrPortFrom(addr, PodServerPort).String()
	deadline := time.Now().Add(podServerReady)
	var last error
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if !server.Running() {
			return fmt.Errorf("the pod server exited (see %s)", server.Log)
		}
		var reply string
		last = labnet.Do(nodeNS, func() error {
			c, err := net.DialTimeout("tcp", target, time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(time.Second))
			b, err := io.ReadAll(c)
			reply = string(b)
			return err
		})
		if last == nil && reply == name+"\n" {
			return nil
		}
		if last == nil {
			last = fmt.Errorf("answered %q", reply)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("the pod server on %s did not answer within %s: %v", target, podServerReady, last)
}
