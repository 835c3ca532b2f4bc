package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	cachev1 "github.com/kubext/kubext/api/cache/v1alpha1"
	"github.com/kubext/kubext/test/lab/labnet"
)

// Workload pods: kwok runs no containers, so the pod network ([PodNetwork])
// plays the kubelet for the pods of the workloads kubext manages whose
// program the lab can run for real: the members of a Redis (pods labelled
// cache.kubext.io/redis, controlled by its StatefulSet), whose redis
// containers run the machine's redis-server (Debian package).
//
// How a container becomes a process:
//   - The image must be a Redis image (repository "redis", any registry,
//     tag or digest). Without a command, the image's entrypoint is
//     emulated: arguments that start with "-" or name a .conf file are
//     redis-server's; with one, command[0] must be redis-server.
//   - Environment and arguments are resolved as a kubelet does: env and
//     envFrom, values from the pod, ConfigMaps and Secrets (the password of
//     a Redis comes from its Secret), then $(VAR) in the arguments.
//   - Volumes: emptyDir only, a directory per pod kept across container
//     restarts and removed with the pod; an argument naming a path under a
//     volumeMount's mountPath is rewritten to that directory (the process
//     shares the host's file system).
//   - Identity: the process runs as the container's runAsUser, or as the
//     machine's redis user (the user the image's entrypoint switches to),
//     with no capabilities, no supplementary groups and no_new_privs
//     (setpriv), never as root.
//   - Network: the pod's own namespace with its pod IP, routed like a
//     cluster's flat pod network ([labnet.Network.RoutePod]): other nodes'
//     pods and the root namespace (where the manager runs as a local
//     process) reach it by its pod IP; the client does not.
//   - Lifecycle: a container that exits is restarted after a second
//     (restartPolicy Always), into an empty data set unless it persisted
//     one in its volume; a pod deleted has its processes stopped (SIGTERM,
//     then SIGKILL after its grace period). The lab has no kubelet that
//     could fail alone: a node that is NotReady is a node that is down
//     (KillNode, a reboot, FailNode), so its workload pods' processes are
//     killed at once (SIGKILL) and start again, empty, once it is Ready; a
//     new boot ID restarts them too.

// workloadRestartDelay is how long an exited container stays down before it
// is restarted.
const workloadRestartDelay = time.Second

// workloadReady bounds the wait for a new workload pod to accept
// connections on its first container port.
const workloadReady = 10 * time.Second

// runsWorkload reports whether the pod is a workload pod the lab runs.
func runsWorkload(p *corev1.Pod) bool {
	if _, ok := p.Labels[cachev1.LabelRedis]; !ok {
		return false
	}
	owner := metav1.GetControllerOf(p)
	return owner != nil && owner.Kind == "StatefulSet"
}

// workloadRun is what the lab runs for one workload pod.
type workloadRun struct {
	dir        string
	grace      time.Duration
	port       int
	containers []*workloadContainer
}

type workloadContainer struct {
	name     string
	cmd      func() *exec.Cmd
	proc     *Process
	exited   time.Time // when the process was first seen exited
	restarts int
}

// isRedisImage reports whether image is a Redis image: its repository's
// last path component is "redis", whatever the registry, tag or digest.
func isRedisImage(image string) bool {
	name, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		name = name[:i]
	}
	return name[strings.LastIndexByte(name, '/')+1:] == "redis"
}

// redisArgv is the program and arguments the redis image runs for a
// container (its entrypoint emulated), before $(VAR) expansion.
func redisArgv(c *corev1.Container) ([]string, error) {
	argv := append(append([]string(nil), c.Command...), c.Args...)
	if len(c.Command) == 0 && (len(argv) == 0 || strings.HasPrefix(argv[0], "-") || strings.HasSuffix(argv[0], ".conf")) {
		argv = append([]string{"redis-server"}, argv...)
	}
	if filepath.Base(argv[0]) != "redis-server" {
		return nil, fmt.Errorf("command %q: the lab runs only redis-server from a Redis image", argv[0])
	}
	return argv, nil
}

