package rebootagent

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rebootv1 "github.com/kubext/kubext/api/reboot/v1alpha1"
)

func nodeWith(bootID string, annotations map[string]string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: annotations},
		Status:     corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: bootID}},
	}
}

func TestRebootOrder(t *testing.T) {
	ordered := map[string]string{rebootv1.AnnotationNow: "2026-03-01T03:00:00Z", rebootv1.AnnotationBootID: "boot-1"}
	for _, tc := range []struct {
		name    string
		node    *corev1.Node
		local   string
		want    bool
		whyHas  string
		wantFor string
	}{
		{name: "no order", node: nodeWith("boot-1", map[string]string{rebootv1.AnnotationBootID: "boot-1"}), whyHas: "no reboot ordered"},
		{name: "approved, not yet ordered", node: nodeWith("boot-1", map[string]string{
			rebootv1.AnnotationInProgress: "x", rebootv1.AnnotationBootID: "boot-1", rebootv1.AnnotationNeeded: "true"}), whyHas: "no reboot ordered"},
		{name: "ordered for the current boot", node: nodeWith("boot-1", ordered), want: true, wantFor: "boot-1"},
		{name: "machine agrees", node: nodeWith("boot-1", ordered), local: "boot-1", want: true, wantFor: "boot-1"},
		{name: "already rebooted", node: nodeWith("boot-2", ordered), whyHas: "the reboot already happened"},
		{name: "status lags behind the machine", node: nodeWith("boot-1", ordered), local: "boot-2", whyHas: "the machine is in boot boot-2"},
		{name: "order without boot ID", node: nodeWith("boot-1", map[string]string{rebootv1.AnnotationNow: "x"}), whyHas: "without reboot.kubext.io/boot-id"},
		{name: "empty boot ID on both sides", node: nodeWith("", map[string]string{rebootv1.AnnotationNow: "x", rebootv1.AnnotationBootID: ""}), whyHas: "without"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, ok, why := RebootOrder(tc.node, tc.local)
			if ok != tc.want || o.BootID != tc.wantFor {
				t.Fatalf("RebootOrder = %+v, %t (%s); want %t for %q", o, ok, why, tc.want, tc.wantFor)
			}
			if !strings.Contains(why, tc.whyHas) {
				t.Errorf("why = %q, want it to contain %q", why, tc.whyHas)
			}
		})
	}
}

