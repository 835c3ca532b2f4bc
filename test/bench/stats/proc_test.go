package stats

import (
	"os"
	"testing"
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
