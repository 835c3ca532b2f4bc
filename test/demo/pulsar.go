package main

import (
	"context"
	"fmt"
	"path/filepath"
)

// pulsarScenario: the seed's PulsarConsumer becomes a Deployment of
// pulsar-consumer; bad input is refused, `kubectl scale` works on the
// PulsarConsumer, a hand edit of the Deployment is put back, and the status
// reports what the Deployment reports.
func pulsarScenario(ctx context.Context, d *demo) error {
	const name = "pulsarconsumer-sample"
	p := &labKubectl{ctx: ctx, d: d}
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
	return p.gone("deployments", name, "PulsarConsumer")
}
