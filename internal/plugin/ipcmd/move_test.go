package ipcmd

import (
	"strings"
	"testing"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
)

func TestMoveTarget(t *testing.T) {
	pending := readyIP("default/web-1", "default/web-2")
	pending.Annotations = map[string]string{ipv1.AnnotationMoveTo: "default/web-2"}
	tests := []struct {
		name      string
		ip        *ipv1.IP
		to, ns    string
		want      string
		wantError string
	}{
		{name: "first standby by default", ip: readyIP("default/web-1", "default/web-2"), want: "default/web-1"},
		{name: "a named standby", ip: readyIP("default/web-1", "prod/web-2"), to: "prod/web-2", want: "prod/web-2"},
		{name: "a pod name takes the namespace", ip: readyIP("default/web-1", "prod/web-2"), to: "web-2", ns: "prod", want: "prod/web-2"},
		{name: "no standby", ip: readyIP(), wantError: "IP web has no standby to move to (holder: default/web-0)"},
		{name: "no holder and no standby", ip: notReady(readyIP(), ipv1.ReasonNoClaimant, "no pod claims this IP"), wantError: "has no standby"},
		{name: "not a standby", ip: readyIP("default/web-1"), to: "default/web-9", wantError: "default/web-9 is not a standby of IP web (they are: default/web-1)"},
		{name: "not a standby, none at all", ip: readyIP(), to: "default/web-9", wantError: "(it has none)"},
		{name: "already the holder", ip: readyIP("default/web-1"), to: "default/web-0", wantError: "default/web-0 already holds IP web"},
		{name: "same move already pending is resumed", ip: pending, to: "default/web-2", want: "default/web-2"},
		{name: "another move pending", ip: pending, to: "default/web-1", wantError: "a move of IP web to default/web-2 is already pending"},
		{name: "a default move while one is pending", ip: pending, wantError: "already pending"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := moveTarget(tt.ip, tt.to, tt.ns)
			if tt.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantError) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantError)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestMoveProgress(t *testing.T) {
	const target = "default/web-1"
	requested := readyIP(target)
	requested.Annotations = map[string]string{ipv1.AnnotationMoveTo: target}

	releasing := readyIP()
	releasing.Status.Node, releasing.Status.Pod = "", target
	notReady(releasing, ipv1.ReasonDetaching, "waiting for node n1 to release")

	placing := readyIP()
	placing.Status.Node, placing.Status.AttachedNode, placing.Status.Pod = "", "", target

	attaching := readyIP()
	attaching.Status.Node, attaching.Status.AttachedNode, attaching.Status.Pod = "n2", "", target
	notReady(attaching, ipv1.ReasonWaitingForAgent, "waiting for the agent on n2")

	confirming := readyIP()
	confirming.Status.Node, confirming.Status.AttachedNode, confirming.Status.Pod = "n2", "n2", target
	notReady(confirming, ipv1.ReasonWaitingForAgent, "waiting for the agent on n2")

	done := readyIP()
	done.Status.Node, done.Status.AttachedNode, done.Status.Pod = "n2", "n2", target

	tests := []struct {
		name     string
		ip       *ipv1.IP
		wantStep moveStep
		wantLine string
	}{
		{"annotation not handled yet", requested, stepRequested, "waiting for the controller to act on the request"},
		{"old node still attached", releasing, stepReleasing, "waiting for node n1 to release 192.0.2.10"},
		{"released, not placed yet", placing, stepAttaching, "waiting for the controller to place the address on the new holder's node"},
		{"placed, agent not confirmed", attaching, stepAttaching, "waiting for the agent on node n2 to attach 192.0.2.10"},
		{"agent confirmed, not Ready yet", confirming, stepConfirming, "node n2 confirmed 192.0.2.10; waiting for the IP to turn Ready"},
		{"done", done, stepDone, "attached on node n2"},
		{"annotation removed, holder unchanged", readyIP(target), stepNotMoving, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			step, line := moveProgress(tt.ip, target)
			if step != tt.wantStep || line != tt.wantLine {
				t.Errorf("got %d %q, want %d %q", step, line, tt.wantStep, tt.wantLine)
			}
		})
	}
}