func TestSentinelDecision(t *testing.T) {
	booted := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	fresh := Sentinel{Present: true, Modified: booted.Add(time.Hour)}
	old := Sentinel{Present: true, Modified: booted.Add(-time.Hour)}
	for _, tc := range []struct {
		name     string
		needed   *string
		sentinel Sentinel
		booted   time.Time
		want     SentinelAction
	}{
		{name: "no file", sentinel: Sentinel{}, booted: booted, want: SentinelNothing},
		{name: "file, not asked yet", sentinel: fresh, booted: booted, want: SentinelRequest},
		{name: "file, asked already", needed: ptr.To("true"), sentinel: fresh, booted: booted, want: SentinelNothing},
		{name: "file, only true counts as asked", needed: ptr.To("yes"), sentinel: fresh, booted: booted, want: SentinelRequest},
		{name: "file, declined with needed=no", needed: ptr.To("no"), sentinel: fresh, booted: booted, want: SentinelNothing},
		{name: "file, needed=True", needed: ptr.To("True"), sentinel: fresh, booted: booted, want: SentinelNothing},
		{name: "file, declined with needed=false", needed: ptr.To("False"), sentinel: fresh, booted: booted, want: SentinelNothing},
		{name: "file, needed=0 is not a word for no", needed: ptr.To("0"), sentinel: fresh, booted: booted, want: SentinelRequest},
		{name: "file from before the boot", sentinel: old, booted: booted, want: SentinelStale},
		{name: "file from before the boot, asked already", needed: ptr.To("true"), sentinel: old, booted: booted, want: SentinelNothing},
		{name: "boot time unknown", sentinel: old, want: SentinelRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := map[string]string{}
			if tc.needed != nil {
				ann[rebootv1.AnnotationNeeded] = *tc.needed
			}
			if got := SentinelDecision(nodeWith("b", ann), tc.sentinel, tc.booted); got != tc.want {
				t.Errorf("SentinelDecision = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestAttempts(t *testing.T) {
	now := time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC)
	var a attempts
	if run, _ := a.due("b1", now); !run {
		t.Fatal("a first order must run")
	}
	a.record("b1", nil, now)
	if run, wait := a.due("b1", now.Add(time.Hour)); run || wait != 0 {
		t.Fatalf("a boot rebooted for must not run again, got run=%t wait=%s", run, wait)
	}
	if run, _ := a.due("b2", now); !run {
		t.Fatal("an order for another boot must run")
	}

	// Failures back off exponentially up to retryMax.
	if retryIn := a.record("b2", errors.New("boom"), now); retryIn != retryBase {
		t.Fatalf("record after one failure = %s, want %s", retryIn, retryBase)
	}
	if run, wait := a.due("b2", now); run || wait != retryBase {
		t.Fatalf("after one failure: run=%t wait=%s, want a wait of %s", run, wait, retryBase)
	}
	if run, _ := a.due("b2", now.Add(retryBase)); !run {
		t.Fatal("the retry must be due after the backoff")
	}
	a.record("b2", errors.New("boom"), now)
	if _, wait := a.due("b2", now); wait != 2*retryBase {
		t.Fatalf("after two failures wait = %s, want %s", wait, 2*retryBase)
	}
	for range 20 {
		a.record("b2", errors.New("boom"), now)
	}
	if _, wait := a.due("b2", now); wait != retryMax {
		t.Fatalf("after many failures wait = %s, want %s", wait, retryMax)
	}
	a.record("b2", nil, now)
	if run, _ := a.due("b2", now.Add(time.Hour)); run {
		t.Fatal("a success ends the retries")
	}
}

func TestBootTime(t *testing.T) {
	proc := func(stat string) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o600); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	got, err := bootTimeFrom(proc("cpu  1 2 3 4 5 6 7 8 9 10\nintr 5\nbtime 1767225600\nprocesses 9\n"))
	if err != nil || !got.Equal(time.Unix(1767225600, 0)) {
		t.Fatalf("bootTimeFrom = %s, %v", got, err)
	}
	if _, err := bootTimeFrom(proc("cpu  1 2 3 4 5 6 7 8 9 10\n")); err == nil {
		t.Fatal("no btime must be an error")
	}
	if _, err := bootTimeFrom(proc("btime soon\n")); err == nil {
		t.Fatal("a malformed btime must be an error")
	}
	if bt, err := HostBootTime(); err != nil || bt.After(time.Now()) || bt.Before(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("HostBootTime = %s, %v: not a plausible boot time", bt, err)
	}
}

func TestParseCommand(t *testing.T) {
	argv, err := ParseCommand(DefaultRebootCommand)
	if err != nil || strings.Join(argv, "|") != "nsenter|-t|1|-m|-u|-i|-n|-p|--|systemctl|reboot" {
		t.Fatalf("ParseCommand = %q, %v", argv, err)
	}
	if _, err := ParseCommand("  \t "); err == nil {
		t.Fatal("an empty command must be refused")
	}
	// No shell: metacharacters are plain arguments.
	argv, _ = ParseCommand("echo $HOME; rm -rf /")
	if len(argv) != 5 || argv[1] != "$HOME;" {
		t.Fatalf("ParseCommand = %q", argv)
	}
}

func TestCommand(t *testing.T) {
	ctx := context.Background()
	out, err := Command{"sh", "-c", "echo hello"}.Reboot(ctx)
	if err != nil || out != "hello" {
		t.Fatalf("Reboot = %q, %v", out, err)
	}
	// A failure reports the end of the output, not more than tailSize.
	_, err = Command{"sh", "-c", "i=0; while [ $i -lt 200 ]; do echo line $i; i=$((i+1)); done; echo last words >&2; exit 3"}.Reboot(ctx)
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.HasSuffix(err.Error(), "last words") {
		t.Fatalf("Reboot error = %v", err)
	}
	if len(err.Error()) > tailSize+64 {
		t.Errorf("the error carries %d bytes of output, want at most about %d", len(err.Error()), tailSize)
	}
	if _, err := (Command{filepath.Join(t.TempDir(), "missing")}).Reboot(ctx); err == nil {
		t.Fatal("a missing command must fail")
	}
	// A stopping agent does not wait for the command, nor stop it.
	marker := filepath.Join(t.TempDir(), "done")
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := (Command{"sh", "-c", "sleep 0.2; touch " + marker}).Reboot(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Reboot with a cancelled context = %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !fileExists(marker) {
		if time.Now().After(deadline) {
			t.Fatal("the command did not run to its end after the agent stopped waiting")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Signal sends systemd's reboot signal; a process that does not handle it
// dies of it, which shows which signal was sent.
func TestSignal(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := Signal{PID: cmd.Process.Pid}
	if _, err := s.Reboot(context.Background()); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("the process ended with %v", err)
	}
	if ws := exit.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != SignalSystemdReboot {
		t.Fatalf("the process ended with %v, want signal %d", err, SignalSystemdReboot)
	}
	if !strings.Contains(s.String(), "SIGRTMIN+5") {
		t.Errorf("String() = %q", s)
	}
	if _, err := (Signal{PID: 1 << 30}).Reboot(context.Background()); err == nil {
		t.Error("signalling a process that does not exist must fail")
	}
}
