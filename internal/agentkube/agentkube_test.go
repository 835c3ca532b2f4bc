package agentkube

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/heartbeat"
	"github.com/kubext/kubext/test/testenv"
)

const waitFor = 20 * time.Second

var (
	testCtx context.Context
	testCfg *rest.Config
	c       *Client
)

func TestMain(m *testing.M) {
	testenv.Main(m, func(ctx context.Context, env *testenv.Env) error {
		testCtx, testCfg = ctx, env.Config
		scheme := runtime.NewScheme()
		for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, coordinationv1.AddToScheme, eventsv1.AddToScheme, ipv1.AddToScheme} {
			if err := add(scheme); err != nil {
				return err
			}
		}
		var err error
		c, err = New(env.Config, scheme)
		return err
	})
}

func node(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// An informer with a field selector holds what it selects and nothing
// else, through creates, changes and deletes; Get, Patch and Create reach
// the API server with the scheme's types, cluster-scoped or namespaced.
func TestInformerSelectsAndClientWrites(t *testing.T) {
	g := NewWithT(t)
	for _, n := range []string{"sel-a", "sel-b"} {
		g.Expect(c.Create(testCtx, node(n))).To(Succeed())
	}
	inf, err := c.Informer(&corev1.Node{}, "", fields.OneTermEqualSelector("metadata.name", "sel-a"))
	g.Expect(err).NotTo(HaveOccurred())
	var changes atomic.Int32
	_, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(any, any) { changes.Add(1) }})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(testCtx)
	defer cancel()
	go inf.RunWithContext(ctx)
	g.Expect(cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)).To(BeTrue())
	g.Expect(inf.GetStore().ListKeys()).To(ConsistOf("sel-a"))
	o, _, _ := inf.GetStore().GetByKey("sel-a")
	g.Expect(o.(*corev1.Node).ManagedFields).To(BeEmpty(), "managedFields are dropped")

	// A patch of each node: the informer sees its own only.
	for _, n := range []string{"sel-a", "sel-b"} {
		out := &corev1.Node{}
		g.Expect(c.Patch(testCtx, "", n, types.MergePatchType, []byte(`{"metadata":{"labels":{"seen":"yes"}}}`), out)).To(Succeed())
		g.Expect(out.Labels).To(HaveKeyWithValue("seen", "yes"), "the answer is decoded into the object")
	}
	g.Eventually(func() string {
		o, ok, _ := inf.GetStore().GetByKey("sel-a")
		if !ok {
			return ""
		}
		return o.(*corev1.Node).Labels["seen"]
	}, waitFor).Should(Equal("yes"))
	g.Consistently(inf.GetStore().ListKeys, time.Second).Should(ConsistOf("sel-a"))
	g.Expect(changes.Load()).To(BeEquivalentTo(1))

	got := &corev1.Node{}
	g.Expect(c.Get(testCtx, "", "sel-b", got)).To(Succeed())
	g.Expect(got.Name).To(Equal("sel-b"))
	g.Expect(apierrors.IsNotFound(c.Get(testCtx, "", "sel-none", &corev1.Node{}))).To(BeTrue())

	// A custom resource's selectable field, and its status subresource.
	ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "sel-ip"}, Spec: ipv1.IPSpec{Pool: "p"}}
	g.Expect(c.Create(testCtx, ip)).To(Succeed())
	ips, err := c.Informer(&ipv1.IP{}, "", fields.OneTermEqualSelector("status.node", "sel-a"))
	g.Expect(err).NotTo(HaveOccurred())
	go ips.RunWithContext(ctx)
	g.Expect(cache.WaitForCacheSync(ctx.Done(), ips.HasSynced)).To(BeTrue())
	g.Expect(ips.GetStore().ListKeys()).To(BeEmpty(), "no IP names sel-a")
	g.Expect(c.Patch(testCtx, "", "sel-ip", types.MergePatchType, []byte(`{"status":{"node":"sel-a"}}`), &ipv1.IP{}, "status")).To(Succeed())
	g.Eventually(ips.GetStore().ListKeys, waitFor).Should(ConsistOf("sel-ip"))

	// A namespaced kind.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "sel-cm", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	g.Expect(c.Create(testCtx, cm)).To(Succeed())
	gotCM := &corev1.ConfigMap{}
	g.Expect(c.Get(testCtx, "default", "sel-cm", gotCM)).To(Succeed())
	g.Expect(gotCM.Data).To(HaveKeyWithValue("k", "v"))

	g.Expect(c.Get(testCtx, "", "sel-a", &corev1.Pod{})).To(MatchError(ContainSubstring("the server could not find")),
		"a cluster-scoped read of a namespaced kind is the API server's error, not a panic")
}

