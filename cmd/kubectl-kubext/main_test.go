package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/plugin"
	"github.com/kubext/kubext/test/testenv"
)

var (
	env        *testenv.Env
	kubeconfig string
	k8s        client.Client
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	var err error
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer func() { _ = env.Stop() }()
		if err := setup(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(filepath.Dir(kubeconfig))
		return m.Run()
	}()
	os.Exit(code)
}

// setup writes a kubeconfig for the plugin, as a user would have one, and
// makes the client the tests arrange objects with.
func setup() error {
	dir, err := os.MkdirTemp("", "kubectl-kubext-test")
	if err != nil {
		return err
	}
	if kubeconfig, err = env.WriteKubeconfig(dir); err != nil {
		return err
	}
	k8s, err = client.New(env.Config, client.Options{Scheme: plugin.Scheme})
	if err != nil {
		return err
	}
	return k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kubext-system"}})
}

// kubectl runs `kubectl kubext args...` against the test API server.
func kubectl(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	root := newRootCommand(streams)
	root.SetArgs(append([]string{"--kubeconfig", kubeconfig}, args...))
	err = root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// fixture is one IP with its pool, claiming pods, nodes and agent Leases,
// as the controller and agents would have left them: held by
// <ns>/<ip>-0 on node <ip>-n1, the standbys on the next nodes.
type fixture struct {
	name     string
	ns       string
	address  string
	standbys int
	// deadNode adds a claiming pod that is Ready on a node whose agent's
	// Lease ran out an hour ago.
	deadNode bool
}

func (f fixture) node(i int) string { return fmt.Sprintf("%s-n%d", f.name, i+1) }
func (f fixture) pod(i int) string  { return fmt.Sprintf("%s/%s-%d", f.ns, f.name, i) }

func (f fixture) create(ctx context.Context, g Gomega) *ipv1.IP {
	g.Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}})).To(Succeed())
	pool := &ipv1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: f.name + "-pool"}, Spec: ipv1.IPPoolSpec{Addresses: []string{f.address + "/32"},
		Claimants: &ipv1.PoolClaimants{Namespaces: []string{"default", "shop"}}}}
	g.Expect(k8s.Create(ctx, pool)).To(Succeed())
	pool.Status = ipv1.IPPoolStatus{Size: 1, Allocated: 1, Conditions: []metav1.Condition{condition(ipv1.ConditionReady, ipv1.ReasonReady, "ok")}}
	g.Expect(k8s.Status().Update(ctx, pool)).To(Succeed())

	pods := 1 + f.standbys
	if f.deadNode {
		pods++
	}
	var standbys []string
	for i := range pods {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: f.node(i)}}
		g.Expect(k8s.Create(ctx, n)).To(Succeed())
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
		g.Expect(k8s.Status().Update(ctx, n)).To(Succeed())
		renewed := time.Now()
		if f.deadNode && i == pods-1 {
			renewed = renewed.Add(-time.Hour)
		} else if i > 0 {
			standbys = append(standbys, f.pod(i))
		}
		g.Expect(k8s.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "kubext-system", Name: "ip-agent-" + f.node(i)},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(f.node(i)), LeaseDurationSeconds: ptr.To[int32](5),
				RenewTime: &metav1.MicroTime{Time: renewed}},
		})).To(Succeed())
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: fmt.Sprintf("%s-%d", f.name, i),
				Annotations: map[string]string{ipv1.AnnotationIP: f.name}},
			Spec: corev1.PodSpec{NodeName: f.node(i), Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
		g.Expect(k8s.Create(ctx, p)).To(Succeed())
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.0.0.%d", i+1),
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		g.Expect(k8s.Status().Update(ctx, p)).To(Succeed())
	}

	ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: f.name, Labels: map[string]string{"fixture": f.name}},
		Spec: ipv1.IPSpec{Pool: pool.Name}}
	g.Expect(k8s.Create(ctx, ip)).To(Succeed())
	ip.Status = ipv1.IPStatus{
		Address: f.address, Pool: pool.Name, Assigned: true, Claimed: true,
		Pod: f.pod(0), Node: f.node(0), AttachedNode: f.node(0), Standbys: standbys, ObservedGeneration: ip.Generation,
		Conditions: []metav1.Condition{
			condition(ipv1.ConditionAllocated, ipv1.ReasonAddressAllocated, f.address+" is reserved"),
			condition(ipv1.ConditionAttached, ipv1.ReasonAgentConfirmed, "the agent on "+f.node(0)+" answers"),
			condition(ipv1.ConditionReady, ipv1.ReasonReady, fmt.Sprintf("%s answers on node %s for pod %s", f.address, f.node(0), f.pod(0))),
		},
	}
	g.Expect(k8s.Status().Update(ctx, ip)).To(Succeed())
	g.Expect(recordEvent(ctx, ip, corev1.EventTypeNormal, "Attached",
		fmt.Sprintf("Node %s answers for %s from pool %s, held by pod %s", f.node(0), f.address, pool.Name, f.pod(0)))).To(Succeed())
	return ip
}

