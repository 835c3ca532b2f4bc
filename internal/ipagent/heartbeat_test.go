package ipagent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/heartbeat"
)

// Against the real API server, as the deployed ip-agent (its service
// account bound to its node, its RBAC and admission policy): a renewal
// whose answer was lost (it landed, the client never heard) is followed
// by one request, a JSON patch tested on the run's incarnation, not by a
// read; and such a patch from an old run, held in flight until a new run
// of the agent took the Lease over, is refused and changes nothing.
func TestHeartbeatRenewsWithoutAReadAfterALostAnswer(t *testing.T) {
	g := NewWithT(t)
	in := install{namespace: agentNamespace, namePrefix: "kubext-", dir: "config/default"}
	installAgentAccess(t, in)
	const node = node1
	key := client.ObjectKey{Namespace: agentNamespace, Name: heartbeat.LeaseName(ipv1.AgentComponent, node)}
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}})
	})
	lease := func(g Gomega) *coordinationv1.Lease {
		l := &coordinationv1.Lease{}
		g.Expect(k8s.Get(context.Background(), key, l)).To(Succeed())
		return l
	}

	old := &leaseWire{}
	stopOld := runHeartbeat(t, in, node, old)
	g.Eventually(func() int { return old.count("PUT", http.StatusOK) }, 10*time.Second, 20*time.Millisecond).Should(BeNumerically(">=", 3))
	oldRun := lease(g).Annotations[heartbeat.AnnotationIncarnation]
	g.Expect(oldRun).NotTo(BeEmpty())

	// One update lands, its answer is lost: the next request is a patch.
	lost := old.loseNextPut()
	g.Eventually(func() []string { return old.after(lost, 2) }, 5*time.Second, 20*time.Millisecond).
		Should(Equal([]string{"PATCH 200", "PUT 200"}), "after the lost answer: one patch that lands, then updates again")
	g.Expect(old.count("GET", 0)).To(Equal(1), "the Lease was read again (only the first renewal reads it)")

	// Lost again, and the patch that follows is held in flight while this
	// run stops and a new one takes the Lease over.
	release := old.holdPatches()
	lost = old.loseNextPut()
	g.Eventually(func() []string { return old.after(lost, 1) }, 5*time.Second, 20*time.Millisecond).Should(Equal([]string{"PATCH held"}))
	stopOld()
	renewed := lease(g).Spec.RenewTime

	next := &leaseWire{}
	stopNext := runHeartbeat(t, in, node, next)
	defer stopNext()
	var newRun string
	g.Eventually(func(g Gomega) {
		l := lease(g)
		g.Expect(l.Spec.RenewTime.After(renewed.Time)).To(BeTrue())
		newRun = l.Annotations[heartbeat.AnnotationIncarnation]
		g.Expect(newRun).NotTo(Equal(oldRun))
	}, 5*time.Second, 20*time.Millisecond).Should(Succeed())

	statuses := release()
	g.Expect(statuses).NotTo(BeEmpty())
	for _, s := range statuses {
		g.Expect(s).To(Equal(http.StatusUnprocessableEntity), "the old run's patch, tested on its incarnation")
	}
	g.Expect(lease(g).Annotations).To(HaveKeyWithValue(heartbeat.AnnotationIncarnation, newRun))
}

// runHeartbeat runs the ip-agent's heartbeat for node as the deployed
// agent does (lease 2 s, renewed every 500 ms here 200 ms, requests sent
// once), through w.
func runHeartbeat(t *testing.T, in install, node string, w *leaseWire) (stop func()) {
	t.Helper()
	cfg := agentConfig(in, node)
	cfg.Wrap(w.wrap)
	hb, err := heartbeat.New(heartbeat.Config{
		Client: heartbeat.SendOnce(kubernetes.NewForConfigOrDie(cfg).CoordinationV1().RESTClient()), Namespace: agentNamespace,
		Component: ipv1.AgentComponent, Node: node, Duration: 2 * time.Second, RenewInterval: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hb.Start(ctx)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// leaseWire sits between a heartbeat and the API server: it records each
// Lease request's method and status, can let an update land and lose its
// answer, and can hold patches in flight until released.
type leaseWire struct {
	mu      sync.Mutex
	log     []string
	lose    atomic.Bool
	holding bool
	held    []func() int
}

func (w *leaseWire) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		w.mu.Lock()
		if req.Method == http.MethodPatch && w.holding {
			// Sent later, whatever the client does meanwhile: a request
			// the API server took in before the client gave up.
			detached := req.Clone(context.WithoutCancel(req.Context()))
			w.held = append(w.held, func() int {
				resp, err := rt.RoundTrip(detached)
				if err != nil {
					return 0
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				return resp.StatusCode
			})
			w.log = append(w.log, "PATCH held")
			w.mu.Unlock()
			<-req.Context().Done()
			return nil, req.Context().Err()
		}
		w.mu.Unlock()
		resp, err := rt.RoundTrip(req)
		status := 0
		if err == nil {
			status = resp.StatusCode
		}
		if err == nil && req.Method == http.MethodPut && w.lose.CompareAndSwap(true, false) {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			w.record(fmt.Sprintf("PUT %d lost", status))
			return nil, context.DeadlineExceeded
		}
		w.record(fmt.Sprintf("%s %d", req.Method, status))
		return resp, err
	})
}

func (w *leaseWire) record(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.log = append(w.log, s)
}

// loseNextPut makes the next update land and lose its answer; it returns
// the position in the log after which to look.
func (w *leaseWire) loseNextPut() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lose.Store(true)
	return len(w.log)
}

// after returns the n requests after the lost update logged from position
// from on (nil until they are there).
func (w *leaseWire) after(from, n int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := slices.IndexFunc(w.log[from:], func(s string) bool { return s == "PUT 200 lost" })
	if i < 0 || len(w.log) < from+i+1+n {
		return nil
	}
	return slices.Clone(w.log[from+i+1 : from+i+1+n])
}

// count counts the requests of method answered with status (0: any).
func (w *leaseWire) count(method string, status int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, s := range w.log {
		var m string
		var st int
		if _, err := fmt.Sscanf(s, "%s %d", &m, &st); err == nil && m == method && (status == 0 || st == status) {
			n++
		}
	}
	return n
}

// holdPatches holds patches from now on; release sends them and returns
// their statuses.
func (w *leaseWire) holdPatches() (release func() []int) {
	w.mu.Lock()
	w.holding = true
	w.mu.Unlock()
	return func() []int {
		w.mu.Lock()
		w.holding = false
		held := w.held
		w.held = nil
		w.mu.Unlock()
		var out []int
		for _, send := range held {
			out = append(out, send())
		}
		return out
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