// The heartbeat's Lease client over the agent's REST client: what an agent
// built on this package renews with.
func TestHeartbeatLeasesOverTheRESTClient(t *testing.T) {
	g := NewWithT(t)
	rc, err := c.REST(coordinationv1.SchemeGroupVersion)
	g.Expect(err).NotTo(HaveOccurred())
	leases := heartbeat.SendOnce(rc).Leases("default")
	created, err := leases.Create(testCtx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "hb"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("n1"), LeaseDurationSeconds: ptr.To[int32](2)}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	got, err := leases.Get(testCtx, "hb", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.ResourceVersion).To(Equal(created.ResourceVersion))
	got.Spec.LeaseDurationSeconds = ptr.To[int32](3)
	updated, err := leases.Update(testCtx, got, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(*updated.Spec.LeaseDurationSeconds).To(BeEquivalentTo(3))
	_, err = leases.Update(testCtx, got, metav1.UpdateOptions{})
	g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "an update from a stale copy conflicts: %v", err)
	patched, err := leases.Patch(testCtx, "hb", types.JSONPatchType,
		[]byte(`[{"op":"test","path":"/spec/holderIdentity","value":"n1"},{"op":"replace","path":"/spec/leaseDurationSeconds","value":4}]`), metav1.PatchOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(*patched.Spec.LeaseDurationSeconds).To(BeEquivalentTo(4))
}

// Events name what they are about, land in the regarding object's
// namespace ("default" for a Node), and a burst is cut to the recorder's
// rate instead of queueing without bound.
func TestRecorder(t *testing.T) {
	g := NewWithT(t)
	n := node("ev-node")
	g.Expect(c.Create(testCtx, n)).To(Succeed())
	r := c.NewRecorder("test-agent", logr.Discard())
	ctx, cancel := context.WithCancel(testCtx)
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	r.Eventf(n, nil, corev1.EventTypeWarning, "Tested", "Test", "node %s, %s", n.Name, strings.Repeat("x", 2000))
	list := func() []eventsv1.Event {
		var out []eventsv1.Event
		l := &eventsv1.EventList{}
		rc, _ := c.REST(eventsv1.SchemeGroupVersion)
		if err := rc.Get().Namespace("default").Resource("events").Do(testCtx).Into(l); err != nil {
			return nil
		}
		for _, e := range l.Items {
			if e.Regarding.Name == "ev-node" {
				out = append(out, e)
			}
		}
		return out
	}
	g.Eventually(list, waitFor).Should(HaveLen(1))
	e := list()[0]
	g.Expect(e.Regarding.Kind).To(Equal("Node"))
	g.Expect(e.Regarding.APIVersion).To(Equal("v1"))
	g.Expect(e.ReportingController).To(Equal("test-agent"))
	g.Expect(e.Type).To(Equal(corev1.EventTypeWarning))
	g.Expect(e.Note).To(HavePrefix("node ev-node, xxx"))
	g.Expect(len(e.Note)).To(Equal(maxNoteBytes), "the note is cut to the API server's limit")

	for range 3 * eventBurst {
		r.Eventf(n, nil, corev1.EventTypeNormal, "Burst", "Test", "burst")
	}
	g.Eventually(func() int { return len(list()) }, waitFor).Should(BeNumerically(">=", eventBurst-1))
	g.Consistently(func() int { return len(list()) }, 2*time.Second).Should(BeNumerically("<=", eventBurst+1+3),
		"a burst is cut to the bucket and its refill")
}

// The loop runs one pass per batch of triggers, again after a failure or
// a panic (with backoff), and again when a pass asks to.
func TestLoop(t *testing.T) {
	g := NewWithT(t)
	l := NewLoop("test", logr.Discard())
	var passes atomic.Int32
	results := make(chan func() (time.Duration, error), 10)
	ctx, cancel := context.WithCancel(testCtx)
	defer cancel()
	release := make(chan struct{})
	go l.Run(ctx, func(context.Context) (time.Duration, error) {
		passes.Add(1)
		<-release
		select {
		case f := <-results:
			return f()
		default:
			return 0, nil
		}
	})
	l.Trigger()
	g.Eventually(passes.Load, waitFor).Should(BeEquivalentTo(1))
	// Triggers while a pass runs: one more pass, not three.
	l.Trigger()
	l.Trigger()
	l.Trigger()
	release <- struct{}{}
	g.Eventually(passes.Load, waitFor).Should(BeEquivalentTo(2))
	results <- func() (time.Duration, error) { return 0, errors.New("failed") }
	release <- struct{}{}
	g.Eventually(passes.Load, waitFor).Should(BeEquivalentTo(3), "a failed pass runs again")
	results <- func() (time.Duration, error) { panic("bad object") }
	release <- struct{}{}
	g.Eventually(passes.Load, waitFor).Should(BeEquivalentTo(4), "a panic is a failure")
	results <- func() (time.Duration, error) { return 300 * time.Millisecond, nil }
	release <- struct{}{}
	g.Eventually(passes.Load, waitFor).Should(BeEquivalentTo(5), "a pass that asks to run again does")
	release <- struct{}{}
	g.Consistently(passes.Load, time.Second).Should(BeEquivalentTo(5), "nothing more to do")
	cancel()
	close(release)
}

// /readyz fails with the failing check's message until it passes;
// /metrics shows the API requests the client made.
func TestServe(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(testCtx)
	defer cancel()
	addr := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		g.Expect(err).NotTo(HaveOccurred())
		defer ln.Close()
		return ln.Addr().String()
	}
	// serveOnAFreePort serves on a port picked again when the bind fails:
	// between the pick and the bind, another package's test running beside
	// this one (or the other server here) may take the port, and its server
	// would answer instead. A failed bind returns at once.
	serveOnAFreePort := func(serve func(addr string) error) string {
		for range 5 {
			a := addr()
			errc := make(chan error, 1)
			go func() { errc <- serve(a) }()
			select {
			case err := <-errc:
				t.Logf("serving on %s: %v; picking another port", a, err)
			case <-time.After(200 * time.Millisecond):
				return a
			}
		}
		t.Fatal("no free port to serve on after five picks")
		return ""
	}
	var ready atomic.Bool
	probes := serveOnAFreePort(func(a string) error {
		return ServeProbes(ctx, a, Check{Name: "cache", Check: func() error {
			if !ready.Load() {
				return errors.New("not synced")
			}
			return nil
		}})
	})
	metrics := serveOnAFreePort(func(a string) error { return ServeMetrics(ctx, a) })
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	g.Eventually(func() int { code, _ := get("http://" + probes + "/healthz"); return code }, waitFor).Should(Equal(http.StatusOK))
	code, body := get("http://" + probes + "/readyz")
	g.Expect(code).To(Equal(http.StatusInternalServerError))
	g.Expect(body).To(ContainSubstring("cache: not synced"))
	ready.Store(true)
	code, _ = get("http://" + probes + "/readyz")
	g.Expect(code).To(Equal(http.StatusOK))

	g.Expect(c.Get(testCtx, "", "no-such-node", &corev1.Node{})).NotTo(Succeed())
	g.Eventually(func() string { _, body := get("http://" + metrics + "/metrics"); return body }, waitFor).Should(
		MatchRegexp(`rest_client_requests_total\{code="404",host="[^"]+",method="GET"\} [1-9]`))
	g.Expect(ServeMetrics(ctx, "0")).To(Succeed(), "0 serves nothing")
}

