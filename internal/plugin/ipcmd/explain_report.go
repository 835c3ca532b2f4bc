package ipcmd

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubectl/pkg/util/podutils"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/plugin"
)

// explanationReport is `ip explain -o json|yaml`: the same facts and
// judgements as the report for people (the same functions make both), as
// fields a script can test.
type explanationReport struct {
	plugin.Report
	Time    time.Time `json:"time"`
	Name    string    `json:"name"`
	Address string    `json:"address,omitempty"`
	// Ready is the Ready condition's status: True, False, or Unknown when
	// the controller has not processed the IP yet.
	Ready     metav1.ConditionStatus `json:"ready"`
	Reason    string                 `json:"reason,omitempty"`
	Message   string                 `json:"message,omitempty"`
	Diagnosis []string               `json:"diagnosis"`
	Pool      *poolReport            `json:"pool,omitempty"`
	// Conditions are the IP's conditions as they are in its status.
	Conditions []metav1.Condition `json:"conditions"`
	Placement  placementReport    `json:"placement"`
	Nodes      []nodeReport       `json:"nodes"`
	Pods       []podReport        `json:"pods"`
	// Events are the IP's latest events, oldest first.
	Events []eventReport `json:"events"`
}

type poolReport struct {
	Name string `json:"name"`
	// Found is false when the IP names a pool that does not exist.
	Found     bool                `json:"found"`
	Provider  ipv1.Provider       `json:"provider,omitempty"`
	Ready     string              `json:"ready,omitempty"`
	Size      int64               `json:"size"`
	Allocated int64               `json:"allocated"`
	Available int64               `json:"available"`
	Nodes     string              `json:"nodes,omitempty"`
	Claimants *ipv1.PoolClaimants `json:"claimants,omitempty"`
}

type placementReport struct {
	Holder       string       `json:"holder,omitempty"`
	Node         string       `json:"node,omitempty"`
	AttachedNode string       `json:"attachedNode,omitempty"`
	AttachedPod  string       `json:"attachedPod,omitempty"`
	Standbys     []string     `json:"standbys"`
	LastMoveTime *metav1.Time `json:"lastMoveTime,omitempty"`
	// Witnesses and AttachedGeneration: Witness failover.
	Witnesses          []string `json:"witnesses,omitempty"`
	AttachedGeneration int64    `json:"attachedGeneration,omitempty"`
}

type nodeReport struct {
	Name       string `json:"name"`
	AgentAlive bool   `json:"agentAlive"`
	Agent      string `json:"agent"`
	Status     string `json:"status"`
}

type podReport struct {
	Name  string `json:"name"`
	Phase string `json:"phase,omitempty"`
	Ready bool   `json:"ready"`
	Node  string `json:"node,omitempty"`
	Role  string `json:"role"`
}

type eventReport struct {
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Count   int32     `json:"count,omitempty"`
}

func newExplanationReport(f *facts) explanationReport {
	ip := f.ip
	st := ip.Status
	r := explanationReport{
		Report: plugin.NewReport("IPExplanation"), Time: f.now.UTC(), Name: ip.Name, Address: st.Address,
		Ready: metav1.ConditionUnknown, Diagnosis: []string{}, Conditions: st.Conditions,
		Placement: placementReport{Holder: st.Pod, Node: st.Node, AttachedNode: st.AttachedNode, AttachedPod: st.AttachedPod,
			Standbys: st.Standbys, LastMoveTime: st.LastMoveTime, Witnesses: st.Witnesses, AttachedGeneration: st.AttachedGeneration},
		Nodes: []nodeReport{}, Pods: []podReport{}, Events: []eventReport{},
	}
	if r.Conditions == nil {
		r.Conditions = []metav1.Condition{}
	}
	if r.Placement.Standbys == nil {
		r.Placement.Standbys = []string{}
	}
	ready := meta.FindStatusCondition(st.Conditions, ipv1.ConditionReady)
	if ready != nil {
		r.Ready, r.Reason, r.Message = ready.Status, ready.Reason, ready.Message
	}
	r.Diagnosis = append(r.Diagnosis, diagnose(f, ready)...)
	if name := poolName(ip); name != "" {
		r.Pool = &poolReport{Name: name}
		if p := f.pool; p != nil {
			r.Pool.Found, r.Pool.Provider, r.Pool.Claimants = true, p.Spec.Provider, p.Spec.Claimants
			r.Pool.Size, r.Pool.Allocated, r.Pool.Available = p.Status.Size, int64(p.Status.Allocated), p.Status.Available
			if c := meta.FindStatusCondition(p.Status.Conditions, ipv1.ConditionReady); c != nil {
				r.Pool.Ready = string(c.Status)
			}
			sel, invalid := f.nodeSelector()
			switch {
			case invalid != "":
				r.Pool.Nodes = invalid
			case sel != nil:
				r.Pool.Nodes = sel.String()
			}
		}
	}
	sel, _ := f.nodeSelector()
	for _, name := range involvedNodes(ip, f.pods) {
		a := f.agentOf(name)
		r.Nodes = append(r.Nodes, nodeReport{Name: name, AgentAlive: a.alive, Agent: a.state, Status: nodeStatus(f.nodes[name], sel)})
	}
	for i := range f.pods {
		p := &f.pods[i]
		r.Pods = append(r.Pods, podReport{Name: p.Namespace + "/" + p.Name, Phase: string(p.Status.Phase), Ready: podutils.IsPodReady(p),
			Node: p.Spec.NodeName, Role: f.role(p)})
	}
	for i := range f.events[max(0, len(f.events)-shownEvents):] {
		e := &f.events[max(0, len(f.events)-shownEvents)+i]
		er := eventReport{Time: eventTime(e).UTC(), Type: e.Type, Reason: e.Reason, Message: e.Note}
		if e.Series != nil {
			er.Count = e.Series.Count
		}
		r.Events = append(r.Events, er)
	}
	return r
}

// poolName is the IP's pool: the one it was allocated from, else the one
// its spec asks for.
func poolName(ip *ipv1.IP) string {
	if ip.Status.Pool != "" {
		return ip.Status.Pool
	}
	return ip.Spec.Pool
}
