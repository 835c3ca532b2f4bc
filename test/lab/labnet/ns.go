package labnet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// checkNSName refuses names that are not a plain file name under /run/netns.
func checkNSName(namespace string) error {
	if namespace == "" || namespace == "." || namespace == ".." || strings.ContainsRune(namespace, '/') {
		return fmt.Errorf("labnet: invalid namespace name %q", namespace)
	}
	return nil
}

// Command returns a command that runs name inside the named network
// namespace. It uses `nsenter --net=/run/netns/<namespace>`, which setns()es
// and then execs name, so the Cmd's process is the program itself and
// cancelling ctx kills it directly; only the network namespace changes
// (mounts, /sys and PIDs stay the root's).
func Command(ctx context.Context, namespace string, name string, args ...string) *exec.Cmd {
	argv := append([]string{"--net=" + filepath.Join(netnsDir, namespace), "--", name}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", argv...)
	if err := checkNSName(namespace); err != nil {
		cmd.Err = err
	}
	return cmd
}

// errGoexit marks that fn called runtime.Goexit (e.g. t.FailNow) inside Do.
var errGoexit = errors.New("labnet: runtime.Goexit inside Do")

// Do runs fn on an OS thread switched into the named network namespace and
// returns its error; sockets fn creates (listeners, dialed connections) stay
// in that namespace. Goroutines started by fn do not run in the namespace.
// The thread always switches back; if that fails the thread is discarded.
// A panic or t.FailNow inside fn is passed on to the caller's goroutine.
func Do(namespace string, fn func() error) error {
	if err := checkNSName(namespace); err != nil {
		return err
	}
	target, err := netns.GetFromName(namespace)
	if err != nil {
		return fmt.Errorf("labnet: open namespace %s: %w", namespace, err)
	}
	defer target.Close()

	type result struct {
		err      error
		panicked bool
		value    any
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("labnet: current namespace: %w", err)}
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("labnet: enter namespace %s: %w", namespace, err)}
			return
		}
		res := result{err: errGoexit}
		defer func() {
			if v := recover(); v != nil {
				res = result{panicked: true, value: v}
			}
			// Back to the original namespace; on failure keep the thread
			// locked so it is thrown away when this goroutine ends.
			if netns.Set(orig) == nil {
				runtime.UnlockOSThread()
			}
			done <- res
		}()
		res.err = fn()
	}()
	res := <-done
	switch {
	case res.panicked:
		panic(res.value)
	case errors.Is(res.err, errGoexit):
		runtime.Goexit()
	}
	return res.err
}

// NamespacePIDs lists the processes whose network namespace is the named one
// (same nsfs device and inode as /proc/<pid>/ns/net), so teardown can kill
// stragglers before [Destroy] unlinks the namespace.
func NamespacePIDs(namespace string) ([]int, error) {
	if err := checkNSName(namespace); err != nil {
		return nil, err
	}
	var want syscall.Stat_t
	if err := syscall.Stat(filepath.Join(netnsDir, namespace), &want); err != nil {
		return nil, fmt.Errorf("labnet: %w", err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("labnet: %w", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat("/proc/"+e.Name()+"/ns/net", &st); err != nil {
			continue // gone, or a kernel thread
		}
		if st.Dev == want.Dev && st.Ino == want.Ino {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids, nil
}

// handleIn opens a netlink handle working in the named namespace; the
// caller closes it.
func handleIn(namespace string) (*netlink.Handle, error) {
	ns, err := netns.GetFromName(namespace)
	if err != nil {
		return nil, err
	}
	defer ns.Close() // the handle's sockets keep the namespace
	return netlink.NewHandleAt(ns)
}