func condition(t, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: reason, Message: msg, LastTransitionTime: metav1.Now()}
}

// recordEvent records an events.k8s.io/v1 Event about an IP the way the
// controller's recorder does: in the default namespace.
func recordEvent(ctx context.Context, ip *ipv1.IP, typ, reason, note string) error {
	return k8s.Create(ctx, &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, GenerateName: ip.Name + "-"},
		EventTime:           metav1.NowMicro(),
		ReportingController: "ip.kubext.io/manager",
		ReportingInstance:   "manager-test",
		Action:              "Attach",
		Reason:              reason,
		Type:                typ,
		Note:                note,
		Regarding: corev1.ObjectReference{APIVersion: ipv1.GroupVersion.String(), Kind: "IP", Name: ip.Name,
			UID: ip.UID, ResourceVersion: ip.ResourceVersion},
	})
}

func TestListAndExplain(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	f := fixture{name: "web", ns: "shop", address: "192.0.2.10", standbys: 2, deadNode: true}
	f.create(ctx, g)

	out, _, err := kubectl(ctx, "ip", "list", "-l", "fixture=web")
	g.Expect(err).NotTo(HaveOccurred())
	lines := strings.Split(strings.TrimSpace(out), "\n")
	g.Expect(lines).To(HaveLen(2), out)
	g.Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "ADDRESS", "POOL", "HOLDER", "NODE", "ATTACHED", "STANDBYS", "READY", "AGE"}))
	g.Expect(strings.Fields(lines[1])[:9]).To(Equal([]string{"web", "192.0.2.10", "web-pool", "shop/web-0", "web-n1", "web-n1", "shop/web-1", "+1", "True"}))

	// `kubectl kubext ip` alone lists too; -o wide shows every standby.
	out, _, err = kubectl(ctx, "ip", "-o", "wide", "-l", "fixture=web")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("shop/web-1,shop/web-2"))
	g.Expect(out).To(ContainSubstring("192.0.2.10 answers on node web-n1 for pod shop/web-0"))

	out, _, err = kubectl(ctx, "ip", "list", "-l", "fixture=web", "-o", "name")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal("ip.ip.kubext.io/web\n"))

	out, _, err = kubectl(ctx, "ip", "list", "-l", "fixture=web", "-o", "yaml")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("kind: IPList"))
	g.Expect(out).To(ContainSubstring("address: 192.0.2.10"))

	_, stderr, err := kubectl(ctx, "ip", "list", "-l", "fixture=none")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(stderr).To(ContainSubstring("No IPs found."))

	out, _, err = kubectl(ctx, "ip", "explain", "web")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).NotTo(ContainSubstring("has not caught up"))
	for _, want := range []string{
		"IP web: 192.0.2.10",
		"Status: READY: 192.0.2.10 answers on node web-n1 for pod shop/web-0.",
		"web-pool: Ready, provider l2", // the provider defaulted by the CRD
		"shop/web-0  Running  yes    web-n1  HOLDER",
		"shop/web-1  Running  yes    web-n2  standby #1",
		"shop/web-2  Running  yes    web-n3  standby #2",
		"shop/web-3  Running  yes    web-n4  not eligible: the agent on node web-n4 is not alive",
		"web-n1  alive, renewed",
		"web-n4  NOT ALIVE: last renewed 60m ago, lease 5s ran out",
		"Ready\n", // the nodes' condition
		"Normal  Attached  Node web-n1 answers for 192.0.2.10 from pool web-pool, held by pod shop/web-0",
	} {
		g.Expect(out).To(ContainSubstring(want))
	}

	// The same judgements, for scripts.
	out, _, err = kubectl(ctx, "ip", "explain", "web", "-o", "json")
	g.Expect(err).NotTo(HaveOccurred())
	var doc struct {
		APIVersion, Kind, Name, Address, Ready string
		Pool                                   struct {
			Name     string
			Found    bool
			Provider string
		}
		Placement struct {
			Holder, Node, AttachedNode string
			Standbys                   []string
		}
		Nodes []struct {
			Name       string
			AgentAlive bool
		}
		Pods []struct{ Name, Role string }
	}
	g.Expect(json.Unmarshal([]byte(out), &doc)).To(Succeed(), out)
	g.Expect(doc.Kind).To(Equal("IPExplanation"))
	g.Expect(doc.Name).To(Equal("web"))
	g.Expect(doc.Address).To(Equal("192.0.2.10"))
	g.Expect(doc.Ready).To(Equal("True"))
	g.Expect(doc.Pool.Found).To(BeTrue())
	g.Expect(doc.Pool.Provider).To(Equal("l2"))
	g.Expect(doc.Placement.Holder).To(Equal("shop/web-0"))
	g.Expect(doc.Placement.Standbys).To(Equal([]string{"shop/web-1", "shop/web-2"}))
	g.Expect(doc.Nodes).To(ContainElements(
		SatisfyAll(HaveField("Name", "web-n1"), HaveField("AgentAlive", true)),
		SatisfyAll(HaveField("Name", "web-n4"), HaveField("AgentAlive", false))))
	g.Expect(doc.Pods).To(ContainElement(SatisfyAll(HaveField("Name", "shop/web-0"), HaveField("Role", "HOLDER"))))
	out, _, err = kubectl(ctx, "ip", "explain", "web", "-o", "yaml")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("kind: IPExplanation\n"))
	_, _, err = kubectl(ctx, "ip", "explain", "web", "-o", "wide")
	g.Expect(err).To(MatchError(ContainSubstring(`unknown output format "wide"`)))

	// IP names complete from the cluster.
	out, _, err = kubectl(ctx, "__complete", "ip", "explain", "we")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Split(out, "\n")).To(ContainElement("web"))
	g.Expect(out).NotTo(ContainSubstring("nope"))

	_, _, err = kubectl(ctx, "ip", "explain", "nope")
	g.Expect(err).To(MatchError(ContainSubstring(`IP "nope" not found`)))
}

