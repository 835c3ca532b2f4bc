package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/rebootlab"
)

// kured's deployment as its own manifests (kured-ds.yaml, kured-rbac.yaml)
// have it: a DaemonSet kube-system/kured, whose annotation is the lock, and
// the service account kube-system/kured.
const (
	kuredNamespace = "kube-system"
	kuredName      = "kured"
	// kuredLockAnnotation is kured's default --lock-annotation.
	kuredLockAnnotation = "weave.works/kured-node-lock"
	// saDir is where a pod finds its service account (kured reads only
	// rest.InClusterConfig).
	saDir = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// installKured creates what kured's manifests deploy besides its pods: the
// service account, its RBAC (the rules of kured-rbac.yaml), and the
// DaemonSet that holds the lock. The DaemonSet's pods are the kured
// processes this harness runs itself (runKured), so its template selects
// no node of the lab. It returns a directory holding what a pod of the
// DaemonSet would find in saDir: a bound token, the CA and the namespace.
func installKured(ctx context.Context, l *lab.Lab, cs kubernetes.Interface) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: kuredNamespace, Name: kuredName}}
	if _, err := cs.CoreV1().ServiceAccounts(kuredNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: kuredNamespace, Name: kuredName}}
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: kuredName}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "delete", "get"}},
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
	}}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: kuredName}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: kuredName}}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: kuredNamespace, Name: kuredName}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, ResourceNames: []string{kuredName}, Verbs: []string{"update"}},
	}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: kuredNamespace, Name: kuredName}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: kuredName}}
	labels := map[string]string{"name": kuredName}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: kuredNamespace, Name: kuredName},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: kuredName,
					// The harness runs each node's kured; no node runs a pod.
					NodeSelector: map[string]string{"bench.kubext.io/no-such-node": "true"},
					Containers:   []corev1.Container{{Name: "kured", Image: "ghcr.io/kubereboot/kured"}},
				},
			},
		},
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	if _, err := cs.RbacV1().Roles(kuredNamespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	if _, err := cs.RbacV1().RoleBindings(kuredNamespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	if _, err := cs.AppsV1().DaemonSets(kuredNamespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	tok, err := cs.CoreV1().ServiceAccounts(kuredNamespace).CreateToken(ctx, kuredName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](4 * 3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("a token for kured: %w", err)
	}
	cfg, err := l.RESTConfig()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(l.Dir, "kured-serviceaccount")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return dir, errors.Join(
		os.WriteFile(filepath.Join(dir, "token"), []byte(tok.Status.Token), 0o600),
		os.WriteFile(filepath.Join(dir, "ca.crt"), cfg.CAData, 0o600),
		os.WriteFile(filepath.Join(dir, "namespace"), []byte(kuredNamespace), 0o600),
	)
}

// kuredLockHolders are the nodes named in kured's lock annotation on its
// DaemonSet (a single lock or, with --concurrency above 1, several).
func kuredLockHolders(ctx context.Context, cs kubernetes.Interface, nodes []string) ([]string, error) {
	ds, err := cs.AppsV1().DaemonSets(kuredNamespace).Get(ctx, kuredName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	v := ds.Annotations[kuredLockAnnotation]
	var out []string
	for _, n := range nodes {
		if strings.Contains(v, strconv.Quote(n)) {
			out = append(out, n)
		}
	}
	return out, nil
}

// kuredNodes runs one kured per node the way its DaemonSet's pod would:
// KURED_NODE_ID set to the node, the service account mounted at saDir, the
// host's PID namespace (kured runs its reboot command through nsenter into
// PID 1's mount namespace), its sentinel file, and a reboot command that
// is the lab's simulated reboot of the node. Each node's "host" is a PID
// and mount namespace of its own (unshare), whose PID 1 is the node's
// kured, so that nsenter -m/proc/1/ns/mnt works and a reboot can take the
// whole node's processes down. When the node is back with a new boot ID,
// its kured is killed and started again, as the node's reboot kills the
// pod and the DaemonSet's pod starts again on the new boot.
type kuredNodes struct {
	l        *lab.Lab
	binary   string
	saDir    string
	args     []string
	downtime time.Duration
	obs      *rebootlab.Observer
	cancel   context.CancelFunc
	mu       sync.Mutex
	restarts int
	wg       sync.WaitGroup
}

func (k *kuredNodes) run(ctx context.Context, node string) error {
	proc, err := k.start(node, 0)
	if err != nil {
		return err
	}
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		boot := 0
		for {
			select {
			case <-ctx.Done():
				proc.Kill()
				return
			case <-time.After(50 * time.Millisecond):
			}
			// The node's boot ID changes once per reboot; its kured
			// starts again on the new boot, once the node is Ready.
			seen, n := k.obs.Reboots(node), k.obs.Node(node)
			if seen <= boot || n == nil || !lab.NodeReady(n) {
				continue
			}
			boot = seen
			proc.Kill()
			if proc, err = k.start(node, boot); err != nil {
				fmt.Fprintf(os.Stderr, "restarting kured on %s: %v\n", node, err)
				return
			}
			k.mu.Lock()
			k.restarts++
			k.mu.Unlock()
		}
	}()
	return nil
}

func (k *kuredNodes) start(node string, boot int) (*lab.Process, error) {
	host, err := url.Parse(k.apiServer())
	if err != nil {
		return nil, err
	}
	h, port, err := net.SplitHostPort(host.Host)
	if err != nil {
		return nil, err
	}
	metricsPort, err := freePort()
	if err != nil {
		return nil, err
	}
	// A private /run (as a container has) holding the service account
	// where rest.InClusterConfig looks for it; then kured as PID 1.
	script := `set -e; mount -t tmpfs tmpfs /run; mkdir -p ` + saDir + `; cp "$1"/* ` + saDir + `/; shift; exec "$@"`
	args := append([]string{"-p", "-f", "-m", "--mount-proc", "/bin/sh", "-c", script, "sh", k.saDir, k.binary,
		"--metrics-host", "127.0.0.1", "--metrics-port", strconv.Itoa(metricsPort),
		"--reboot-sentinel", k.l.SentinelFile(node)}, k.args...)
	args = append(args, "--reboot-command", strings.Join(rebootCommand(k.l, node, k.downtime), " "))
	return k.l.Start(fmt.Sprintf("kured-%s-boot%d", node, boot), "", "/usr/bin/unshare", args,
		"KURED_NODE_ID="+node, "KUBERNETES_SERVICE_HOST="+h, "KUBERNETES_SERVICE_PORT="+port)
}

func (k *kuredNodes) apiServer() string {
	cfg, err := k.l.RESTConfig()
	if err != nil {
		return ""
	}
	return cfg.Host
}

// stop kills every kured and stops supervising them.
func (k *kuredNodes) stop() {
	k.cancel()
	k.wg.Wait()
}

// rebootCommand is the lab's simulated reboot of node, as the kubext
// agents' reboot command (lab.RebootCommandArgs) is.
func rebootCommand(l *lab.Lab, node string, downtime time.Duration) []string {
	args := l.RebootCommandArgs(node, downtime)
	return strings.Fields(args[len(args)-1])
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