// runAs is the user and group a container runs as.
func runAs(pod *corev1.Pod, c *corev1.Container) (uid, gid int, err error) {
	uid, gid = -1, -1
	if u, err := user.Lookup("redis"); err == nil {
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
	}
	if psc := pod.Spec.SecurityContext; psc != nil {
		if psc.RunAsUser != nil {
			uid = int(*psc.RunAsUser)
		}
		if psc.RunAsGroup != nil {
			gid = int(*psc.RunAsGroup)
		}
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = int(*sc.RunAsUser)
		}
		if sc.RunAsGroup != nil {
			gid = int(*sc.RunAsGroup)
		}
	}
	switch {
	case uid < 0 || gid < 0:
		return 0, 0, errors.New("the machine has no redis user (install redis-server) and the pod names no runAsUser and runAsGroup")
	case uid == 0:
		return 0, 0, errors.New("the lab runs no workload as root")
	}
	return uid, gid, nil
}

// prepareWorkload resolves everything a workload pod's containers need
// before any of them starts: programs, environment, volumes, user.
func (pn *PodNetwork) prepareWorkload(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, namespace string) (w *workloadRun, err error) {
	l := pn.lab
	root, err := l.workloadRoot()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, pod.Namespace+"_"+pod.Name+"_"+string(pod.UID))
	w = &workloadRun{dir: dir, grace: 30 * time.Second}
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		w.grace = time.Duration(*g) * time.Second
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	if len(pod.Spec.InitContainers) > 0 {
		return nil, errors.New("init containers are not supported by the lab")
	}
	server, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not installed (hack/test-deps.sh installs it): %w", err)
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if !isRedisImage(c.Image) {
			return nil, fmt.Errorf("container %s: image %q is not a Redis image; the lab runs only those", c.Name, c.Image)
		}
		argv, err := redisArgv(c)
		if err != nil {
			return nil, fmt.Errorf("container %s: %w", c.Name, err)
		}
		env, err := resolveEnv(ctx, cs, pod, c)
		if err != nil {
			return nil, fmt.Errorf("container %s: %w", c.Name, err)
		}
		uid, gid, err := runAs(pod, c)
		if err != nil {
			return nil, fmt.Errorf("container %s: %w", c.Name, err)
		}
		mounts, err := w.volumes(pod, c, uid, gid)
		if err != nil {
			return nil, fmt.Errorf("container %s: %w", c.Name, err)
		}
		vars := map[string]string{}
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			vars[k] = v
		}
		args := []string{"--reuid", strconv.Itoa(uid), "--regid", strconv.Itoa(gid), "--clear-groups", "--no-new-privs", "--", server}
		for _, a := range argv[1:] {
			args = append(args, rewritePath(expandVars(a, vars), mounts))
		}
		env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOSTNAME=" + pod.Name}, env...)
		workdir := w.dir
		if len(c.VolumeMounts) > 0 {
			workdir = mounts[c.VolumeMounts[0].MountPath]
		}
		w.containers = append(w.containers, &workloadContainer{name: c.Name, cmd: func() *exec.Cmd {
			cmd := labnet.Command(context.Background(), namespace, "setpriv", args...)
			cmd.Env, cmd.Dir = env, workdir
			return cmd
		}})
		if w.port == 0 && len(c.Ports) > 0 {
			w.port = int(c.Ports[0].ContainerPort)
		}
	}
	return w, nil
}

// volumes makes the container's volumes and returns the directory of each
// mountPath.
func (w *workloadRun) volumes(pod *corev1.Pod, c *corev1.Container, uid, gid int) (map[string]string, error) {
	out := map[string]string{}
	for _, m := range c.VolumeMounts {
		var vol *corev1.Volume
		for i := range pod.Spec.Volumes {
			if pod.Spec.Volumes[i].Name == m.Name {
				vol = &pod.Spec.Volumes[i]
			}
		}
		if vol == nil || vol.EmptyDir == nil {
			return nil, fmt.Errorf("volume %s: only emptyDir volumes are run by the lab", m.Name)
		}
		// The directories above are the lab's, which the workload's user
		// may pass through but not write.
		if err := os.MkdirAll(filepath.Join(w.dir, "volumes"), 0o755); err != nil {
			return nil, err
		}
		dir := filepath.Join(w.dir, "volumes", m.Name)
		if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
			return nil, err
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
		out[filepath.Clean(m.MountPath)] = filepath.Join(dir, m.SubPath)
	}
	return out, nil
}

