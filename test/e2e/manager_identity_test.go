package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/kubext/kubext/test/lab"
)

// The lab's manager runs as its deployed service account, and its leader
// election goes to the API server's leader-election priority level through
// config/flowcontrol's FlowSchema, as kube-controller-manager's does: the
// running manager's renewals are counted there. Nothing else matches that
// FlowSchema: not the manager's reads of Leases (its confirmations that a
// node is lost can come in bursts), not its Lease writes elsewhere, not
// another service account's Lease writes in kubext's namespace (an agent
// must not borrow the level).
func TestManagerLeaderElectionInTheLeaderElectionLevel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs, err := theLab.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	m, err := theLab.StartManager(ctx, "manager-apf", "--controllers=crontab")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop(10 * time.Second)
	fs, err := cs.FlowcontrolV1().FlowSchemas().Get(ctx, "kubext-leader-election", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the manager's FlowSchema is not installed with its access: %v", err)
	}

	// The running manager's leader election: it renews every retry period
	// (2 s), each renewal an update of its Lease.
	first := dispatched(ctx, t, fs.Name, "leader-election")
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, false, func(ctx context.Context) (bool, error) {
		return dispatched(ctx, t, fs.Name, "leader-election") >= first+2, nil
	})
	if err != nil {
		t.Fatalf("the manager's leader election renewals not dispatched in the leader-election level through %s (%v requests before)", fs.Name, first)
	}

	manager, agent := lab.ManagerImpersonation(), lab.IPAgentImpersonation(theLab.Nodes[0])
	lease := func(name string) []byte {
		return fmt.Appendf(nil, `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":%q},"spec":{"holderIdentity":"probe"}}`, name)
	}
	leases := "/apis/coordination.k8s.io/v1/namespaces/" + lab.SystemNamespace + "/leases"
	defer func() {
		_ = cs.CoordinationV1().Leases(lab.SystemNamespace).Delete(context.Background(), "apf-probe", metav1.DeleteOptions{})
	}()
	for _, tc := range []struct {
		what         string
		as           rest.ImpersonationConfig
		method, path string
		body         []byte
		matches      bool
	}{
		{"the manager creating a Lease in its namespace", manager, http.MethodPost, leases, lease("apf-probe"), true},
		{"the manager reading a Lease", manager, http.MethodGet, leases + "/apf-probe", nil, false},
		{"the manager listing Leases", manager, http.MethodGet, leases, nil, false},
		{"the manager creating a Lease in another namespace", manager, http.MethodPost,
			"/apis/coordination.k8s.io/v1/namespaces/default/leases", lease("apf-probe"), false},
		{"an ip-agent creating a Lease in kubext's namespace", agent, http.MethodPost, leases, lease("apf-probe-agent"), false},
	} {
		got := flowSchemaUID(ctx, t, tc.as, tc.method, tc.path, tc.body)
		if (got == string(fs.UID)) != tc.matches {
			t.Errorf("%s: classified by FlowSchema UID %q; %s is %q, want match=%v", tc.what, got, fs.Name, fs.UID, tc.matches)
		}
	}
}

// dispatched is the API server's count of requests dispatched through a
// FlowSchema into a priority level.
func dispatched(ctx context.Context, t *testing.T, flowSchema, level string) float64 {
	t.Helper()
	cs, err := theLab.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("reading the API server's metrics: %v", err)
	}
	var sum float64
	want := []string{`flow_schema="` + flowSchema + `"`, `priority_level="` + level + `"`}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_flowcontrol_dispatched_requests_total{") ||
			!strings.Contains(line, want[0]) || !strings.Contains(line, want[1]) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// flowSchemaUID makes one request as the given identity and returns the
// UID of the FlowSchema the API server classified it by (its
// X-Kubernetes-PF-FlowSchema-UID header, set whatever the answer).
func flowSchemaUID(ctx context.Context, t *testing.T, as rest.ImpersonationConfig, method, path string, body []byte) string {
	t.Helper()
	cfg, err := theLab.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate = as
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(cfg.Host, "/")+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	resp.Body.Close()
	uid := resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID")
	if uid == "" {
		t.Fatalf("%s %s: answered %s without the API priority and fairness header", method, path, resp.Status)
	}
	return uid
}
