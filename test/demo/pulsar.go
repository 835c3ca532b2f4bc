package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// pulsarScenario: the seed's PulsarConsumer becomes a Deployment of
// pulsar-consumer; bad input is refused, `kubectl scale` works on the
// PulsarConsumer, a hand edit of the Deployment is put back, and the status
// reports what the Deployment reports.
func pulsarScenario(ctx context.Context, d *demo) error {
	const name = "pulsarconsumer-sample"
	p := &pulsarDemo{ctx: ctx, d: d}
	pc, deploy := "pulsarconsumer/"+name, "deployment/"+name

	if err := p.show("apply", "-f", filepath.Join(d.root, "config", "samples", "pulsar_v1_pulsarconsumer.yaml")); err != nil {
		return err
	}
	took, err := p.until(pc, `.status.conditions[?(@.type=="Available")].status`, "True")
	if err != nil {
		return err
	}
	say("Available after %s. (kwok plays the kubelet: the pods report Running and Ready without running the", took)
	say("program, and the lab has no Pulsar broker; on a cluster, Ready means subscribed to the topic.)")
	if err := p.show("get", "pulsarconsumer"); err != nil {
		return err
	}
	if err := p.show("get", deploy, "-o", "wide"); err != nil {
		return err
	}
	say("The consumer is configured through its environment only:")
	if err := p.show("get", deploy, "-o",
		`jsonpath={range .spec.template.spec.containers[0].env[*]}{.name}={.value}{.valueFrom.fieldRef.fieldPath}{"\n"}{end}`); err != nil {
		return err
	}
	if err := p.show("get", "pods", "-l", "pulsar.kubext.io/consumer="+name, "-o", "wide"); err != nil {
		return err
	}

	say("Bad input is refused by the API server, with the reason:")
	for _, patch := range []string{
		`{"spec":{"serverAddress":"http://pulsar-admin:8080"}}`,
		`{"spec":{"subscriptionType":"Exclusive"}}`, // with 2 replicas
	} {
		if err := p.show("patch", pc, "--type=merge", "-p", patch); err == nil {
			return fmt.Errorf("the API server accepted %s", patch)
		}
	}

	if err := p.show("scale", "pulsarconsumer", name, "--replicas=3"); err != nil {
		return err
	}
	if took, err = p.until(pc, ".status.readyReplicas", "3"); err != nil {
		return err
	}
	say("3 consumers ready after %s", took)
	if err := p.show("get", "pulsarconsumer", "-o", "wide"); err != nil {
		return err
	}

	say("Editing the Deployment by hand (replicas and the topic) ...")
	if err := p.show("scale", deploy, "--replicas=1"); err != nil {
		return err
	}
	if err := p.show("set", "env", deploy, "PULSAR_TOPIC=someone-elses-topic"); err != nil {
		return err
	}
	topic := `.spec.template.spec.containers[0].env[?(@.name=="PULSAR_TOPIC")].value`
	if took, err = p.until(deploy, topic, "my-topic"); err != nil {
		return err
	}
	if _, err := p.until(deploy, ".spec.replicas", "3"); err != nil {
		return err
	}
	say("... put back by the operator in %s", took)
	if _, err := p.until(pc, `.status.conditions[?(@.type=="Available")].status`, "True"); err != nil {
		return err
	}
	if err := p.show("events", "--for", pc); err != nil {
		return err
	}
	if err := p.show("get", pc, "-o",
		`jsonpath={range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\n"}{end}`); err != nil {
		return err
	}

	say("Deleting the PulsarConsumer; the garbage collector deletes its Deployment")
	if err := p.show("delete", "pulsarconsumer", name, "--wait"); err != nil {
		return err
	}
	start := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		out, err := p.kubectl("get", "deployments", "--ignore-not-found", "-o", "name")
		return err == nil && !strings.Contains(out, name), nil
	})
	if err != nil {
		// The garbage collector learns of new CRDs at its discovery
		// resyncs; in a lab this young it may not watch them yet. The
		// owner reference is this operator's part.
		say("(Deployment %s not garbage collected yet after %s: the lab's garbage collector has not picked up the PulsarConsumer CRD)",
			name, time.Since(start).Round(time.Second))
		return nil
	}
	say("Deployment %s is gone after %s", name, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// pulsarDemo runs the scenario's kubectl commands against the lab.
type pulsarDemo struct {
	ctx context.Context
	d   *demo
}

func (p *pulsarDemo) kubectl(args ...string) (string, error) {
	out, err := p.d.lab.Kubectl(p.ctx, args...)
	return string(out), err
}

// show runs kubectl and prints the command and its output.
func (p *pulsarDemo) show(args ...string) error {
	say("$ kubectl %s", strings.Join(args, " "))
	out, err := p.kubectl(args...)
	fmt.Print(indent(out))
	return err
}

// until waits for a jsonpath of an object to read want.
func (p *pulsarDemo) until(what, jsonpath, want string) (time.Duration, error) {
	start := time.Now()
	var got string
	err := wait.PollUntilContextTimeout(p.ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		out, err := p.kubectl("get", what, "-o", "jsonpath={"+jsonpath+"}")
		got = strings.TrimSpace(out)
		return err == nil && got == want, nil
	})
	if err != nil {
		return 0, fmt.Errorf("%s %s is %q, want %q: %w", what, jsonpath, got, want, err)
	}
	return time.Since(start).Round(10 * time.Millisecond), nil
}