func TestMoveRequest(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ip := fixture{name: "api", ns: "backend", address: "192.0.2.20", standbys: 2}.create(ctx, g)

	_, _, err := kubectl(ctx, "ip", "move", "api", "--to", "backend/api-9", "--wait=false")
	g.Expect(err).To(MatchError(ContainSubstring("backend/api-9 is not a standby of IP api (they are: backend/api-1, backend/api-2)")))
	g.Expect(annotations(ctx, g, ip)).NotTo(HaveKey(ipv1.AnnotationMoveTo))

	// A pod name without namespace takes the one of -n.
	out, _, err := kubectl(ctx, "ip", "move", "api", "--to", "api-2", "-n", "backend", "--wait=false")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("Moving IP api (192.0.2.20) from backend/api-0 on node api-n1 to backend/api-2."))
	g.Expect(annotations(ctx, g, ip)).To(HaveKeyWithValue(ipv1.AnnotationMoveTo, "backend/api-2"))

	_, _, err = kubectl(ctx, "ip", "move", "api", "--to", "backend/api-1", "--wait=false")
	g.Expect(err).To(MatchError(ContainSubstring("a move of IP api to backend/api-2 is already pending")))
}

func TestMoveWithoutStandby(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ip := fixture{name: "solo", ns: "solo", address: "192.0.2.30"}.create(ctx, g)

	_, _, err := kubectl(ctx, "ip", "move", "solo")
	g.Expect(err).To(MatchError(ContainSubstring("IP solo has no standby to move to (holder: solo/solo-0)")))
	g.Expect(annotations(ctx, g, ip)).NotTo(HaveKey(ipv1.AnnotationMoveTo))
}

