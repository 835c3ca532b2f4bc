package reboot

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
	"github.com/kubext/kubext/internal/rebootplan"
)

// A node whose reboot-agent has stopped renewing its heartbeat Lease is
// not approved, although its group has room: drained and cordoned, it
// would wait for an order nothing carries out, and end up stuck. It waits
// with a reason (an Event) until its agent renews again, then goes.
// Before agents were checked, it was approved at once.
func TestApprovesOnlyNodesWithALiveAgent(t *testing.T) {
	g := makeGroup(t, "alive", intstr.FromInt32(2), nil)
	makeNode(t, g.Name, "alive-dead", nil)
	makeNode(t, g.Name, "alive-ok", nil)
	startAgents(t, g.Name, 0)
	stopHeartbeat("alive-dead")
	// Past the Lease's 3s duration since the controller last saw it
	// renewed.
	time.Sleep(4 * time.Second)
	annotate(t, "alive-dead", rebootv1.AnnotationNeeded, "true")
	annotate(t, "alive-ok", rebootv1.AnnotationNeeded, "true")

	eventually(t, "alive-ok rebooted", func() (bool, error) { return protocolDone(getNode(t, "alive-ok")), nil })
	// Its Lease "was last renewed ... ago", or, on a loaded machine where
	// the controller saw no renewal before the heartbeat stopped, "no
	// renewal ... seen".
	eventually(t, "the wait announced", hasEvent(t, "alive-dead", string(rebootplan.ReasonAgentNotAlive),
		"heartbeat Lease reboot-agent-alive-dead"))
	n := getNode(t, "alive-dead")
	if _, ok := n.Annotations[rebootv1.AnnotationInProgress]; ok || n.Spec.Unschedulable {
		t.Fatalf("alive-dead approved (cordoned %v) while its agent is dead: %v", n.Spec.Unschedulable, n.Annotations)
	}

	startHeartbeat(t, "alive-dead")
	eventually(t, "alive-dead rebooted once its agent is back", func() (bool, error) {
		return protocolDone(getNode(t, "alive-dead")), nil
	})
}
