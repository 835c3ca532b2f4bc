package heartbeat

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// overloadedAPIServer answers Lease GETs with the Lease and refuses every
// write with 429 and Retry-After: 1, as kube-apiserver does when the
// priority level's queues are full; it counts the requests it gets.
func overloadedAPIServer(t *testing.T) (*kubernetes.Clientset, *atomic.Int32) {
	t.Helper()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			l := coordinationv1.Lease{TypeMeta: metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
				ObjectMeta: metav1.ObjectMeta{Name: "ip-agent-node-1", Namespace: testNS, ResourceVersion: "7"}}
			_ = json.NewEncoder(w).Encode(l)
			return
		}
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
			Status: metav1.StatusFailure, Reason: metav1.StatusReasonTooManyRequests, Code: http.StatusTooManyRequests,
			Message: "too many requests, please try again later"})
	}))
	t.Cleanup(srv.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return cs, &requests
}

// A refused renewal is one request: client-go's typed client would try it
// again after each Retry-After until its context ended, behind the
// heartbeat's own backoff.
func TestSendOnceDoesNotRetryARefusedWrite(t *testing.T) {
	g := NewWithT(t)
	cs, requests := overloadedAPIServer(t)
	leases := SendOnce(cs.CoordinationV1().RESTClient()).Leases(testNS)
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()

	l, err := leases.Get(ctx, "ip-agent-node-1", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.ResourceVersion).To(Equal("7"), "the answer is decoded")
	g.Expect(requests.Load()).To(BeEquivalentTo(1))

	start := time.Now()
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	g.Expect(apierrors.IsTooManyRequests(err)).To(BeTrue(), "got %v", err)
	g.Expect(requests.Load()).To(BeEquivalentTo(2), "the refused update was sent again")
	g.Expect(time.Since(start)).To(BeNumerically("<", 500*time.Millisecond), "it waited for a Retry-After")
	_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	g.Expect(apierrors.IsTooManyRequests(err)).To(BeTrue(), "got %v", err)
	g.Expect(requests.Load()).To(BeEquivalentTo(3))
	_, err = leases.Patch(ctx, "ip-agent-node-1", types.JSONPatchType, []byte(`[]`), metav1.PatchOptions{})
	g.Expect(apierrors.IsTooManyRequests(err)).To(BeTrue(), "got %v", err)
	g.Expect(requests.Load()).To(BeEquivalentTo(4))

	// What SendOnce avoids: the typed client alone sends the same update
	// again after each Retry-After, until its context ends.
	_, err = cs.CoordinationV1().Leases(testNS).Update(ctx, l, metav1.UpdateOptions{})
	g.Expect(err).To(HaveOccurred())
	g.Expect(requests.Load()).To(BeNumerically(">=", 6), "the typed client's own retries")
}
