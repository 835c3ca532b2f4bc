// Package heartbeattest adapts client-go's typed Lease client (a fake
// clientset's, in tests) to what a Heartbeat takes. Agents do not import
// it: it links the typed clientset they are built without.
package heartbeattest

import (
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/kubext/kubext/internal/heartbeat"
)

// Typed is c as a heartbeat.LeasesGetter. Unlike heartbeat.SendOnce, its
// requests are retried as the typed client retries them.
func Typed(c coordinationclient.LeasesGetter) heartbeat.LeasesGetter { return typed{c} }

type typed struct {
	c coordinationclient.LeasesGetter
}

func (t typed) Leases(namespace string) heartbeat.LeaseInterface { return t.c.Leases(namespace) }
