package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// The leader election's client has a connection and a rate limiter of its
// own: two clients made from the manager's configuration share one
// connection (client-go's transport cache), the leader election's opens
// another; and the controllers' token bucket, emptied, does not hold it.
func TestLeaderElectionHasItsOwnConnectionAndLimiter(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Success"}`))
	}))
	srv.EnableHTTP2 = true
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	defer srv.Close()

	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 100, Burst: 200}
	get := func(c *rest.Config) {
		t.Helper()
		hc, err := rest.HTTPClientFor(c)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Get(srv.URL + "/version")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	get(cfg)
	get(rest.CopyConfig(cfg))
	if n := conns.Load(); n != 1 {
		t.Fatalf("two clients of the manager's configuration opened %d connections; the test expects client-go to share one", n)
	}
	le := leaderElectionConfig(cfg)
	get(le)
	if n := conns.Load(); n != 2 {
		t.Errorf("the leader election's client shares the controllers' connection (%d connections in all, want 2)", n)
	}

	// A limiter set on the manager's configuration (shared by every client
	// made from it) is not the leader election's.
	cfg.RateLimiter = flowcontrol.NewFakeNeverRateLimiter()
	if leaderElectionConfig(cfg).RateLimiter != nil {
		t.Error("the leader election's client takes the controllers' rate limiter")
	}
	if le.QPS <= 0 || le.Burst <= 0 {
		t.Errorf("the leader election's client has no limit of its own: QPS %v burst %d", le.QPS, le.Burst)
	}
}
