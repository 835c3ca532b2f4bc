package stats

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
)

// Memory is a process's resident memory, in MiB, from /proc/<pid>/status:
// now (VmRSS) and at its peak (VmHWM), and what the present is made of —
// anonymous memory (heap, stacks: RssAnon) and mapped files (its binary:
// RssFile).
type Memory struct {
	Now, Peak, Anon, File float64
}

// ReadMemory reads a process's Memory; false when the process is gone.
func ReadMemory(pid int) (Memory, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, false
	}
	var m Memory
	fields := map[string]*float64{"VmRSS:": &m.Now, "VmHWM:": &m.Peak, "RssAnon:": &m.Anon, "RssFile:": &m.File}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && fields[f[0]] != nil {
			kb, _ := strconv.ParseFloat(f[1], 64)
			*fields[f[0]] = kb / 1024
		}
	}
	return m, true
}

// RSSMiB is a process's resident memory now, in MiB; 0 when it is gone.
func RSSMiB(pid int) float64 { m, _ := ReadMemory(pid); return m.Now }

// PeakRSSMiB is a process's peak resident memory, in MiB; 0 when it is gone.
func PeakRSSMiB(pid int) float64 { m, _ := ReadMemory(pid); return m.Peak }

// CPU is the processor time a process has used (user and system), and how
// long it has lived, from /proc (prometheus/procfs).
type CPU struct {
	Seconds, Lived float64
}

// Share is the process's CPU over its life, in percent of one core.
func (c CPU) Share() float64 {
	if c.Lived <= 0 {
		return 0
	}
	return 100 * c.Seconds / c.Lived
}

// ReadCPU reads a process's CPU; false when the process is gone.
func ReadCPU(pid int) (CPU, bool) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return CPU{}, false
	}
	st, err := p.Stat()
	if err != nil {
		return CPU{}, false
	}
	start, err := st.StartTime()
	if err != nil {
		return CPU{}, false
	}
	return CPU{Seconds: st.CPUTime(), Lived: float64(time.Now().UnixNano())/1e9 - start}, true
}
