package ipcmd

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

func pool(selector map[string]string) *ipv1.IPPool {
	p := &ipv1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Name: "lab"},
		Spec:       ipv1.IPPoolSpec{Addresses: []string{"192.0.2.0/24"}, Provider: ipv1.ProviderL2},
		Status: ipv1.IPPoolStatus{Size: 254, Allocated: 3, Available: 251, Conditions: []metav1.Condition{
			cond(ipv1.ConditionReady, "True", ipv1.ReasonReady, "ok"),
		}},
	}
	if selector != nil {
		p.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: selector}
	}
	return p
}

// cluster is a healthy three-node cluster: n1..n3 labelled ip=yes with
// live agents, plus n4 without the label.
func cluster() (map[string]*corev1.Node, map[string]*coordinationv1.Lease) {
	nodes, leases := map[string]*corev1.Node{}, map[string]*coordinationv1.Lease{}
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		labels := map[string]string{"ip": "yes"}
		if n == "n4" {
			labels = nil
		}
		nodes[n], leases[n] = node(n, labels), lease(n, time.Second)
	}
	return nodes, leases
}

func TestExplain(t *testing.T) {
	deleting := pod("web-5", "n1", true)
	deleting.DeletionTimestamp = &metav1.Time{Time: now}

	tests := []struct {
		name   string
		facts  func(f *facts)
		want   []string
		absent []string
	}{{
		name: "a pod of a namespace the IP does not allow is refused, whatever its age",
		facts: func(f *facts) {
			f.ip = readyIP()
			f.pool = pool(nil)
			thief := pod("thief", "n2", true)
			thief.Namespace = "tenant"
			f.pods = []corev1.Pod{pod("web-0", "n1", true), thief}
		},
		want: []string{
			"tenant/thief   Running  yes    n2    not eligible: REFUSED, may not claim this IP: namespace tenant is not in the IP's spec.claimants.namespaces (default)",
		},
	}, {
		name: "held on the witnesses' word, and held on the Lease for want of them",
		facts: func(f *facts) {
			f.ip = readyIP("default/web-1")
			f.ip.Status.Witnesses, f.ip.Status.AttachedGeneration = []string{"n2"}, 42
			f.pool = pool(nil)
			f.pods = []corev1.Pod{pod("web-0", "n1", true), pod("web-1", "n2", true)}
		},
		want: []string{
			"Witnesses    n2",
			"its witnesses' word (generation 42): it moves once a majority of them declare it silent",
		},
		absent: []string{"Open UDP port 7946"},
	}, {
		name: "held on the Lease because the witnesses did not vouch",
		facts: func(f *facts) {
			f.ip = readyIP("default/web-1")
			f.ip.Status.Witnesses = []string{"n2"}
			f.pool = pool(nil)
			f.pods = []corev1.Pod{pod("web-0", "n1", true), pod("web-1", "n2", true)}
		},
		want: []string{
			"its heartbeat Lease: its witnesses did not vouch for it in time (WitnessesUnreachable)",
			"none of n2 vouched in time. Open UDP port 7946",
		},
	}, {
		name: "held on the Lease because no witness was eligible when it was placed",
		facts: func(f *facts) {
			f.ip = readyIP("default/web-1")
			f.pool = pool(nil)
			f.pool.Spec.Failover = ipv1.FailoverWitness
			f.pods = []corev1.Pod{pod("web-0", "n1", true), pod("web-1", "n2", true)}
		},
		want: []string{
			"its heartbeat Lease: it moves once the Lease is not renewed for its duration",
			"Held on node n1's Lease, for want of witnesses",
			"The controller names witnesses as soon as one has",
		},
		absent: []string{"Open UDP port 7946"},
	}, {
		name: "ready, with a standby and ineligible claimants",
		facts: func(f *facts) {
			f.ip = readyIP("default/web-1")
			f.pool = pool(map[string]string{"ip": "yes"})
			f.pods = []corev1.Pod{pod("web-0", "n1", true), pod("web-1", "n2", true), pod("web-2", "", false),
				pod("web-3", "n4", true), pod("web-4", "n3", false), deleting}
			f.events = []eventsv1.Event{
				event("Normal", "Attached", "Node n1 answers for 192.0.2.10 from pool lab, held by pod default/web-0", 9*time.Minute),
			}
		},
		want: []string{
			"IP web: 192.0.2.10\n",
			"Status: READY: 192.0.2.10 answers on node n1 for pod default/web-0.",
			"lab: Ready, provider l2",
			"size 254, allocated 3, available 251",
			"nodes matching ip=yes",
			"Ready      True    Ready",
			"default/web-0  Running  yes    n1    HOLDER",
			"default/web-1  Running  yes    n2    standby #1",
			"default/web-2  Pending  no     -     not eligible: not scheduled to a node",
			"default/web-3  Running  yes    n4    not eligible: node n4 is excluded by the pool's nodeSelector (ip=yes)",
			"default/web-4  Pending  no     n3    not eligible: not Ready",
			"default/web-5  Running  yes    n1    not eligible: being deleted",
			"n1    alive, renewed 1s ago (lease 5s)  Ready",
			"n4    alive, renewed 1s ago (lease 5s)  Ready, excluded by the pool's nodeSelector",
			"(lease 5s)  Ready\n  n2 ",
			"(lease 5s)  Ready\n  n3 ",
			"The agent on n1 has confirmed the address.",
			"9m   Normal  Attached  Node n1 answers for 192.0.2.10 from pool lab, held by pod default/web-0",
		},
		absent: []string{"There is no standby"},
	}, {
		name: "an Elastic IP shows where EC2 routes it",
		facts: func(f *facts) {
			f.ip = readyIP()
			f.pool = pool(nil)
			f.pool.Spec.Provider = ipv1.ProviderAWS
			f.ip.Status.AWS = &ipv1.AWSStatus{PublicIPv4Pool: "ipv4pool-ec2-0abc", Node: "n1", InstanceID: "i-0123",
				VPCID: "vpc-1", NetworkInterfaceID: "eni-0456", PrivateIP: "10.0.1.17",
				AllocationID: "eipalloc-0789", AssociationID: "eipassoc-0abc"}
			f.pods = []corev1.Pod{pod("web-0", "n1", true)}
		},
		want: []string{"\nEC2:\n", "public: an Elastic IP from BYOIP pool ipv4pool-ec2-0abc", "ENI          eni-0456",
			"Private IP   10.0.1.17", "Allocation   eipalloc-0789", "Association  eipassoc-0abc", "Instance     i-0123",
			"EC2 routes 192.0.2.10 to n1, the holder's node."},
	}, {
		name: "an Elastic IP moved across subnets shows the private IP it left to give back",
		facts: func(f *facts) {
			f.ip = readyIP()
			f.pool = pool(nil)
			f.pool.Spec.Provider = ipv1.ProviderAWS
			f.ip.Status.AWS = &ipv1.AWSStatus{PublicIPv4Pool: "ipv4pool-ec2-0abc", Node: "n1", InstanceID: "i-0123",
				VPCID: "vpc-1", NetworkInterfaceID: "eni-0456", PrivateIP: "10.0.1.17",
				AllocationID: "eipalloc-0789", AssociationID: "eipassoc-0abc",
				GiveBack: []ipv1.AWSPrivateIP{{NetworkInterfaceID: "eni-0111", PrivateIP: "10.0.2.9"}}}
			f.pods = []corev1.Pod{pod("web-0", "n1", true)}
		},
		want: []string{"To give back  10.0.2.9 on eni-0111", "nothing answers on it", "EC2 routes 192.0.2.10 to n1, the holder's node."},
	}, {
		name: "a private aws address claimed but not yet moved in EC2",
		facts: func(f *facts) {
			f.ip = notReady(readyIP(), ipv1.ReasonEC2Attaching, "moving 192.0.2.10 to node n1 in EC2")
			f.pool = pool(nil)
			f.pool.Spec.Provider = ipv1.ProviderAWS
			f.ip.Status.AttachedPod = ""
			f.ip.Status.AWS = &ipv1.AWSStatus{Node: "n2", NetworkInterfaceID: "eni-2", PrivateIP: "192.0.2.10"}
			f.pods = []corev1.Pod{pod("web-0", "n1", true)}
		},
		want:   []string{"private: the address is a secondary private IP", "Moving: the agent on n1 has claimed the address"},
		absent: []string{"Allocation"},
	}, {
		name: "ready without standby warns",
		facts: func(f *facts) {
			f.ip = readyIP()
			f.pool = pool(nil)
			f.pods = []corev1.Pod{pod("web-0", "n1", true)}
		},
		want: []string{"There is no standby: if node n1 fails",
			"default/web-0  Running  yes    n1    HOLDER\n", "all nodes", "Standbys     -", "Recent events (oldest first):\n  none"},
	}, {
		name: "holder no longer Ready",
		facts: func(f *facts) {
			f.ip = readyIP()
			f.pods = []corev1.Pod{pod("web-0", "n1", false)}
		},
		want: []string{"HOLDER, but no longer eligible: not Ready (the controller will hand over)"},
	}, {
		name: "no claimant",
		facts: func(f *facts) {
			f.ip = notReady(readyIP(), ipv1.ReasonNoClaimant, "no pod claims this IP")
			f.ip.Status.Node, f.ip.Status.AttachedNode, f.ip.Status.Pod = "", "", ""
			f.pool = pool(nil)
		},
		want: []string{
			"Status: NOT READY (NoClaimant): no pod claims this IP.",
			"Add the annotation ip.kubext.io/ip: web to the pods",
			"The address is attached to no node.",
			"Claiming pods (annotation ip.kubext.io/ip: web):\n  none",
			"no node involved",
		},
	}, {
		name: "waiting for a dead agent",
		facts: func(f *facts) {
			f.ip = notReady(readyIP(), ipv1.ReasonWaitingForAgent, "waiting for the agent on n2 to attach 192.0.2.10")
			f.ip.Status.Node, f.ip.Status.AttachedNode, f.ip.Status.Pod = "n2", "", "default/web-1"
			f.pool = pool(nil)
			f.pods = []corev1.Pod{pod("web-1", "n2", true)}
			f.leases["n2"] = lease("n2", 2*time.Minute)
		},
		want: []string{
			"Status: NOT READY (WaitingForAgent)",
			"The agent on node n2 is NOT ALIVE: last renewed 2m ago, lease 5s ran out 115s ago. Check the ip-agent pod on that node (namespace kubext-system).",
			"Attaching: waiting for the agent on n2 to confirm.",
		},
	}, {
		name: "detaching from a live node, move pending",
		facts: func(f *facts) {
			f.ip = notReady(readyIP(), ipv1.ReasonDetaching, "handing over to default/web-1: waiting for node n1 to release 192.0.2.10")
			f.ip.Status.Node, f.ip.Status.Pod = "", "default/web-1"
			f.ip.Annotations = map[string]string{ipv1.AnnotationMoveTo: "default/web-1"}
			f.pool = pool(nil)
			f.pods = []corev1.Pod{pod("web-0", "n1", true), pod("web-1", "n2", true)}
		},
		want: []string{
			"Node n1 still answers for the address and must release it",
			"The agent on node n1 is alive; it should release the address within seconds.",
			"A move to default/web-1 is pending",
			"Moving: node n1 must release the address before it goes to default/web-1.",
			"default/web-0  Running  yes    n1    eligible, not listed as standby yet",
			"default/web-1  Running  yes    n2    HOLDER (next): waiting for node n1 to release the address",
		},
	}, {
		name: "agent without a lease, node missing, pool missing",
		facts: func(f *facts) {
			f.ip = notReady(readyIP(), ipv1.ReasonNoEligibleNode, "no claiming pod can hold the address")
			f.ip.Status.Node, f.ip.Status.AttachedNode, f.ip.Status.Pod = "", "", ""
			f.pods = []corev1.Pod{pod("web-0", "gone", true)}
		},
		want: []string{
			"Pool     lab: NOT FOUND",
			"gone  NOT ALIVE: no Lease ip-agent-gone in namespace kubext-system",
			"node not found",
			"not eligible: the agent on node gone is not alive",
			"none can hold it",
		},
	}, {
		name: "pool exhausted, not processed for the latest generation",
		facts: func(f *facts) {
			f.ip = &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "web", Generation: 2}, Spec: ipv1.IPSpec{Pool: "lab"}}
			f.ip.Status.ObservedGeneration = 1
			f.ip.Status.Conditions = []metav1.Condition{
				cond(ipv1.ConditionAllocated, "False", ipv1.ReasonPoolExhausted, "pool lab has no free address"),
				cond(ipv1.ConditionReady, "False", ipv1.ReasonPoolExhausted, "pool lab has no free address"),
			}
			f.pool = pool(nil)
		},
		want: []string{
			"IP web: no address yet",
			"Pool lab has no free address: add a range",
			"status describes generation 1 but the spec is at generation 2",
			"Allocated  False   PoolExhausted",
		},
	}, {
		name: "never processed",
		facts: func(f *facts) {
			f.ip = &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: ipv1.IPSpec{Address: "192.0.2.99"}}
		},
		want: []string{
			"Status: NOT READY: the controller has not processed this IP yet. Is the kubext manager running?",
			"Address  - (spec.address asks for 192.0.2.99)",
			"Pool     none found",
			"Conditions:\n  none yet",
		},
	}, {
		name: "only the latest events, repeated ones counted",
		facts: func(f *facts) {
			f.ip = readyIP("default/web-1")
			for i := 20; i > 0; i-- {
				f.events = append(f.events, event("Normal", "Old", "old", time.Duration(i)*time.Hour))
			}
			e := event("Warning", reasonMoveRefused, "Cannot move web to default/web-9", time.Minute)
			e.Series = &eventsv1.EventSeries{Count: 3, LastObservedTime: metav1.NewMicroTime(now.Add(-time.Minute))}
			f.events = append(f.events, e)
		},
		want:   []string{"60s (x3)  Warning  MoveRefused  Cannot move web to default/web-9", "120m      Normal"},
		absent: []string{"10h", "20h"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes, leases := cluster()
			f := facts{nodes: nodes, leases: leases, leaseNamespace: "kubext-system", now: now}
			tt.facts(&f)
			got := explain(f)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("explanation lacks %q", w)
				}
			}
			for _, a := range tt.absent {
				if strings.Contains(got, a) {
					t.Errorf("explanation has %q", a)
				}
			}
			if t.Failed() {
				t.Log("\n" + got)
			}
		})
	}
}
