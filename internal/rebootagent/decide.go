// Package rebootagent is the node side of coordinated reboots: one agent per
// node asks for a reboot when the node's sentinel file appears, and reboots
// the node when the controller orders it, at most once per boot.
//
// The agent writes exactly one thing to the API server besides Events: the
// annotation reboot.kubext.io/needed=true on its own Node. Everything else in
// the protocol (api/reboot/v1alpha1/protocol.go) is the controller's. The
// agent reboots only while the boot ID the controller recorded when it
// approved the node is still the node's boot ID, so an approval can never
// reboot a node twice, whatever restarts, slow reboots or stale caches
// happen in between.
package rebootagent

import (
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

// Order is the controller's order to reboot, as the agent reads it from its
// Node.
type Order struct {
	// BootID is the boot the order is for (reboot.kubext.io/boot-id).
	BootID string
}

// RebootOrder says whether node carries an order to reboot that is still
// valid: reboot.kubext.io/now is set and reboot.kubext.io/boot-id equals the
// node's current boot ID. localBootID is the boot ID the machine itself
// reports (/proc/sys/kernel/random/boot_id), or "" where the agent cannot
// read it (the lab); when given it must match too, because right after a
// reboot the Node's status may still show the old boot ID until the kubelet
// reports the new one. When there is no valid order, why says what is
// missing, for the log.
func RebootOrder(node *corev1.Node, localBootID string) (o Order, ok bool, why string) {
	if _, now := node.Annotations[rebootv1.AnnotationNow]; !now {
		return Order{}, false, "no reboot ordered"
	}
	want := node.Annotations[rebootv1.AnnotationBootID]
	current := node.Status.NodeInfo.BootID
	switch {
	case want == "":
		// Without the boot ID the order cannot be fenced: it could be
		// obeyed again after the reboot.
		return Order{}, false, fmt.Sprintf("%s is set without %s; not rebooting", rebootv1.AnnotationNow, rebootv1.AnnotationBootID)
	case current != want:
		return Order{}, false, fmt.Sprintf("the order is for boot %s, the node is in boot %s: the reboot already happened", want, current)
	case localBootID != "" && localBootID != want:
		return Order{}, false, fmt.Sprintf("the order is for boot %s, the machine is in boot %s: the reboot already happened", want, localBootID)
	}
	return Order{BootID: want}, true, ""
}

// Sentinel is what the agent found at the node's sentinel path.
type Sentinel struct {
	// Present says whether the file exists.
	Present bool
	// Modified is the file's modification time.
	Modified time.Time
}

// SentinelAction is what to do about the sentinel file.
type SentinelAction int

const (
	// SentinelNothing means there is no file, or the node already asks for
	// a reboot, or a person declined one (needed=false).
	SentinelNothing SentinelAction = iota
	// SentinelRequest means: set reboot.kubext.io/needed=true.
	SentinelRequest
	// SentinelStale means the file predates the machine's current boot, so
	// the reboot it asks for has already happened; leave the node alone.
	SentinelStale
)

// SentinelDecision says what the sentinel means for node. bootTime is when
// the machine last booted, on the same clock as the file's modification
// time (zero when unknown). A file on a tmpfs such as /var/run vanishes
// with the reboot; one that survives it would otherwise ask for one reboot
// after another.
func SentinelDecision(node *corev1.Node, s Sentinel, bootTime time.Time) SentinelAction {
	if !s.Present {
		return SentinelNothing
	}
	if rebootv1.Needed(node.Annotations) || rebootv1.Declined(node.Annotations) {
		// Asked already, or a person said no: the file does not
		// overrule them.
		return SentinelNothing
	}
	if !bootTime.IsZero() && s.Modified.Before(bootTime) {
		return SentinelStale
	}
	return SentinelRequest
}

// attempts remembers, in memory, which boot the agent already ran the reboot
// command for, so that a reboot that takes a while (the Node still shows the
// old boot ID and the order) does not run it again. A command that failed is
// retried with backoff: the machine evidently did not reboot, and the boot
// ID fencing keeps a retry from ever rebooting a later boot.
type attempts struct {
	bootID    string
	succeeded bool
	// backoff yields the waits between failed commands for bootID; it
	// starts over with each boot.
	backoff wait.Backoff
	next    time.Time
}

const (
	// retryBase and retryMax bound the backoff between failed reboot
	// commands.
	retryBase = 5 * time.Second
	retryMax  = 5 * time.Minute
)

// retryBackoff doubles the wait from retryBase after each failed command,
// up to retryMax, which it then keeps (Steps is spent only by doubling).
func retryBackoff() wait.Backoff {
	return wait.Backoff{Duration: retryBase, Factor: 2, Cap: retryMax, Steps: math.MaxInt32}
}

// due says whether the command should run now for bootID, and if not but
// it will be later, how long to wait.
func (a *attempts) due(bootID string, now time.Time) (run bool, after time.Duration) {
	if a.bootID != bootID {
		return true, 0
	}
	if a.succeeded {
		return false, 0
	}
	if now.Before(a.next) {
		return false, a.next.Sub(now)
	}
	return true, 0
}

// record notes the outcome of running the command for bootID at now; after
// a failure it returns how long to wait before the retry.
func (a *attempts) record(bootID string, err error, now time.Time) (retryIn time.Duration) {
	if a.bootID != bootID {
		*a = attempts{bootID: bootID, backoff: retryBackoff()}
	}
	if err == nil {
		a.succeeded = true
		return 0
	}
	retryIn = a.backoff.Step()
	a.next = now.Add(retryIn)
	return retryIn
}
