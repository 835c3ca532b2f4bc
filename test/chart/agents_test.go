package chart

import (
	"slices"
	"strings"
	"testing"
)

// What an agent links is memory on every node, resident whether it is used
// or not (docs/benchmarks.md: "The reboot-agent on client-go alone", "The
// real ip-agent's memory"). These packages cost the agents megabytes each
// and have a lighter counterpart the agents use instead.
var agentsMustNotLink = map[string]string{
	"sigs.k8s.io/controller-runtime/pkg/manager": "controller-runtime's manager (internal/agentkube is the agents' plumbing)",
	"sigs.k8s.io/controller-runtime/pkg/cache":   "controller-runtime's cache (agentkube's field-selected informers)",
	"sigs.k8s.io/controller-runtime/pkg/client":  "controller-runtime's client (agentkube's REST clients)",
	"k8s.io/client-go/kubernetes":                "client-go's typed clientset: every API group's client, discovery and OpenAPI",
	"github.com/gopacket/gopacket/layers":        "its init fills two 2.5 MiB tables the garbage collector scans: 5.7 MiB resident (mdlayher/arp builds the frames)",
}

func TestAgentsLinkLightly(t *testing.T) {
	for _, bin := range []string{"./cmd/ip-agent", "./cmd/reboot-agent"} {
		deps := strings.Fields(string(run(t, "go", "list", "-deps", bin)))
		if !slices.Contains(deps, "github.com/kubext/kubext/internal/agentkube") {
			t.Fatalf("%s: the dependency list does not hold internal/agentkube; is it the agent's?", bin)
		}
		for pkg, why := range agentsMustNotLink {
			if slices.Contains(deps, pkg) {
				t.Errorf("%s links %s: %s", bin, pkg, why)
			}
		}
	}
}
