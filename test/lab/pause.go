package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Control-plane components that PauseComponent can freeze (the names of
// kwokctl's pid files).
const (
	ComponentAPIServer = "kube-apiserver"
	ComponentEtcd      = "etcd"
)

// ComponentPID is the process ID of a control-plane component the lab's
// kwokctl runs (kube-apiserver, etcd, kube-controller-manager, ...).
func (l *Lab) ComponentPID(component string) (int, error) {
	if strings.ContainsAny(component, "/.") || component == "" {
		return 0, fmt.Errorf("lab: bad component name %q", component)
	}
	path := filepath.Join(l.Dir, "kwok", "clusters", l.Name, "pids", component+".pid")
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("lab: no pid for %s: %w", component, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("lab: %s: bad pid %q", path, data)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return 0, fmt.Errorf("lab: %s (pid %d) is not running: %w", component, pid, err)
	}
	return pid, nil
}

// PauseComponent freezes a control-plane component (SIGSTOP), as a stalled
// API server or etcd would be: its sockets stay open and connected, nothing
// is answered. It returns the function that resumes it (SIGCONT; safe to
// call more than once). The component resumes by itself after atMost, so
// that a caller that fails half-way does not leave the lab frozen.
func (l *Lab) PauseComponent(component string, atMost time.Duration) (resume func() error, err error) {
	pid, err := l.ComponentPID(component)
	if err != nil {
		return nil, err
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("lab: pausing %s (pid %d): %w", component, pid, err)
	}
	// kill returns once the signal is sent, not once every thread has
	// stopped: a thread on another CPU may still answer a request sent
	// right after (CI saw it once). Frozen means every thread stopped.
	if err := waitStopped(pid, time.Second); err != nil {
		_ = syscall.Kill(pid, syscall.SIGCONT)
		return nil, fmt.Errorf("lab: pausing %s (pid %d): %w", component, pid, err)
	}
	var once sync.Once
	var cerr error
	resume = func() error {
		once.Do(func() {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
				cerr = fmt.Errorf("lab: resuming %s (pid %d): %w", component, pid, err)
			}
		})
		return cerr
	}
	time.AfterFunc(atMost, func() { _ = resume() })
	return resume, nil
}

// waitStopped waits until every thread of pid is stopped (state T in
// /proc/<pid>/task/*/stat), for at most limit.
func waitStopped(pid int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		running, err := runningThreads(pid)
		if err != nil {
			return err
		}
		if running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d threads still running %s after SIGSTOP", running, limit)
		}
		time.Sleep(time.Millisecond)
	}
}

// runningThreads counts the threads of pid that are not stopped.
func runningThreads(pid int) (int, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	running := 0
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
		if err != nil {
			continue // the thread exited
		}
		// pid (comm) state ...: comm may hold spaces and parentheses, so
		// the state follows the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) {
			return 0, fmt.Errorf("unexpected /proc/%d/task/%s/stat: %q", pid, t.Name(), b)
		}
		if state := b[i+2]; state != 'T' && state != 't' {
			running++
		}
	}
	return running, nil
}
