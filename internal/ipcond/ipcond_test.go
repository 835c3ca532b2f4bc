package ipcond

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

func TestSummarize(t *testing.T) {
	allocated := metav1.Condition{Type: ipv1.ConditionAllocated, Status: metav1.ConditionTrue, Reason: ipv1.ReasonAddressAllocated}
	attached := metav1.Condition{Type: ipv1.ConditionAttached, Status: metav1.ConditionTrue, Reason: ipv1.ReasonAgentConfirmed}
	exhausted := metav1.Condition{Type: ipv1.ConditionAllocated, Status: metav1.ConditionFalse, Reason: ipv1.ReasonPoolExhausted, Message: "pool p has no free address left"}
	waiting := metav1.Condition{Type: ipv1.ConditionAttached, Status: metav1.ConditionFalse, Reason: ipv1.ReasonWaitingForAgent, Message: "no address is allocated"}
	for _, tc := range []struct {
		name       string
		conditions []metav1.Condition
		want       metav1.Condition
	}{
		{name: "nothing evaluated", want: metav1.Condition{Status: metav1.ConditionFalse, Reason: ipv1.ReasonReconciling, Message: "Allocated not evaluated yet"}},
		{name: "attachment not evaluated", conditions: []metav1.Condition{allocated},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: ipv1.ReasonReconciling, Message: "Attached not evaluated yet"}},
		{name: "allocation failed first", conditions: []metav1.Condition{exhausted, waiting},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: ipv1.ReasonPoolExhausted, Message: exhausted.Message}},
		{name: "waiting for the agent", conditions: []metav1.Condition{allocated, waiting},
			want: metav1.Condition{Status: metav1.ConditionFalse, Reason: ipv1.ReasonWaitingForAgent, Message: waiting.Message}},
		{name: "ready", conditions: []metav1.Condition{allocated, attached},
			want: metav1.Condition{Status: metav1.ConditionTrue, Reason: ipv1.ReasonReady, Message: "192.0.2.7 answers on node n1 for pod default/web-0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ip := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "front", Generation: 3},
				Status: ipv1.IPStatus{Address: "192.0.2.7", Node: "n1", Pod: "default/web-0", Conditions: tc.conditions}}
			Summarize(ip)
			got := *meta.FindStatusCondition(ip.Status.Conditions, ipv1.ConditionReady)
			g.Expect(got.Status).To(Equal(tc.want.Status))
			g.Expect(got.Reason).To(Equal(tc.want.Reason))
			g.Expect(got.Message).To(Equal(tc.want.Message))
			g.Expect(got.ObservedGeneration).To(Equal(int64(3)))
		})
	}
}
