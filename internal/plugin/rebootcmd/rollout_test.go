package rebootcmd

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

// `reboot status` shows each group's rollout from the record in its
// status, moved on to what the nodes show now: here the window closed
// after the third reboot, which the stored record (written before it was
// verified) does not know yet. The implicit default group has no rollout.
func TestStatusShowsRolloutProgress(t *testing.T) {
	pool := map[string]string{"pool": "night"}
	g := group("night", pool, intstr.FromInt32(1))
	g.Spec.Windows = []rebootv1.MaintenanceWindow{{Start: "02:00", End: "02:30", TimeZone: "UTC"}}
	started := metav1.NewTime(now.Add(-time.Hour))
	g.Status.Rollout = &rebootv1.RolloutStatus{Number: 4, StartTime: started, State: rebootv1.RolloutRunning,
		Message: "Rebooting: n3", Total: 5, Done: 2, Remaining: 3, RemainingNodes: []string{"n3", "n4", "n5"}}
	rebooted := []string{rebootv1.AnnotationRebootedAt, stampAgo(40 * time.Minute)}
	needed := []string{rebootv1.AnnotationNeeded, "true", rebootv1.AnnotationNeededSince, stampAgo(2 * time.Hour)}
	cl := clusterOf([]rebootv1.RebootGroup{g},
		node("n1", pool, rebooted...), node("n2", pool, rebooted...), node("n3", pool, rebooted...),
		node("n4", pool, needed...), node("n5", pool, needed...),
		node("other", nil, rebootv1.AnnotationNeeded, "true"))

	var out bytes.Buffer
	if err := writeStatus(&out, cl, false); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"GROUP   ROLLOUT   STARTED   DONE   REMAINING    FAILED   STATE\n" +
			"night   4         60m ago   3/5    2 (n4, n5)   0        WaitingForWindow until 2026-03-02T02:00:00Z (since 0s)\n\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("status lacks %q:\n%s", want, got)
		}
	}

	d, rows := statusRows(cl, false)
	data, err := json.Marshal(newStatusReport(d, rows, rollouts(cl, d), now))
	if err != nil {
		t.Fatal(err)
	}
	var report struct {
		Groups []struct {
			Name    string                  `json:"name"`
			Rollout *rebootv1.RolloutStatus `json:"rollout"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(data, &report); err != nil {
		t.Fatal(err)
	}
	byName := map[string]*rebootv1.RolloutStatus{}
	for _, gr := range report.Groups {
		byName[gr.Name] = gr.Rollout
	}
	r := byName["night"]
	if r == nil || r.Number != 4 || r.State != rebootv1.RolloutWaitingForWindow || r.Done != 3 || r.Total != 5 || r.Remaining != 2 ||
		!slices.Equal(r.RemainingNodes, []string{"n4", "n5"}) || r.ResumeAt == nil || !r.ResumeAt.Time.Equal(now.Add(23*time.Hour)) ||
		!r.StartTime.Equal(&started) {
		t.Errorf("-o json rollout of night: %s", data)
	}
	if byName[rebootv1.DefaultGroupName] != nil {
		t.Errorf("-o json: a rollout for the implicit default group: %s", data)
	}
	// The stored record is not changed by looking at it.
	if g.Status.Rollout.Done != 2 || cl.snapshot.Groups[0].Status.Rollout.Done != 2 {
		t.Error("status modified the RebootGroup it read")
	}
}
