package rebootagent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

// protocol are every annotation of the reboot protocol, for cleaning up.
var protocol = []string{
	rebootv1.AnnotationNeeded, rebootv1.AnnotationNeededSince, rebootv1.AnnotationInProgress,
	rebootv1.AnnotationBootID, rebootv1.AnnotationNow, rebootv1.AnnotationCordonedByUs,
}

func clearProtocol(t *testing.T, node string) {
	t.Helper()
	t.Cleanup(func() {
		ann := map[string]*string{}
		for _, a := range protocol {
			ann[a] = nil
		}
		if err := annotate(context.Background(), node, ann); err != nil {
			t.Error(err)
		}
	})
}

// order is what the controller leaves on an approved and drained node.
func order(bootID string) map[string]*string {
	return map[string]*string{
		rebootv1.AnnotationNeeded:     ptr.To("true"),
		rebootv1.AnnotationInProgress: ptr.To("2026-03-01T03:00:00Z"),
		rebootv1.AnnotationBootID:     ptr.To(bootID),
		rebootv1.AnnotationNow:        ptr.To("2026-03-01T03:01:00Z"),
	}
}

func TestSentinelAsksForReboot(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	clearProtocol(t, thisNode)
	g.Expect(annotate(ctx, thisNode, map[string]*string{"example.com/owner": ptr.To("ops")})).To(Succeed())
	requests := recorded.count(ReasonRebootRequested)
	sentinel := filepath.Join(dir, thisNode+"-reboot-required")
	t.Cleanup(func() { _ = os.Remove(sentinel) })

	needed := func() string {
		ann, err := annotations(ctx, thisNode)
		g.Expect(err).NotTo(HaveOccurred())
		return ann[rebootv1.AnnotationNeeded]
	}
	g.Consistently(needed, 5*sentinelInterval, sentinelInterval/2).Should(BeEmpty(), "no sentinel file, no request")

	g.Expect(os.WriteFile(sentinel, nil, 0o644)).To(Succeed())
	g.Eventually(needed, waitFor, sentinelInterval/2).Should(Equal("true"))
	ann, err := annotations(ctx, thisNode)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ann).To(Equal(map[string]string{"example.com/owner": "ops", rebootv1.AnnotationNeeded: "true"}),
		"the agent sets needed and nothing else")
	g.Eventually(func() ([]string, error) { return nodeEvents(ctx, thisNode, ReasonRebootRequested) }, waitFor).Should(
		ContainElement("Sentinel file " + sentinel + " present, reboot requested"))
	g.Consistently(func() int { return recorded.count(ReasonRebootRequested) }, 5*sentinelInterval, sentinelInterval/2).Should(
		Equal(requests+1), "asked once")

	// A person declining ("false", as `kubectl kubext reboot cancel`
	// writes) is not overruled by the file: the agent asks again only once
	// the annotation is gone.
	g.Expect(annotate(ctx, thisNode, map[string]*string{rebootv1.AnnotationNeeded: ptr.To("false")})).To(Succeed())
	g.Consistently(needed, 5*sentinelInterval, sentinelInterval/2).Should(Equal("false"))
	g.Expect(annotate(ctx, thisNode, map[string]*string{rebootv1.AnnotationNeeded: nil})).To(Succeed())
	g.Eventually(needed, waitFor, sentinelInterval/2).Should(Equal("true"))

	// Once the file is gone (a reboot clears /var/run), nothing is asked.
	g.Expect(os.Remove(sentinel)).To(Succeed())
	g.Expect(annotate(ctx, thisNode, map[string]*string{rebootv1.AnnotationNeeded: nil})).To(Succeed())
	g.Consistently(needed, 10*sentinelInterval, sentinelInterval/2).Should(BeEmpty())

	// A file left from before the machine booted asked for a reboot that
	// has happened: reported once, not obeyed.
	booted, err := HostBootTime()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(sentinel, nil, 0o644)).To(Succeed())
	old := booted.Add(-time.Hour)
	g.Expect(os.Chtimes(sentinel, old, old)).To(Succeed())
	g.Eventually(func() ([]string, error) { return nodeEvents(ctx, thisNode, ReasonSentinelStale) }, waitFor).Should(
		ConsistOf(ContainSubstring("Sentinel file " + sentinel + " was last modified at")))
	g.Consistently(needed, 10*sentinelInterval, sentinelInterval/2).Should(BeEmpty())
	g.Expect(recorded.count(ReasonSentinelStale)).To(Equal(1), "reported once")
}

