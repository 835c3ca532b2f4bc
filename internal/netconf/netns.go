package netconf

import (
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/vishvananda/netns"
)

// openNS opens the namespace at path. Without a path it returns
// netns.None(): the process's own namespace, used without ever entering
// it. Entering a network namespace (setns), even the one a thread is
// already in, needs CAP_SYS_ADMIN, which the deployed ip-agent does not
// have (only NET_ADMIN and NET_RAW).
func openNS(path string) (netns.NsHandle, error) {
	if path == "" {
		return netns.None(), nil
	}
	return netns.GetFromPath(path)
}

// nsFd is the namespace for nftables: 0 for the process's own.
func nsFd(ns netns.NsHandle) int {
	if !ns.IsOpen() {
		return 0
	}
	return int(ns)
}

// inNetNS runs fn on a new OS thread switched into ns, for what is bound to
// the namespace of the thread that does it: opening sockets, and reading or
// writing /proc/sys/net. The thread never switches back: it stays locked
// and ends with its goroutine, so no other goroutine ever runs in ns.
func inNetNS(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if !ns.IsOpen() { // the process's own: nothing to enter
			errc <- fn()
			return
		}
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("enter network namespace: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// ensureForwarding turns on forwarding for the families in use, in the
// namespace being programmed only: DNAT hands packets for a static address
// to a pod behind a veth, which is forwarding. Values already on are not
// written.
func (k *kernel) ensureForwarding(f families) error {
	var paths []string
	if f.v4 {
		paths = append(paths, "/proc/sys/net/ipv4/ip_forward")
	}
	if f.v6 {
		paths = append(paths, "/proc/sys/net/ipv6/conf/all/forwarding")
	}
	if len(paths) == 0 {
		return nil
	}
	return inNetNS(k.ns, func() error {
		for _, p := range paths {
			cur, err := os.ReadFile(p)
			if err != nil {
				return fmt.Errorf("read %s: %w", p, err)
			}
			if strings.TrimSpace(string(cur)) == "1" {
				continue
			}
			if err := os.WriteFile(p, []byte("1"), 0o644); err != nil {
				return fmt.Errorf("enable forwarding: %w", err)
			}
			k.log.Info("enabled forwarding", "sysctl", strings.TrimPrefix(p, "/proc/sys/"))
		}
		return nil
	})
}
