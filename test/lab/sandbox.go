package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// SandboxSpec is one container of a deployed-mode pod as the lab runs it:
// what a container runtime would make of the applied pod spec, minus the
// image (the binary comes from bin/). `lab sandbox SPEC` runs it (see
// [RunSandbox]).
type SandboxSpec struct {
	// Root is an empty directory that becomes the container's root file
	// system (a tmpfs mounted on it in the sandbox's own mount namespace).
	Root string
	// Binary is the file on the host run as Command (e.g. bin/manager as
	// /manager): the image's entrypoint.
	Binary  string
	Command string
	Args    []string
	Env     []string
	// Mounts are bind mounts into the root, in order: the service-account
	// token directory, ConfigMap and Secret volumes, host paths.
	Mounts []SandboxMount
	// UID and GID the program runs as (a pod's runAsUser, or the image's
	// non-root user).
	UID, GID int
	// Capabilities the program keeps when it runs as root (e.g. NET_ADMIN);
	// every other one is dropped from the bounding set.
	Capabilities []string
	// NoNewPrivs is allowPrivilegeEscalation: false.
	NoNewPrivs bool
	// ReadOnlyRoot is readOnlyRootFilesystem: true.
	ReadOnlyRoot bool
	// RebootRequest is a file the sandbox's init creates when the program
	// sends it systemd's reboot signal (SIGRTMIN+5): the node's init of a
	// hostPID pod. The lab reboots the simulated node when it appears
	// (never the machine the lab runs on). Empty: the signal is ignored.
	RebootRequest string
}

// SandboxMount is a bind mount into the sandbox's root.
type SandboxMount struct {
	Source, Target string
	ReadOnly       bool
}

// sigRTMin5 is systemd's reboot request (SIGRTMIN+5 as glibc numbers it).
const sigRTMin5 = syscall.Signal(39)

// RunSandbox is `lab sandbox SPEC`, started by the lab in new mount and PID
// namespaces (and the pod's network namespace): it is the pod's init (PID
// 1). It builds the container's root file system, starts `lab
// sandbox-exec SPEC` to enter it and exec the program, forwards SIGTERM and
// SIGINT to it, turns a reboot signal into a reboot request, and exits with
// the program's status.
func RunSandbox(specPath string) error {
	spec, err := readSandboxSpec(specPath)
	if err != nil {
		return err
	}
	if os.Getpid() != 1 {
		return errors.New("sandbox: must run as PID 1 of its own PID namespace (the lab starts it so)")
	}
	// Nothing mounted here may leak into the host's mount namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("sandbox: make / private: %w", err)
	}
	if err := buildRoot(spec); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	child := exec.Command(self, "sandbox-exec", specPath)
	child.Stdout, child.Stderr = os.Stdout, os.Stderr
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, sigRTMin5)
	if err := child.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- child.Wait() }()
	for {
		select {
		case err := <-done:
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				os.Exit(exit.ExitCode())
			}
			return err
		case s := <-signals:
			if s == sigRTMin5 {
				if spec.RebootRequest != "" {
					fmt.Fprintln(os.Stderr, "sandbox: the node's init received the reboot signal: asking the lab to reboot the node")
					_ = os.WriteFile(spec.RebootRequest, nil, 0o644)
				}
				continue
			}
			_ = child.Process.Signal(s)
		}
	}
}

