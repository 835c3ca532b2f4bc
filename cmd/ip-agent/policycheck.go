package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/kubext/kubext/internal/agentkube"
)

// policyRefusal is the phrase of config/policy/ip-agent.yaml's refusal of
// a Lease that is not the agent's own heartbeat. Finding it tells this
// version's policy from none, and from an older one that did not confine
// the agent to the status fields of its protocol.
const policyRefusal = "may write only its own heartbeat Lease"

// policyCheckFlag is the flag that skips checkPolicy.
const policyCheckFlag = "unsafe-skip-policy-check"

// checkPolicy makes sure that the admission policy that confines this agent
// to its own node (config/policy/ip-agent.yaml) is in force for it: the
// agent's RBAC lets it patch the status of every IP and write every Lease
// of its namespace, and only that policy keeps it to its own node. It asks
// the API server for something the policy must refuse, as a dry run (it
// goes through admission and is never stored): to create a Lease that is
// not its heartbeat. It returns an error that says what to install unless
// the policy refuses. With skip (--unsafe-skip-policy-check) it only warns.
func checkPolicy(ctx context.Context, cfg *rest.Config, namespace, node string, skip bool) error {
	if skip {
		logr.FromContextOrDiscard(ctx).Info("WARNING: --" + policyCheckFlag + " is set: not checking that the admission policy " +
			"config/policy/ip-agent.yaml confines this agent to its own node; without it the agent's RBAC lets it " +
			"rewrite the status of any IP and any Lease of its namespace")
		return nil
	}
	scheme := runtime.NewScheme()
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := agentkube.New(cfg, scheme)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	probe := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "ip-agent-" + node + "-policy-probe"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node)},
	}
	what := fmt.Sprintf("a dry-run creation of Lease %s/%s (not this agent's heartbeat)", namespace, probe.Name)
	install := "Install config/policy/ip-agent.yaml (the ValidatingAdmissionPolicy and binding " +
		"ip-agent-own-node.ip.kubext.io; config/default installs it, prefixed kubext-) and run the agent " +
		"as a service account named ip-agent or *-ip-agent (any namespace), with a service-account token " +
		"bound to its pod, which the DaemonSet's default token is. Only if the cluster cannot enforce " +
		"ValidatingAdmissionPolicy, pass --" + policyCheckFlag + " (unsafe: the agent can then rewrite any IP " +
		"and any Lease of its namespace)"
	err = c.Create(ctx, probe, metav1.DryRunAll)
	switch {
	case err == nil:
		return fmt.Errorf("refusing to start: the admission policy that confines the ip-agent to its own node is not in force: "+
			"the API server accepted %s, which the policy must refuse. %s", what, install)
	case strings.Contains(err.Error(), policyRefusal):
		return nil
	case strings.Contains(err.Error(), "ValidatingAdmissionPolicy"):
		return fmt.Errorf("refusing to start: an admission policy refused %s, but not as this version's "+
			"config/policy/ip-agent.yaml does (an older policy, or a token not bound to a node?): %w. %s", what, err, install)
	default:
		return fmt.Errorf("refusing to start: could not check that the admission policy that confines the ip-agent "+
			"to its own node is in force (%s failed: %w). %s", what, err, install)
	}
}
