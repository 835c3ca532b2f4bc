package labnet

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/prometheus/procfs"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// A lab network made by a test or a benchmark lives as long as the process
// that made it; when that process is killed (a CI job cut off, a session
// ended) its bridge and namespaces stay behind and hold the subnet, and the
// next lab on that subnet fails with ErrSubnetInUse. The bridge therefore
// carries its owner in its alias, and [Create] removes a network whose owner
// is provably gone. "Provably": the owner is identified by PID, the process's
// start time (so a reused PID is not mistaken for it) and its PID namespace
// (a process of another PID namespace cannot be looked up, so its network is
// never taken for stale).

// ownerAliasPrefix starts the alias of a bridge whose network has an owner.
const ownerAliasPrefix = "kubext-lab owner="

// owner is the process a lab network lives as long as.
type owner struct {
	PID   int
	Start uint64 // start time in clock ticks after boot (/proc/PID/stat field 22)
	PIDNS uint64 // inode of the owner's PID namespace
}

// currentOwner describes the calling process.
func currentOwner() (owner, error) {
	return processOwner(os.Getpid())
}

func processOwner(pid int) (owner, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return owner{}, err
	}
	st, err := p.Stat()
	if err != nil {
		return owner{}, err
	}
	ns, err := pidNamespace(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		return owner{}, err
	}
	return owner{PID: pid, Start: st.Starttime, PIDNS: ns}, nil
}

func pidNamespace(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("labnet: %s: %w", path, err)
	}
	return st.Ino, nil
}

func (o owner) alias() string {
	return fmt.Sprintf("%s%d start=%d pidns=%d", ownerAliasPrefix, o.PID, o.Start, o.PIDNS)
}

// parseOwner reads an alias written by [owner.alias]; ok is false for any
// other alias (a bridge made by hand, by the lab CLI, or by an older kubext).
func parseOwner(alias string) (o owner, ok bool) {
	if !strings.HasPrefix(alias, ownerAliasPrefix) {
		return owner{}, false
	}
	rest := alias[len(ownerAliasPrefix)-len("owner="):]
	n, err := fmt.Sscanf(rest, "owner=%d start=%d pidns=%d", &o.PID, &o.Start, &o.PIDNS)
	if err != nil || n != 3 || o.PID <= 0 {
		return owner{}, false
	}
	return o, true
}

// gone reports whether o has certainly exited: o ran in this process's PID
// namespace and no process with its PID and start time exists any more.
func (o owner) gone() bool {
	self, err := pidNamespace("/proc/self/ns/pid")
	if err != nil || self != o.PIDNS {
		return false
	}
	now, err := processOwner(o.PID)
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	if err != nil {
		return false
	}
	return now.Start != o.Start
}

// staleNetworkPrefix returns the prefix of the lab network whose bridge l
// is, when that network's owner is gone; "" otherwise.
func staleNetworkPrefix(l netlink.Link) string {
	name := l.Attrs().Name
	if l.Type() != "bridge" || !strings.HasSuffix(name, "-br") {
		return ""
	}
	o, ok := parseOwner(l.Attrs().Alias)
	if !ok || !o.gone() {
		return ""
	}
	prefix := strings.TrimSuffix(name, "-br")
	if ValidatePrefix(prefix) != nil {
		return ""
	}
	return prefix
}