// buildRoot mounts a tmpfs on spec.Root holding the program, /proc, /sys, a
// few devices, the CA bundle of the image and the spec's mounts.
func buildRoot(spec *SandboxSpec) error {
	root := spec.Root
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return fmt.Errorf("sandbox: tmpfs on %s: %w", root, err)
	}
	bind := func(src, dst string, ro bool) error {
		fi, err := os.Stat(src)
		if err != nil {
			return fmt.Errorf("sandbox: mount source: %w", err)
		}
		target := filepath.Join(root, dst)
		if fi.IsDir() {
			err = os.MkdirAll(target, 0o755)
		} else if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
			err = os.WriteFile(target, nil, 0o644)
			if errors.Is(err, os.ErrExist) || errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
				err = nil // a file of /proc, already there
			}
		}
		if err != nil {
			return fmt.Errorf("sandbox: mount point %s: %w", dst, err)
		}
		if err := unix.Mount(src, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("sandbox: bind %s on %s: %w", src, dst, err)
		}
		if ro {
			if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
				return fmt.Errorf("sandbox: read-only %s: %w", dst, err)
			}
		}
		return nil
	}
	if err := bind(spec.Binary, spec.Command, true); err != nil {
		return err
	}
	// The image carries a CA bundle (pulsar+ssl and AWS need one).
	if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		if err := bind("/etc/ssl/certs/ca-certificates.crt", "/etc/ssl/certs/ca-certificates.crt", true); err != nil {
			return err
		}
	}
	for _, d := range []string{"null", "zero", "random", "urandom"} {
		if err := bind("/dev/"+d, "/dev/"+d, false); err != nil {
			return err
		}
	}
	// A fresh /proc of the sandbox's PID namespace, and the /sys of its
	// network namespace (its interfaces), as a runtime mounts them.
	for _, m := range []struct{ fs, dir string }{{"proc", "/proc"}, {"sysfs", "/sys"}} {
		dir := filepath.Join(root, m.dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
		if m.fs == "sysfs" {
			flags |= unix.MS_RDONLY
		}
		if err := unix.Mount(m.fs, dir, m.fs, flags, ""); err != nil {
			return fmt.Errorf("sandbox: mount %s: %w", m.dir, err)
		}
	}
	// Read-only, as a runtime makes it for an unprivileged container: a
	// program cannot change the node's kernel settings.
	if err := bind(filepath.Join(root, "proc", "sys"), "/proc/sys", true); err != nil {
		return err
	}
	for _, m := range spec.Mounts {
		if err := bind(m.Source, m.Target, m.ReadOnly); err != nil {
			return err
		}
	}
	if spec.ReadOnlyRoot {
		if err := unix.Mount("", root, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
			return fmt.Errorf("sandbox: read-only root: %w", err)
		}
	}
	return nil
}

// ExecSandbox is `lab sandbox-exec SPEC`, the init's child: it confines
// itself as the pod's securityContext says (bounding capabilities,
// no_new_privs, user), enters the root and execs the program with exactly
// the container's environment.
func ExecSandbox(specPath string) error {
	spec, err := readSandboxSpec(specPath)
	if err != nil {
		return err
	}
	// Capability bounding sets and no_new_privs are per thread; exec
	// happens on this one.
	runtime.LockOSThread()
	keep := map[uintptr]bool{}
	for _, c := range spec.Capabilities {
		n, ok := capabilityNumbers[strings.TrimPrefix(strings.ToUpper(c), "CAP_")]
		if !ok {
			return fmt.Errorf("sandbox: unknown capability %q", c)
		}
		keep[n] = true
	}
	for c := uintptr(0); c <= unix.CAP_LAST_CAP; c++ {
		if keep[c] {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("sandbox: drop capability %d: %w", c, err)
		}
	}
	if spec.NoNewPrivs {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("sandbox: no_new_privs: %w", err)
		}
	}
	if err := unix.Chroot(spec.Root); err != nil {
		return fmt.Errorf("sandbox: chroot: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("sandbox: setgroups: %w", err)
	}
	if err := syscall.Setgid(spec.GID); err != nil {
		return fmt.Errorf("sandbox: setgid: %w", err)
	}
	if err := syscall.Setuid(spec.UID); err != nil {
		return fmt.Errorf("sandbox: setuid: %w", err)
	}
	argv := append([]string{spec.Command}, spec.Args...)
	return syscall.Exec(spec.Command, argv, spec.Env)
}

func readSandboxSpec(path string) (*SandboxSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	spec := &SandboxSpec{}
	if err := json.Unmarshal(data, spec); err != nil {
		return nil, fmt.Errorf("sandbox: %s: %w", path, err)
	}
	return spec, nil
}

// capabilityNumbers are the capabilities a pod spec may add.
var capabilityNumbers = map[string]uintptr{
	"CHOWN": unix.CAP_CHOWN, "DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE, "FOWNER": unix.CAP_FOWNER,
	"KILL": unix.CAP_KILL, "SETGID": unix.CAP_SETGID, "SETUID": unix.CAP_SETUID,
	"NET_BIND_SERVICE": unix.CAP_NET_BIND_SERVICE, "NET_ADMIN": unix.CAP_NET_ADMIN, "NET_RAW": unix.CAP_NET_RAW,
	"SYS_ADMIN": unix.CAP_SYS_ADMIN, "SYS_BOOT": unix.CAP_SYS_BOOT, "SYS_PTRACE": unix.CAP_SYS_PTRACE,
}
