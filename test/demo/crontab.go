package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// crontabScenario: the Kubernetes docs' CronTab example becomes a real
// CronJob; a bad cronSpec is refused, a hand edit of the CronJob is put
// back, and replicas follow `kubectl patch` and `kubectl scale`.
func crontabScenario(ctx context.Context, d *demo) error {
	const name = "my-new-cron-object"
	kubectl := func(args ...string) (string, error) {
		out, err := d.lab.Kubectl(ctx, args...)
		return string(out), err
	}
	show := func(args ...string) error {
		say("$ kubectl %s", strings.Join(args, " "))
		out, err := kubectl(args...)
		fmt.Print(indent(out))
		return err
	}
	// until waits for a jsonpath of an object to read want.
	until := func(what, jsonpath, want string) (time.Duration, error) {
		start := time.Now()
		var got string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			out, err := kubectl("get", what, "-o", "jsonpath={"+jsonpath+"}")
			got = strings.TrimSpace(out)
			return err == nil && got == want, nil
		})
		if err != nil {
			return 0, fmt.Errorf("%s %s is %q, want %q: %w", what, jsonpath, got, want, err)
		}
		return time.Since(start).Round(10 * time.Millisecond), nil
	}
	cronJob := "cronjob/" + name
	parallelism := ".spec.jobTemplate.spec.parallelism"

	if err := show("apply", "-f", filepath.Join(d.root, "config", "samples", "stable_v1_crontab.yaml")); err != nil {
		return err
	}
	if _, err := until("ct/"+name, `.status.conditions[?(@.type=="Ready")].status`, "True"); err != nil {
		return err
	}
	if err := show("get", "ct"); err != nil {
		return err
	}
	if err := show("get", cronJob, "-o", "wide"); err != nil {
		return err
	}
	if err := show("get", cronJob, "-o", "jsonpath={.metadata.ownerReferences[0]}{\"\\n\"}"); err != nil {
		return err
	}

	say("A cronSpec that is not a cron expression is refused by the API server:")
	if err := show("patch", "ct", name, "--type=merge", "-p", `{"spec":{"cronSpec":"61 * * * *"}}`); err == nil {
		return fmt.Errorf("the API server accepted cronSpec 61 * * * *")
	}

	say("Editing the CronJob by hand (schedule and parallelism) ...")
	if err := show("patch", cronJob, "--type=merge", "-p",
		`{"spec":{"schedule":"0 0 * * *","jobTemplate":{"spec":{"parallelism":5}}}}`); err != nil {
		return err
	}
	took, err := until(cronJob, ".spec.schedule", "* * * * */5")
	if err != nil {
		return err
	}
	if _, err := until(cronJob, parallelism, "1"); err != nil {
		return err
	}
	say("... put back by the operator in %s", took)
	if err := show("events", "--for", "ct/"+name); err != nil {
		return err
	}

	if err := show("patch", "ct", name, "--type=merge", "-p", `{"spec":{"replicas":3}}`); err != nil {
		return err
	}
	if took, err = until(cronJob, parallelism, "3"); err != nil {
		return err
	}
	say("CronJob parallelism 3 after %s", took)
	if err := show("scale", "ct", name, "--replicas=2"); err != nil {
		return err
	}
	if _, err := until("ct/"+name, ".status.replicas", "2"); err != nil {
		return err
	}
	if err := show("get", "ct", "-o", "wide"); err != nil {
		return err
	}

	say("Deleting the CronTab; the garbage collector deletes its CronJob")
	if err := show("delete", "ct", name, "--wait"); err != nil {
		return err
	}
	start := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		out, err := kubectl("get", "cronjobs", "--ignore-not-found", "-o", "name")
		return err == nil && !strings.Contains(out, name), nil
	})
	if err != nil {
		// The garbage collector learns of new CRDs at its discovery
		// resyncs; in a lab this young it may not watch crontabs yet.
		// The owner reference shown above is this operator's part.
		say("(CronJob %s not garbage collected yet after %s: the lab's garbage collector has not picked up the CronTab CRD)",
			name, time.Since(start).Round(time.Second))
		return nil
	}
	say("CronJob %s is gone after %s", name, time.Since(start).Round(100*time.Millisecond))
	return nil
}
