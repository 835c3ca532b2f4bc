package stats

import (
	"os"
	"testing"
	"time"
)

func TestMemoryOfThisProcess(t *testing.T) {
	m, ok := ReadMemory(os.Getpid())
	if !ok || m.Now <= 0 || m.Peak < m.Now || m.Anon <= 0 || m.File <= 0 {
		t.Fatalf("%+v, %v: want 0 < now <= peak, and anonymous and file memory", m, ok)
	}
	if RSSMiB(os.Getpid()) <= 0 || PeakRSSMiB(os.Getpid()) <= 0 {
		t.Fatal("RSSMiB and PeakRSSMiB read nothing")
	}
	if _, ok := ReadMemory(-1); ok {
		t.Fatal("a process that does not exist has no memory")
	}
}

func TestCPUOfThisProcess(t *testing.T) {
	// Burn a known 200 ms of CPU (bounded in time): the reading grows by
	// about that, and the process has lived at least that long.
	before, ok := ReadCPU(os.Getpid())
	if !ok {
		t.Fatal("no CPU read for this process")
	}
	spins := 0
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
		spins++
	}
	t.Logf("%d spins", spins)
	after, _ := ReadCPU(os.Getpid())
	if used := after.Seconds - before.Seconds; used < 0.1 || used > 5 {
		t.Fatalf("used %.2f s of CPU in a 200 ms busy loop", used)
	}
	if after.Lived < 0.2 || after.Share() <= 0 {
		t.Fatalf("%+v (share %.1f %%): lived less than the loop", after, after.Share())
	}
	if _, ok := ReadCPU(-1); ok {
		t.Fatal("a process that does not exist has no CPU")
	}
}
