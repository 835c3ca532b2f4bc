package main

import "testing"

func TestResourceOf(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/namespaces/default/pods":                                   "pods",
		"/api/v1/nodes/node-1":                                              "nodes",
		"/apis/coordination.k8s.io/v1/namespaces/kubext-system/leases/ip-a": "leases",
		"/apis/ip.kubext.io/v1alpha1/ips/web/status":                        "ips/status",
		"/apis/ip.kubext.io/v1alpha1/ips":                                   "ips",
		"/apis/events.k8s.io/v1/namespaces/default/events":                  "events",
		"/api/v1/namespaces/default/pods/p/status":                          "pods/status",
	} {
		if got := resourceOf(path); got != want {
			t.Errorf("resourceOf(%q) = %q, want %q", path, got, want)
		}
	}
}
