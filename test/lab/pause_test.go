package lab

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// waitStopped returns only once every thread of the process is stopped,
// and says so when they do not stop.
func TestWaitStoppedSeesEveryThreadStop(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid

	if err := waitStopped(pid, 50*time.Millisecond); err == nil {
		t.Fatal("a running process was taken for stopped")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := waitStopped(pid, time.Second); err != nil {
		t.Fatalf("after SIGSTOP: %v", err)
	}
	if n, err := runningThreads(pid); err != nil || n != 0 {
		t.Fatalf("running threads after waitStopped: %d, %v", n, err)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	for n, _ := runningThreads(pid); n == 0; n, _ = runningThreads(pid) {
		if time.Now().After(deadline) {
			t.Fatal("still stopped after SIGCONT")
		}
		time.Sleep(time.Millisecond)
	}
}
