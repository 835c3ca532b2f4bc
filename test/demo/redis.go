package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/apimachinery/pkg/util/wait"
)

// redisScenario: the seed's Redis operator. The sample becomes a
// StatefulSet, three Services and two PodDisruptionBudgets; bad input is
// refused; the seed's `kubectl patch ... size: 4` scales it; a hand edit of
// the StatefulSet is put back; then, on the lab network, real redis-server
// processes replicate and survive the loss of the primary's node.
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

	if d.lab.Net == nil {
		// Without the lab network (not root) no Redis runs in kwok's pods:
		// kubext says so rather than invent a primary.
		if _, err := k.until("redis/"+name, `.status.conditions[?(@.type=="Ready")].reason`, "MembersUnreachable"); err != nil {
			return err
		}
		if err := k.show("get", "redis", name, "-o", "wide"); err != nil {
			return err
		}
		say("No Redis member is reachable from this manager here: every member is Unreachable.")
	} else if err := redisFailover(ctx, d, k, name); err != nil {
		return err
	}

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

// redisFailover runs the Redis for real: the lab's pod network runs
// redis-server in each member pod (reached by pod IP, as the manager
// reaches it), a key written to the primary is read from a replica, the
// primary's node is killed, a replica is promoted and still holds the key.
func redisFailover(ctx context.Context, d *demo, k *labKubectl, name string) error {
	if _, err := d.lab.StartPodNetwork(ctx); err != nil {
		return err
	}
	say("The lab's pod network runs redis-server in every member pod (its args, env and port")
	say("from the pod spec); kubext elects a primary and points the others at it:")
	took, err := k.until("redis/"+name, `.status.conditions[?(@.type=="Ready")].reason`, "Replicating")
	if err != nil {
		return err
	}
	say("Ready after %s", took)
	if err := k.show("get", "pods", "-l", "cache.kubext.io/redis="+name, "-L", "cache.kubext.io/role", "-o", "wide"); err != nil {
		return err
	}
	primaryIP := func() (string, string, error) {
		pod, err := k.kubectl("get", "redis", name, "-o", "jsonpath={.status.primary}")
		if err != nil {
			return "", "", err
		}
		ip, err := k.kubectl("get", "pod", pod, "-o", "jsonpath={.status.podIP} {.spec.nodeName}")
		return pod, ip, err
	}
	pod, where, err := primaryIP()
	if err != nil {
		return err
	}
	ip, node, _ := strings.Cut(where, " ")
	// The password kubext generated (the Redis names no Secret of its
	// own), from the Secret its status names.
	secret, err := k.kubectl("get", "redis", name, "-o", "jsonpath={.status.passwordSecretKeyRef.name}")
	if err != nil {
		return err
	}
	encoded, err := k.kubectl("get", "secret", strings.TrimSpace(secret), "-o", "jsonpath={.data.password}")
	if err != nil {
		return err
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if err != nil {
		return fmt.Errorf("secret %s: %w", secret, err)
	}
	password := string(raw)
	say("Its password, generated by kubext, is in Secret %s (status.passwordSecretKeyRef)", strings.TrimSpace(secret))
	rc := redis.NewClient(&redis.Options{Addr: net.JoinHostPort(ip, "6379"), Password: password, Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	defer rc.Close()
	if err := rc.Set(ctx, "greeting", "hello from "+pod, 0).Err(); err != nil {
		return err
	}
	say("SET greeting on the primary %s (%s)", pod, ip)
	replica, err := k.kubectl("get", "pods", "-l", "cache.kubext.io/redis="+name+",cache.kubext.io/role=replica", "-o", `jsonpath={.items[0].metadata.name} {.items[0].status.podIP}`)
	if err != nil {
		return err
	}
	rname, rip, _ := strings.Cut(replica, " ")
	if err := readKey(ctx, rip, password, "greeting", "hello from "+pod); err != nil {
		return err
	}
	say("GET greeting on the replica %s (%s): %q", rname, rip, "hello from "+pod)

	if d.deployed != nil {
		say("The installed manager runs in a pod behind its node and dials the members by pod IP, as in a cluster:")
		if err := k.show("get", "pods", "-n", d.deployed.Namespace, "-l", "control-plane=controller-manager", "-o", "wide"); err != nil {
			return err
		}
	}
	say("Killing the primary's node %s (cut off the network, NotReady, its processes killed) ...", node)
	// The static IP scenario's agent on that node dies with it; it is
	// started again once the node is back.
	// Deployed, the lab restarts the node's pods (its agents, and the
	// manager's replica if it ran there) itself.
	hadAgent := d.deployed == nil && len(d.lab.ProcessesIn(d.lab.Net.NodeNamespace(node))) > 0
	start := time.Now()
	if err := d.lab.KillNode(ctx, node); err != nil {
		return err
	}
	defer func() {
		ctx := context.WithoutCancel(ctx)
		if err := d.lab.ReviveNode(ctx, node); err != nil {
			say("reviving %s: %v", node, err)
			return
		}
		// Ready and untainted: until the node lifecycle controller has
		// seen it Ready, pods that start there (the next scenario's, a
		// manager replica) can be marked NotReady for good in the lab.
		if err := d.lab.WaitNodeUsable(ctx, node, time.Minute); err != nil {
			say("%v", err)
			return
		}
		if hadAgent {
			if _, err := d.lab.StartIPAgent(ctx, node); err != nil {
				say("restarting the ip-agent of %s: %v", node, err)
			}
		}
	}()
	// Deployed, the manager's leader may die with the node: the other
	// replica takes its Lease over first.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		now, _, err := primaryIP()
		return err == nil && now != "" && now != pod, nil
	}); err != nil {
		return fmt.Errorf("no replica was promoted: %w", err)
	}
	newPod, where, err := primaryIP()
	if err != nil {
		return err
	}
	newIP, _, _ := strings.Cut(where, " ")
	say("... %s promoted after %s", newPod, time.Since(start).Round(10*time.Millisecond))
	if err := readKey(ctx, newIP, password, "greeting", "hello from "+pod); err != nil {
		return err
	}
	say("GET greeting on the new primary %s (%s): %q: nothing lost", newPod, newIP, "hello from "+pod)
	if err := k.show("events", "--for", "redis/"+name); err != nil {
		return err
	}
	return k.show("get", "redis", name, "-o", "wide")
}

// readKey waits until the member at ip holds want under key.
func readKey(ctx context.Context, ip, password, key, want string) error {
	c := redis.NewClient(&redis.Options{Addr: net.JoinHostPort(ip, "6379"), Password: password, Protocol: 2, DisableIdentity: true, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	var got string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		var err error
		got, err = c.Get(ctx, key).Result()
		return err == nil && got == want, nil
	})
	if err != nil {
		return fmt.Errorf("%s on %s is %q, want %q: %w", key, ip, got, want, err)
	}
	return nil
}