func TestRebootsOncePerOrderedBoot(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	clearProtocol(t, thisNode)
	g.Expect(setBootID(ctx, thisNode, "boot-1")).To(Succeed())
	base, rebootingEvents := reboots(), recorded.count(ReasonRebooting)

	// An order for a boot that is over (the reboot happened) is ignored.
	g.Expect(annotate(ctx, thisNode, order("boot-0"))).To(Succeed())
	g.Consistently(reboots, time.Second, 50*time.Millisecond).Should(Equal(base))

	// An order for the current boot reboots once...
	g.Expect(annotate(ctx, thisNode, order("boot-1"))).To(Succeed())
	g.Eventually(reboots, waitFor, 50*time.Millisecond).Should(Equal(base + 1))
	g.Eventually(func() ([]string, error) { return nodeEvents(ctx, thisNode, ReasonRebooting) }, waitFor).Should(
		ContainElement(ContainSubstring("Rebooting node (boot ID boot-1")))
	// ... and only once, however often the node changes while the machine
	// takes its time to go down.
	for i := range 5 {
		g.Expect(annotate(ctx, thisNode, map[string]*string{"example.com/poke": ptr.To(string(rune('a' + i)))})).To(Succeed())
		time.Sleep(100 * time.Millisecond)
	}
	g.Consistently(reboots, time.Second, 50*time.Millisecond).Should(Equal(base + 1))
	g.Expect(recorded.count(ReasonRebooting)).To(Equal(rebootingEvents + 1))

	// The machine is back with a new boot ID; the controller has not
	// cleared the order yet. Nothing happens.
	g.Expect(setBootID(ctx, thisNode, "boot-2")).To(Succeed())
	g.Consistently(reboots, time.Second, 50*time.Millisecond).Should(Equal(base + 1))

	// A new order for the new boot reboots again.
	g.Expect(annotate(ctx, thisNode, order("boot-2"))).To(Succeed())
	g.Eventually(reboots, waitFor, 50*time.Millisecond).Should(Equal(base + 2))
	g.Expect(annotate(ctx, thisNode, map[string]*string{"example.com/poke": nil})).To(Succeed())
}

func TestFailedRebootIsReportedAndRetried(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	clearProtocol(t, thisNode)
	g.Expect(setBootID(ctx, thisNode, "boot-3")).To(Succeed())
	fail := filepath.Join(dir, "fail")
	g.Expect(os.WriteFile(fail, []byte("disk busy"), 0o644)).To(Succeed())
	t.Cleanup(func() { _ = os.Remove(fail) })
	base := reboots()

	g.Expect(annotate(ctx, thisNode, order("boot-3"))).To(Succeed())
	g.Eventually(func() ([]string, error) { return nodeEvents(ctx, thisNode, ReasonRebootCommandFailed) }, waitFor).Should(
		ContainElement(And(ContainSubstring("retrying in 5s"), ContainSubstring("reboot refused: disk busy"))))
	g.Expect(reboots()).To(Equal(base))

	// The machine did not go down, so the order still stands: retried
	// after the backoff, and then done.
	g.Expect(os.Remove(fail)).To(Succeed())
	g.Eventually(reboots, waitFor, 100*time.Millisecond).Should(Equal(base + 1))
	g.Consistently(reboots, time.Second, 100*time.Millisecond).Should(Equal(base + 1))
}
