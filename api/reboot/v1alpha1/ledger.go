package v1alpha1

import (
	"encoding/json"
	"fmt"
)

// The approvals ledger is the reboot controller's record of every reboot
// slot it granted and has not given back (internal/controller/reboot,
// ledger.go, holds its protocol): one ConfigMap in the controller's
// namespace that only the controller may write. The reboot-agents read it
// too: an order on a node is carried out only when the ledger holds that
// very order (the approval, the order's time and the boot it ends, as the
// node shows them), so an order written by anyone else (a forged
// reboot.kubext.io/now, should the admission policy be missing or
// bypassed, or set by hand on a node still draining) is traced to nobody
// and ignored.
const (
	// DefaultLedgerName is the ledger's ConfigMap name, unless the
	// manager's --reboot-ledger-name (and the agents') says otherwise.
	DefaultLedgerName = "kubext-reboot-ledger"
	// LedgerKey is the ConfigMap key holding the slots, as JSON: an object
	// of LedgerSlots by node name.
	LedgerKey = "slots"
)

// LedgerSlot is one granted slot.
// +kubebuilder:object:generate=false
type LedgerSlot struct {
	// Group is the RebootGroup the slot counts against.
	Group string `json:"group"`
	// Approval is the approval's timestamp, the value written to the node
	// as reboot.kubext.io/in-progress.
	Approval string `json:"approval"`
	// NodeResourceVersion is the node's resourceVersion the grant was
	// decided from: its patch is conditional on it.
	NodeResourceVersion string `json:"nodeResourceVersion"`
	// ControlPlane records that the node counted as a control-plane node.
	ControlPlane bool `json:"controlPlane,omitempty"`
	// Confirmed is set once the approval was seen on the node.
	Confirmed bool `json:"confirmed,omitempty"`
	// Order is the reboot.kubext.io/now the controller wrote when it
	// ordered the node's reboot, recorded here before the node patch; ""
	// until the reboot is ordered (the node is draining, or waits).
	Order string `json:"order,omitempty"`
	// BootID is the boot the order ends (reboot.kubext.io/boot-id as
	// ordered), recorded with Order.
	BootID string `json:"bootID,omitempty"`
	// TimeoutSeconds is the group's rebootTimeoutSeconds when the slot was
	// granted: how long the slot of a node that vanished is kept once its
	// group is gone too (while the group exists, its spec says). Zero (a
	// slot written before the field existed): the default timeout.
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
}

// ParseLedger reads the slots of a ledger ConfigMap's data (empty data:
// no slot). A ledger that does not parse is an error, never a guess.
func ParseLedger(data map[string]string) (map[string]LedgerSlot, error) {
	slots := map[string]LedgerSlot{}
	if s := data[LedgerKey]; s != "" {
		if err := json.Unmarshal([]byte(s), &slots); err != nil {
			return nil, fmt.Errorf("the reboot ledger's %q is not valid JSON: %w", LedgerKey, err)
		}
	}
	return slots, nil
}