// rewritePath maps an argument that names a path under a mountPath to the
// volume's directory.
func rewritePath(arg string, mounts map[string]string) string {
	for mp, dir := range mounts {
		if arg == mp {
			return dir
		}
		if rest, ok := strings.CutPrefix(arg, mp+"/"); ok {
			return filepath.Join(dir, rest)
		}
	}
	return arg
}

// startWorkload starts the pod's containers and waits until the first
// container port accepts connections from the pod's node.
func (pn *PodNetwork) startWorkload(ctx context.Context, key, namespace, nodeNS string, addr netip.Addr, w *workloadRun) error {
	for _, c := range w.containers {
		if err := pn.startContainer(key, namespace, c); err != nil {
			return err
		}
	}
	if w.port == 0 {
		return nil
	}
	target := netip.AddrPortFrom(addr, uint16(w.port)).String()
	deadline := time.Now().Add(workloadReady)
	var last error
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, c := range w.containers {
			if !c.proc.Running() {
				return fmt.Errorf("container %s exited (see %s)", c.name, c.proc.Log)
			}
		}
		last = labnet.Do(nodeNS, func() error {
			conn, err := net.DialTimeout("tcp", target, time.Second)
			if err == nil {
				conn.Close()
			}
			return err
		})
		if last == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s did not accept connections within %s: %v", target, workloadReady, last)
}

func (pn *PodNetwork) startContainer(key, namespace string, c *workloadContainer) error {
	p, err := pn.lab.run("pod-"+strings.ReplaceAll(key, "/", "-")+"-"+c.name, namespace, c.cmd(), &syscall.SysProcAttr{Setpgid: true})
	if err != nil {
		return fmt.Errorf("container %s: %w", c.name, err)
	}
	pn.mu.Lock() // Container reads it
	c.proc, c.exited = p, time.Time{}
	pn.mu.Unlock()
	return nil
}

// restartExited restarts the containers whose process exited, a second
// after it was first seen exited.
func (pn *PodNetwork) restartExited(key, namespace string, w *workloadRun) {
	for _, c := range w.containers {
		switch {
		case c.proc == nil || c.proc.Running():
			continue
		case c.exited.IsZero():
			c.exited = time.Now()
			continue
		case time.Since(c.exited) < workloadRestartDelay:
			continue
		}
		c.restarts++
		pn.lab.log("Pod network: container %s of pod %s exited; restart %d (see %s)", c.name, key, c.restarts, c.proc.Log)
		if err := pn.startContainer(key, namespace, c); err != nil {
			pn.report(key, err)
		}
	}
}

// stop ends the pod's processes: SIGKILL at once when crash (its volumes
// stay, as a node's disk survives a reboot), else SIGTERM and SIGKILL after
// the pod's grace period, and its volumes go with the pod.
func (w *workloadRun) stop(crash bool) {
	for _, c := range w.containers {
		switch {
		case c.proc == nil:
		case crash:
			c.proc.Kill()
		default:
			c.proc.Stop(w.grace)
		}
	}
	if !crash {
		_ = os.RemoveAll(w.dir)
	}
}

// Container is the running process of a workload pod's ("namespace/name")
// container, or nil: tests kill it as a crash would.
func (pn *PodNetwork) Container(podKey, container string) *Process {
	pn.mu.Lock()
	defer pn.mu.Unlock()
	p, ok := pn.pods[podKey]
	if !ok || p.workload == nil {
		return nil
	}
	for _, c := range p.workload.containers {
		if c.name == container && c.proc != nil && c.proc.Running() {
			return c.proc
		}
	}
	return nil
}

// workloadRoot holds the workloads' files. Their programs run as their own
// unprivileged users and are given these paths directly, so every parent
// must be traversable by them: not under the lab's directory, whose
// parents (a checkout in a mode-0700 temporary directory, a home
// directory) are not the lab's to open up, but in the system's temporary
// directory, passable (0711) and not listable. Down removes it.
func (l *Lab) workloadRoot() (string, error) {
	root := l.workloadDir()
	if err := os.MkdirAll(root, 0o711); err != nil {
		return "", err
	}
	return root, os.Chmod(root, 0o711)
}

func (l *Lab) workloadDir() string {
	return filepath.Join(os.TempDir(), "kubext-lab-"+l.Prefix+"-workloads")
}
