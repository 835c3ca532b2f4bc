package rebootagent

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
)

// A Rebooter reboots the machine. On a real machine it may never return.
type Rebooter interface {
	// Reboot starts the reboot and returns what it printed.
	Reboot(ctx context.Context) (output string, err error)
	// String says how it reboots, for logs and Events.
	String() string
}

// DefaultRebootCommand reboots the host from a container in its PID
// namespace (hostPID): the host's systemctl, run in the namespaces of the
// host's PID 1. The image must have nsenter.
const DefaultRebootCommand = "nsenter -t 1 -m -u -i -n -p -- systemctl reboot"

// Command reboots by running a program (argv).
type Command []string

// ParseCommand splits a command line into argv on white space. There is no
// shell and no quoting, so nothing in it is interpreted.
func ParseCommand(s string) (Command, error) {
	argv := strings.Fields(s)
	if len(argv) == 0 {
		return nil, errors.New("the reboot command is empty")
	}
	return argv, nil
}

func (c Command) String() string { return fmt.Sprintf("command %q", strings.Join(c, " ")) }

// tailSize is how much of the end of a command's output is kept for the
// Event and the log.
const tailSize = 512

// Reboot runs the command and waits for it. It returns the tail of the
// command's output, and an error that includes it if the command fails.
// The command runs in its own process group and is not tied to ctx: once
// started, a reboot is not undone by the agent stopping (an agent killed
// during the reboot, or a Ctrl-C meant for it, must not abort the reboot
// half-way). When ctx ends first, Reboot returns without waiting.
func (c Command) Reboot(ctx context.Context) (string, error) {
	cmd := exec.Command(c[0], c[1:]...) //nolint:gosec // the command is the admin's configuration
	out := &tail{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		output := strings.TrimSpace(out.String())
		if err != nil && output != "" {
			err = fmt.Errorf("%w: %s", err, output)
		}
		return output, err
	case <-ctx.Done():
		return strings.TrimSpace(out.String()), ctx.Err()
	}
}

// tail keeps the last tailSize bytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailSize {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailSize:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// SignalSystemdReboot is SIGRTMIN+5 as glibc and systemd number it (the
// kernel's SIGRTMIN is 32, glibc keeps two): systemd as PID 1 answers it by
// starting reboot.target, an orderly reboot.
const SignalSystemdReboot = syscall.Signal(39)

// Signal reboots by sending SignalSystemdReboot to the host's init. From a
// container it needs hostPID and root (or CAP_KILL), nothing else, and no
// tool in the image: the least privileged way to reboot a systemd host.
type Signal struct {
	// PID is the init to signal (1 unless testing).
	PID int
}

func (s Signal) String() string { return fmt.Sprintf("signal SIGRTMIN+5 to PID %d", s.PID) }

// Reboot sends the signal; systemd reboots asynchronously.
func (s Signal) Reboot(context.Context) (string, error) {
	if err := syscall.Kill(s.PID, SignalSystemdReboot); err != nil {
		return "", fmt.Errorf("signalling PID %d: %w", s.PID, err)
	}
	return "", nil
}