// Built-in group versions travel as protobuf, custom resources as JSON.
func TestContentTypes(t *testing.T) {
	g := NewWithT(t)
	g.Expect(c.protobuf(corev1.SchemeGroupVersion)).To(BeTrue())
	g.Expect(c.protobuf(coordinationv1.SchemeGroupVersion)).To(BeTrue())
	g.Expect(c.protobuf(eventsv1.SchemeGroupVersion)).To(BeTrue())
	g.Expect(c.protobuf(ipv1.GroupVersion)).To(BeFalse())
	g.Expect(c.protobuf(schema.GroupVersion{Group: "unknown.example.com", Version: "v1"})).To(BeFalse())

	// What the API server answers in, seen on the wire.
	var answered, agents sync.Map
	cfg := rest.CopyConfig(testCfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			agents.Store(r.Header.Get("User-Agent"), true)
			if err == nil {
				answered.Store(r.URL.Path, resp.Header.Get("Content-Type"))
			}
			return resp, err
		})
	}
	wire, err := New(cfg, c.Scheme())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(wire.Create(testCtx, node("ct-node"))).To(Succeed())
	got := &corev1.Node{}
	g.Expect(wire.Get(testCtx, "", "ct-node", got)).To(Succeed())
	g.Expect(got.Name).To(Equal("ct-node"), "decoded from protobuf")
	ct, _ := answered.Load("/api/v1/nodes/ct-node")
	g.Expect(ct).To(Equal(runtime.ContentTypeProtobuf))
	g.Expect(wire.Create(testCtx, &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "ct-ip"}, Spec: ipv1.IPSpec{Pool: "p"}})).To(Succeed())
	ct, _ = answered.Load("/apis/ip.kubext.io/v1alpha1/ips")
	g.Expect(ct).To(Equal(runtime.ContentTypeJSON))

	// Every request names the binary, which the API server takes as the
	// field manager of what it writes (not Go's default client name).
	binary := strings.TrimSuffix(filepath.Base(os.Args[0]), ".exe")
	agents.Range(func(ua, _ any) bool {
		g.Expect(ua).To(HavePrefix(binary+"/"), "User-Agent")
		return true
	})
	created := node("ua-node")
	created.Labels = map[string]string{"written-by": "agent"}
	g.Expect(wire.Create(testCtx, created)).To(Succeed())
	g.Expect(created.ManagedFields).NotTo(BeEmpty())
	g.Expect(created.ManagedFields[0].Manager).To(Equal(binary), "field manager")
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
