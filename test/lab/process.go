package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/kubext/kubext/test/lab/labnet"
)

// Process is a program the lab started for a caller: a node agent inside
// its node's namespace, or the manager in the root namespace.
type Process struct {
	Name string
	// Namespace is the network namespace it runs in ("" for the root's).
	Namespace string
	// Node is the lab node the process belongs to in deployed mode (a
	// container of a pod on that node): KillNode kills it ("" for none).
	Node string
	// Log is the file that receives the program's output.
	Log  string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs a program for the lab. With a non-empty namespace it runs
// inside that network namespace. Its output goes to Dir/logs/<name>.log;
// the lab stops it in StopProcesses and Down.
func (l *Lab) Start(name, namespace, binary string, args []string, env ...string) (*Process, error) {
	var cmd *exec.Cmd
	if namespace == "" {
		cmd = exec.Command(binary, args...)
	} else {
		cmd = labnet.Command(context.Background(), namespace, binary, args...)
	}
	cmd.Env = append(os.Environ(), env...)
	// Its own process group, so that a Ctrl-C meant for the demo reaches
	// the demo first and the demo stops its children in order.
	return l.run(name, namespace, cmd, &syscall.SysProcAttr{Setpgid: true})
}

// run starts cmd as a lab process (attr must make it a process group
// leader: Stop and Kill signal the group).
func (l *Lab) run(name, namespace string, cmd *exec.Cmd, attr *syscall.SysProcAttr) (*Process, error) {
	logPath := filepath.Join(l.Dir, "logs", name+".log")
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, Namespace: namespace, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	l.mu.Lock()
	defer l.mu.Unlock()
	// Forget processes that have ended, so that a long run that starts
	// many (pod servers) does not pile them up.
	live := l.processes[:0]
	for _, q := range l.processes {
		if q.Running() {
			live = append(live, q)
		}
	}
	l.processes = append(live, p)
	return p, nil
}

// Running reports whether the process has not exited yet.
func (p *Process) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Stop ends the process: SIGTERM, and SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) {
	if !p.Running() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Kill ends the process at once (SIGKILL), as a crash would.
func (p *Process) Kill() {
	if p.Running() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// StopProcesses stops every process the lab started, newest first.
func (l *Lab) StopProcesses() {
	l.mu.Lock()
	ps := l.processes
	l.processes = nil
	l.mu.Unlock()
	for i := len(ps) - 1; i >= 0; i-- {
		ps[i].Stop(5 * time.Second)
	}
}

// ProcessesIn lists the running processes the lab started in the network
// namespace ("" for the root namespace), e.g. a node's agent.
func (l *Lab) ProcessesIn(namespace string) []*Process {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*Process
	for _, p := range l.processes {
		if p.Namespace == namespace && p.Running() {
			out = append(out, p)
		}
	}
	return out
}

// startForwarder starts `lab forward` as a daemon that outlives this
// process (the CLI exits after `up`), listening on the bridge address.
func (l *Lab) startForwarder(ctx context.Context) error {
	target, err := l.apiServerAddr()
	if err != nil {
		return err
	}
	listen := net.JoinHostPort(l.Net.Gateway().String(), portOf(target))
	bin := filepath.Join(l.BinDir, "lab")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("lab: %s is missing: run `make tools` (it builds the lab CLI) first", bin)
	}
	out, err := os.OpenFile(filepath.Join(l.Dir, "logs", "forwarder.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(bin, "forward", "--listen", listen, "--target", target, "--device", l.Net.Bridge())
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	l.ForwarderPID = cmd.Process.Pid
	go func() { _ = cmd.Wait() }() // reap it if it dies while we still run
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", listen, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the API forwarder did not listen on %s: %w", listen, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return l.writeAgentKubeconfig(listen)
}

func (l *Lab) stopForwarder() error {
	if l.ForwarderPID == 0 {
		return nil
	}
	err := syscall.Kill(l.ForwarderPID, syscall.SIGTERM)
	if errors.Is(err, syscall.ESRCH) {
		err = nil
	}
	l.ForwarderPID = 0
	return err
}

// killNamespaceProcesses kills whatever still runs inside the lab's
// namespaces (an agent a crashed demo left behind), so that deleting the
// namespaces really frees them.
func killNamespaceProcesses(n *labnet.Network) error {
	var errs []error
	for _, ns := range slices.Concat(n.Namespaces(), n.PodNamespaces(), n.SystemPodNamespaces()) {
		pids, err := labnet.NamespacePIDs(ns)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("killing pid %d in %s: %w", pid, ns, err))
			}
		}
	}
	return errors.Join(errs...)
}

// PID is the process's ID (in the lab's PID namespace).
func (p *Process) PID() int { return p.cmd.Process.Pid }