// TestMoveWait plays the controller and the agents: it hands the address
// over the way they do, and the command follows until it is Ready.
func TestMoveWait(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	f := fixture{name: "db", ns: "data", address: "192.0.2.40", standbys: 1}
	ip := f.create(ctx, g)

	go func() {
		steps := []func(*ipv1.IP){
			func(ip *ipv1.IP) { // the controller asks the old node to let go
				ip.Status.Node, ip.Status.Pod, ip.Status.Standbys = "", f.pod(1), []string{f.pod(0)}
				setFalse(ip, ipv1.ReasonDetaching, "waiting for node db-n1 to release 192.0.2.40")
			},
			func(ip *ipv1.IP) { ip.Status.AttachedNode = "" }, // its agent lets go
			func(ip *ipv1.IP) { // the controller points at the new node
				ip.Status.Node = f.node(1)
				setFalse(ip, ipv1.ReasonWaitingForAgent, "waiting for the agent on db-n2")
			},
			func(ip *ipv1.IP) { ip.Status.AttachedNode = f.node(1) }, // its agent confirms
			func(ip *ipv1.IP) { // the controller marks it Ready
				ip.Status.Conditions = ip.Status.Conditions[:1]
				ip.Status.Conditions = append(ip.Status.Conditions,
					condition(ipv1.ConditionAttached, ipv1.ReasonAgentConfirmed, "the agent on db-n2 answers"),
					condition(ipv1.ConditionReady, ipv1.ReasonReady, "192.0.2.40 answers on node db-n2"))
			},
		}
		waitForMoveRequest(ctx, ip)
		for _, step := range steps {
			cur := &ipv1.IP{}
			if k8s.Get(ctx, client.ObjectKeyFromObject(ip), cur) != nil {
				return
			}
			step(cur)
			if k8s.Status().Update(ctx, cur) != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()

	out, _, err := kubectl(ctx, "ip", "move", "db", "--timeout", "20s")
	g.Expect(err).NotTo(HaveOccurred(), out)
	for _, want := range []string{
		"Moving IP db (192.0.2.40) from data/db-0 on node db-n1 to data/db-1.",
		"] waiting for node db-n1 to release 192.0.2.40\n",
		"] waiting for the agent on node db-n2 to attach 192.0.2.40\n",
		"] attached on node db-n2\n",
		"IP db (192.0.2.40) moved to data/db-1 on node db-n2 in ",
	} {
		g.Expect(out).To(ContainSubstring(want))
	}
}

// TestMoveRefused plays a controller that refuses the move.
func TestMoveRefused(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	ip := fixture{name: "mq", ns: "queue", address: "192.0.2.50", standbys: 1}.create(ctx, g)

	go func() {
		waitForMoveRequest(ctx, ip)
		cur := &ipv1.IP{}
		if k8s.Get(ctx, client.ObjectKeyFromObject(ip), cur) != nil {
			return
		}
		if recordEvent(ctx, cur, corev1.EventTypeWarning, "MoveRefused",
			"Cannot move mq to queue/mq-1: it is not a Ready claimant on a healthy, allowed node") != nil {
			return
		}
		_ = k8s.Patch(ctx, cur, client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"`+ipv1.AnnotationMoveTo+`":null}}}`)))
	}()

	out, _, err := kubectl(ctx, "ip", "move", "mq", "--timeout", "20s")
	g.Expect(err).To(MatchError(ContainSubstring("move of IP mq to queue/mq-1 refused")))
	g.Expect(out).To(ContainSubstring("The controller removed the move request without moving IP mq to queue/mq-1; it is held by queue/mq-0 on node mq-n1."))
	g.Expect(out).To(ContainSubstring("Warning MoveRefused ("))
	g.Expect(out).To(ContainSubstring("Cannot move mq to queue/mq-1: it is not a Ready claimant"))
}

func TestMoveTimesOutWithoutController(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	fixture{name: "idle", ns: "idle", address: "192.0.2.60", standbys: 1}.create(ctx, g)

	start := time.Now()
	_, _, err := kubectl(ctx, "ip", "move", "idle", "--timeout", "1s")
	g.Expect(time.Since(start)).To(BeNumerically("<", 10*time.Second))
	g.Expect(err).To(MatchError(ContainSubstring("timed out after 1s waiting for IP idle to move to idle/idle-1")))
	g.Expect(err).To(MatchError(ContainSubstring("is the kubext manager running?")))
}

func setFalse(ip *ipv1.IP, reason, msg string) {
	for i := range ip.Status.Conditions[1:] {
		c := &ip.Status.Conditions[i+1]
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, reason, msg
	}
}

func waitForMoveRequest(ctx context.Context, ip *ipv1.IP) {
	for ctx.Err() == nil {
		cur := &ipv1.IP{}
		if k8s.Get(ctx, client.ObjectKeyFromObject(ip), cur) == nil && cur.Annotations[ipv1.AnnotationMoveTo] != "" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func annotations(ctx context.Context, g Gomega, ip *ipv1.IP) map[string]string {
	cur := &ipv1.IP{}
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ip), cur)).To(Succeed())
	return cur.Annotations
}

// TestVersion prints the plugin's build and finds the manager installed in
// the cluster by its labels.
func TestVersion(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	out, _, err := kubectl(ctx, "version", "--client")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(HavePrefix("Plugin: "))
	g.Expect(out).To(ContainSubstring("(revision "))
	g.Expect(strings.Count(out, "\n")).To(Equal(1), "--client does not ask the cluster")

	out, _, err = kubectl(ctx, "version")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("Installed: no kubext manager found in the cluster"))

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kubext-version"}}
	g.Expect(k8s.Create(ctx, ns)).To(Succeed())
	labels := map[string]string{"app.kubernetes.io/name": "kubext", "control-plane": "controller-manager"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "kubext-controller-manager", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "manager", Image: "registry.example/kubext@sha256:" + strings.Repeat("ab", 32),
				}}},
			},
		},
	}
	g.Expect(k8s.Create(ctx, dep)).To(Succeed())
	out, _, err = kubectl(ctx, "version", "-o", "json")
	g.Expect(err).NotTo(HaveOccurred())
	var doc struct {
		Kind      string
		Client    struct{ Version, Revision string }
		Installed []struct {
			Namespace, Name string
			Images          []string
		}
	}
	g.Expect(json.Unmarshal([]byte(out), &doc)).To(Succeed(), out)
	g.Expect(doc.Kind).To(Equal("Version"))
	g.Expect(doc.Client.Version).NotTo(BeEmpty())
	g.Expect(doc.Installed).To(ConsistOf(SatisfyAll(HaveField("Namespace", "kubext-version"),
		HaveField("Images", []string{dep.Spec.Template.Spec.Containers[0].Image}))))
}
