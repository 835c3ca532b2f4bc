package ipam

import (
	"slices"
	"strings"
	"testing"
	"time"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

func TestChooseHolder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pod := func(key, node string, age int) Claimant {
		return Claimant{Key: key, Node: node, Ready: true, Created: t0.Add(time.Duration(age) * time.Second)}
	}
	notReady := func(c Claimant) Claimant { c.Ready = false; return c }
	deleting := func(c Claimant) Claimant { c.Deleting = true; return c }

	tests := map[string]struct {
		current   string
		claimants []Claimant
		unhealthy []string
		excluded  []string

		holder   string
		standbys []string
		reason   string
		message  string
	}{
		"no claimant": {
			reason: ipv1.ReasonNoClaimant,
		},
		"first assignment takes the oldest": {
			claimants: []Claimant{pod("ns/b", "n2", 2), pod("ns/a", "n1", 1), pod("ns/c", "n3", 3)},
			holder:    "ns/a",
			standbys:  []string{"ns/b", "ns/c"},
		},
		"same creation time breaks the tie by key": {
			claimants: []Claimant{pod("ns/b", "n2", 1), pod("ns/a", "n1", 1)},
			holder:    "ns/a",
			standbys:  []string{"ns/b"},
		},
		"current holder stays although an older pod became Ready": {
			current:   "ns/b",
			claimants: []Claimant{pod("ns/a", "n1", 1), pod("ns/b", "n2", 2), pod("ns/c", "n3", 3)},
			holder:    "ns/b",
			standbys:  []string{"ns/a", "ns/c"},
		},
		"holder not Ready moves to the oldest standby": {
			current:   "ns/a",
			claimants: []Claimant{notReady(pod("ns/a", "n1", 1)), pod("ns/c", "n3", 3), pod("ns/b", "n2", 2)},
			holder:    "ns/b",
			standbys:  []string{"ns/c"},
		},
		"holder node unhealthy moves to the standby": {
			current:   "ns/a",
			claimants: []Claimant{pod("ns/a", "n1", 1), pod("ns/b", "n2", 2)},
			unhealthy: []string{"n1"},
			holder:    "ns/b",
		},
		"holder node unhealthy and no standby": {
			current:   "ns/a",
			claimants: []Claimant{pod("ns/a", "n1", 1), notReady(pod("ns/b", "n2", 2))},
			unhealthy: []string{"n1"},
			reason:    ipv1.ReasonNodeLost,
			message:   "node n1 of holder ns/a stopped renewing its heartbeat and no standby can take over: ns/a is on node n1, whose agent is not renewing its heartbeat; ns/b is not Ready",
		},
		"holder gone and no standby": {
			current:   "ns/a",
			claimants: []Claimant{notReady(pod("ns/b", "n2", 2))},
			reason:    ipv1.ReasonNoEligibleNode,
			message:   "no claiming pod can hold the address: ns/b is not Ready",
		},
		"deleting pod is skipped": {
			current:   "ns/a",
			claimants: []Claimant{deleting(pod("ns/a", "n1", 1)), pod("ns/b", "n2", 2)},
			holder:    "ns/b",
		},
		"unscheduled pod is skipped": {
			claimants: []Claimant{pod("ns/a", "", 1), pod("ns/b", "n2", 2)},
			holder:    "ns/b",
		},
		"node not allowed by the pool is skipped": {
			claimants: []Claimant{pod("ns/a", "n1", 1), pod("ns/b", "n2", 2), pod("ns/c", "n3", 3)},
			excluded:  []string{"n1", "n3"},
			holder:    "ns/b",
		},
		"holder on a node the pool no longer allows moves": {
			current:   "ns/a",
			claimants: []Claimant{pod("ns/a", "n1", 1), pod("ns/b", "n2", 2)},
			excluded:  []string{"n1"},
			holder:    "ns/b",
		},
		"no eligible claimant: the message says why for the first three": {
			claimants: []Claimant{
				pod("ns/a", "n1", 1), deleting(pod("ns/b", "n2", 2)), pod("ns/c", "", 3), notReady(pod("ns/d", "n2", 4)),
			},
			excluded: []string{"n1"},
			reason:   ipv1.ReasonNoEligibleNode,
			message: "no claiming pod can hold the address: ns/a is on node n1, which the pool's nodeSelector excludes; " +
				"ns/b is being deleted; ns/c is not scheduled; and 1 more",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := ChooseHolder(tc.current, tc.claimants,
				func(n string) bool { return !slices.Contains(tc.unhealthy, n) },
				func(n string) bool { return !slices.Contains(tc.excluded, n) })
			if got.Holder.Key != tc.holder {
				t.Errorf("holder = %q, want %q", got.Holder.Key, tc.holder)
			}
			var standbys []string
			for _, c := range got.Standbys {
				standbys = append(standbys, c.Key)
			}
			if !slices.Equal(standbys, tc.standbys) {
				t.Errorf("standbys = %v, want %v", standbys, tc.standbys)
			}
			if got.Reason != tc.reason {
				t.Errorf("reason = %q, want %q", got.Reason, tc.reason)
			}
			if tc.message != "" && got.Message != tc.message {
				t.Errorf("message = %q\nwant      %q", got.Message, tc.message)
			}
			if tc.reason != "" && !strings.Contains(got.Message, " ") {
				t.Errorf("reason %s without a message", got.Reason)
			}
		})
	}
}
