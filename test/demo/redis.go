package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// redisScenario: the seed's Redis operator. The sample becomes a
// StatefulSet, three Services and a PodDisruptionBudget; bad input is
// refused; the seed's `kubectl patch ... size: 4` scales it; a hand edit of
// the StatefulSet is put back; the status says what kubext observes.
func redisScenario(ctx context.Context, d *demo) error {
	const name = "redis-cache"
	k := &labKubectl{ctx: ctx, d: d}
	sts := "statefulset/" + name
	selector := "cache.kubext.io/redis=" + name
	image := "docker.io/library/redis:7.2.5"

	if err := k.show("apply", "-f", filepath.Join(d.root, "config", "samples", "cache_v1alpha1_redis.yaml")); err != nil {
		return err
	}
	// kube-controller-manager creates the pods, kwok runs them.
	took, err := k.until("redis/"+name, ".status.replicas", "3")
	if err != nil {
		return err
	}
	say("StatefulSet %s runs 3 pods after %s", name, took)
	if err := k.show("get", "statefulset,service,poddisruptionbudget", "-l", selector); err != nil {
		return err
	}
	if err := k.show("get", sts, "-o", `jsonpath={.metadata.ownerReferences[0]}{"\n"}`); err != nil {
		return err
	}

	say("Bad input is refused by the API server:")
	for _, patch := range []string{`{"spec":{"size":0}}`, `{"spec":{"image":"redis:latest"}}`} {
		if err := k.show("patch", "redis", name, "--type=merge", "-p", patch); err == nil {
			return fmt.Errorf("the API server accepted %s", patch)
		}
	}

	say("The seed's scale-up:")
	if err := k.show("patch", "redis", name, "-p", `{"spec":{"size": 4}}`, "--type=merge"); err != nil {
		return err
	}
	if took, err = k.until(sts, ".spec.replicas", "4"); err != nil {
		return err
	}
	say("StatefulSet %s at 4 replicas after %s", name, took)
	if _, err := k.until("redis/"+name, ".status.replicas", "4"); err != nil {
		return err
	}
	if err := k.show("get", "pods", "-l", selector, "-o", "wide"); err != nil {
		return err
	}

	say("Editing the StatefulSet by hand (replicas and image) ...")
	if err := k.show("patch", sts, "--type=merge", "-p",
		`{"spec":{"replicas":2,"template":{"spec":{"containers":[{"name":"redis","image":"redis:latest"}]}}}}`); err != nil {
		return err
	}
	if took, err = k.until(sts, ".spec.template.spec.containers[0].image", image); err != nil {
		return err
	}
	if _, err := k.until(sts, ".spec.replicas", "4"); err != nil {
		return err
	}
	say("... put back by the operator in %s", took)
	if err := k.show("events", "--for", "redis/"+name); err != nil {
		return err
	}

	// kwok reports the pods Running with an IP address, but no container
	// runs: there is no Redis to connect to, and kubext says so.
	if _, err := k.until("redis/"+name, `.status.conditions[?(@.type=="Ready")].reason`, "MembersUnreachable"); err != nil {
		return err
	}
	if err := k.show("get", "redis", name, "-o", "wide"); err != nil {
		return err
	}
	if err := k.show("get", "redis", name, "-o",
		`jsonpath={range .status.members[*]}{.name}{"  "}{.state}{"\n"}{end}{range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\n"}{end}`); err != nil {
		return err
	}
	say("The lab's pods are simulated (kwok): no Redis process runs in them, so kubext")
	say("reports every member Unreachable and names no primary, rather than pretend.")
	say("Replication itself (election, promotion of the replica with the most data when")
	say("the primary dies, repointing, scale up and down, passwords) is proven against")
	say("real redis-server processes by: go test ./internal/redisrepl")

	say("Deleting the Redis; the garbage collector deletes what it owns")
	if err := k.show("delete", "redis", name, "--wait"); err != nil {
		return err
	}
	return k.gone("statefulsets", name, "Redis")
}

// labKubectl runs a scenario's kubectl commands against the lab.
type labKubectl struct {
	ctx context.Context
	d   *demo
}

func (k *labKubectl) kubectl(args ...string) (string, error) {
	out, err := k.d.lab.Kubectl(k.ctx, args...)
	return string(out), err
}

// show runs kubectl and prints the command and its output.
func (k *labKubectl) show(args ...string) error {
	say("$ kubectl %s", strings.Join(args, " "))
	out, err := k.kubectl(args...)
	fmt.Print(indent(out))
	return err
}

// until waits for a jsonpath of an object to read want.
func (k *labKubectl) until(what, jsonpath, want string) (time.Duration, error) {
	start := time.Now()
	var got string
	err := wait.PollUntilContextTimeout(k.ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		out, err := k.kubectl("get", what, "-o", "jsonpath={"+jsonpath+"}")
		got = strings.TrimSpace(out)
		return err == nil && got == want, nil
	})
	if err != nil {
		return 0, fmt.Errorf("%s %s is %q, want %q: %w", what, jsonpath, got, want, err)
	}
	return time.Since(start).Round(10 * time.Millisecond), nil
}

// gone waits for the garbage collector to delete an owned object whose
// owner, of kind ownerKind, was deleted.
func (k *labKubectl) gone(resource, name, ownerKind string) error {
	start := time.Now()
	err := wait.PollUntilContextTimeout(k.ctx, 200*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		out, err := k.kubectl("get", resource, "--ignore-not-found", "-o", "name")
		return err == nil && !strings.Contains(out, "/"+name+"\n"), nil
	})
	if err != nil {
		// The garbage collector learns of new CRDs at its discovery
		// resyncs; in a lab this young it may not watch them yet. The
		// owner reference shown above is the operator's part.
		say("(%s %s not garbage collected yet after %s: the lab's garbage collector has not picked up the %s CRD)",
			resource, name, time.Since(start).Round(time.Second), ownerKind)
		return nil
	}
	say("%s %s is gone after %s", resource, name, time.Since(start).Round(100*time.Millisecond))
	return nil
}
