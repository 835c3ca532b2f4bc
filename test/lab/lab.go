// Package lab runs kubext's built-in lab: a real Kubernetes control plane
// (kube-apiserver, etcd, kube-controller-manager, kube-scheduler built from
// Go modules) with kwok simulating the nodes, plus, as root, a real network
// made of one namespace per simulated node and a client namespace on a
// bridge. Node agents run as local processes inside their node's namespace.
//
// The CLI (test/lab/cmd/lab, `make lab-up` / `make lab-down`), the demo and
// the e2e tests all drive the lab through this package.
package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubext/kubext/test/lab/labnet"
	"github.com/kubext/kubext/test/repo"
)

// KubeVersion is the Kubernetes version the lab's control plane is built at.
const KubeVersion = repo.KubeVersion

// Options say what lab to bring up. The zero value of every field but Name
// has a usable default.
type Options struct {
	// Name of the lab; it names the kwokctl cluster and the state directory.
	Name string
	// Prefix of the network namespaces and links (at most 6 characters).
	Prefix string
	// Dir holds the lab's state, kubeconfigs and logs (default .lab/<Name>
	// under the repository root).
	Dir string
	// BinDir holds the built tools: k8s-<version>/ and lab (default bin/
	// under the repository root).
	BinDir string
	// Nodes is the number of simulated nodes (default 3).
	Nodes int
	// Subnet is the documentation /24 of the lab's bridge (default
	// 198.51.100.0/24; this machine itself uses 192.0.2.0/24). Node i has .10+i, the client .200, the root side .1.
	Subnet netip.Prefix
	// Network builds the network namespaces; it needs root. Without it the
	// lab is only the cluster.
	Network bool
	// PodSubnet is where pods take their addresses from when Network is on
	// (default 203.0.113.0/24, or 198.51.100.0/24 when that is Subnet's
	// neighbour 203.0.113.0/24). Each node gets its own slice as
	// spec.podCIDR (with up to 15 nodes), from which kwok assigns pod IPs;
	// the addresses exist only inside node and pod namespaces (see
	// [PodNetwork]), never in the root namespace. Without Network, kwok's
	// default range is left alone.
	PodSubnet netip.Prefix
	// CRDDirs are applied once the cluster is up (e.g. config/crd/bases).
	CRDDirs []string
	// PodSecurity is the Pod Security Admission level the API server
	// enforces in namespaces without a pod-security label of their own
	// (e.g. "baseline", as hardened clusters set it; default: none, the
	// upstream "privileged"). kube-system stays exempt.
	PodSecurity string
	// Keep makes the lab network outlive this process (the lab CLI, whose
	// lab stays up until `lab down`); otherwise, if this process is killed
	// before Down, the next lab on the subnet removes the network.
	Keep bool
	// Log receives progress lines (default: discarded).
	Log func(format string, args ...any)
}

// Lab is a running lab. Its exported fields are saved in Dir/state.json so
// that a later process (`make lab-down`, the demo) can find it again.
type Lab struct {
	Name   string
	Prefix string
	Dir    string
	BinDir string
	// Kubeconfig reaches the API server on 127.0.0.1 from the root namespace.
	Kubeconfig string
	// AgentKubeconfig reaches the API server from inside a node namespace,
	// through the forwarder on the bridge (empty without Network).
	AgentKubeconfig string
	// Nodes are the simulated nodes' names, in order.
	Nodes []string
	// PodSubnet is where pod IPs come from (zero without Network: then
	// kwok's default range is used).
	PodSubnet netip.Prefix `json:",omitzero"`
	// Net is the network topology (nil without Network).
	Net *labnet.Network
	// ForwarderPID is the process forwarding the bridge address to the API
	// server (0 without Network).
	ForwarderPID int

	log func(format string, args ...any)

	mu        sync.Mutex // guards processes and podNet
	processes []*Process
	podNet    *PodNetwork
	deployed  *Deployed
	// podNetStart serialises StartPodNetwork.
	podNetStart sync.Mutex
}

func (o *Options) setDefaults() error {
	if o.Name == "" {
		return errors.New("lab: Options.Name is required")
	}
	if o.Prefix == "" {
		o.Prefix = "kx"
	}
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if !o.Subnet.IsValid() {
		o.Subnet = netip.MustParsePrefix("198.51.100.0/24")
	}
	if o.Network && !o.PodSubnet.IsValid() {
		o.PodSubnet = netip.MustParsePrefix("203.0.113.0/24")
		if o.Subnet.Overlaps(o.PodSubnet) {
			o.PodSubnet = netip.MustParsePrefix("198.51.100.0/24")
		}
	}
	if o.Dir == "" || o.BinDir == "" {
		root, err := RepoRoot()
		if err != nil {
			return err
		}
		if o.Dir == "" {
			o.Dir = filepath.Join(root, ".lab", o.Name)
		}
		if o.BinDir == "" {
			o.BinDir = filepath.Join(root, "bin")
		}
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	return nil
}

// Up brings a lab up: any leftover of a lab of the same name is removed
// first, so Up twice in a row works. On error it tears down what it made.
func Up(ctx context.Context, opts Options) (l *Lab, err error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	if opts.Network && os.Geteuid() != 0 {
		return nil, errors.New("lab: the lab network needs root (network namespaces); run as root or without the network")
	}
	if opts.Network {
		if err := labnet.ValidatePodSubnet(opts.PodSubnet, opts.Subnet); err != nil {
			return nil, err
		}
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	if old, err := Load(dir); err == nil {
		opts.Log("Removing the previous lab %q", old.Name)
		if err := old.Down(ctx); err != nil {
			return nil, fmt.Errorf("removing the previous lab: %w", err)
		}
	}
	if opts.Network {
		// Namespaces of a lab whose state file was lost.
		if err := labnet.Destroy(opts.Prefix); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	l = &Lab{Name: opts.Name, Prefix: opts.Prefix, Dir: dir, BinDir: opts.BinDir, log: opts.Log}
	if opts.Network {
		l.PodSubnet = opts.PodSubnet
	}
	for i := 0; i < opts.Nodes; i++ {
		l.Nodes = append(l.Nodes, fmt.Sprintf("node-%d", i))
	}
	defer func() {
		if err != nil {
			_ = l.Down(context.WithoutCancel(ctx))
			l = nil
		}
	}()
	if err := l.save(); err != nil {
		return l, err
	}

	var gateway netip.Addr
	if opts.Network {
		opts.Log("Creating the lab network on %s: %d node namespaces and a client namespace; pods get addresses from %s", opts.Subnet, len(l.Nodes), opts.PodSubnet)
		l.Net, err = labnet.Create(labnet.Config{Prefix: opts.Prefix, Subnet: opts.Subnet, Nodes: l.Nodes, PodSubnet: opts.PodSubnet, Keep: opts.Keep})
		if err != nil {
			return l, fmt.Errorf("creating the lab network: %w", err)
		}
		gateway = l.Net.Gateway()
		if err := l.save(); err != nil {
			return l, err
		}
	}

	start := time.Now()
	opts.Log("Starting the control plane (kwokctl, binary runtime, %s, 127.0.0.1)", KubeVersion)
	if err := l.createCluster(ctx, gateway, opts.PodSecurity); err != nil {
		return l, err
	}
	opts.Log("Control plane up in %s", time.Since(start).Round(100*time.Millisecond))
	if err := l.save(); err != nil {
		return l, err
	}
	if opts.Network {
		if err := l.startForwarder(ctx); err != nil {
			return l, err
		}
		if err := l.save(); err != nil {
			return l, err
		}
	}
	if err := l.createNodes(ctx); err != nil {
		return l, err
	}
	opts.Log("%d simulated nodes Ready: %v", len(l.Nodes), l.Nodes)
	for _, d := range opts.CRDDirs {
		if err := l.ApplyCRDs(ctx, d); err != nil {
			return l, err
		}
	}
	return l, nil
}

// Load finds a lab by its state directory.
func Load(dir string) (*Lab, error) {
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return nil, err
	}
	l := &Lab{log: func(string, ...any) {}}
	if err := json.Unmarshal(data, l); err != nil {
		return nil, fmt.Errorf("reading %s: %w", filepath.Join(dir, "state.json"), err)
	}
	return l, nil
}

// SetLog sets where a loaded lab reports progress.
func (l *Lab) SetLog(log func(format string, args ...any)) { l.log = log }

func (l *Lab) save() error {
	data, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(l.Dir, "state.json"), data, 0o644)
}

// Down removes everything the lab created: processes it started, the
// cluster, the network namespaces and links, and its state directory.
// It is idempotent and goes on past errors, reporting them all.
func (l *Lab) Down(ctx context.Context) error {
	var errs []error
	l.mu.Lock()
	pn, d := l.podNet, l.deployed
	l.mu.Unlock()
	if d != nil {
		d.Stop()
	}
	if pn != nil {
		errs = append(errs, pn.Close())
	}
	l.StopProcesses()
	if l.Net != nil || l.ForwarderPID != 0 {
		errs = append(errs, l.stopForwarder())
	}
	errs = append(errs, l.deleteCluster(ctx))
	if l.Net != nil {
		errs = append(errs, killNamespaceProcesses(l.Net), labnet.Destroy(l.Prefix))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return errors.Join(os.RemoveAll(l.workloadDir()), os.RemoveAll(l.Dir))
}

// RESTConfig is a client configuration for the lab's API server.
func (l *Lab) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig)
	if err != nil {
		return nil, err
	}
	// client-go caches TLS transports by file path; a lab brought up again
	// at the same path has a new CA, so hand over the contents instead.
	if err := rest.LoadTLSFiles(cfg); err != nil {
		return nil, err
	}
	cfg.CAFile, cfg.CertFile, cfg.KeyFile = "", "", ""
	cfg.QPS, cfg.Burst = 200, 400
	return cfg, nil
}

// Clientset is a typed client for the lab's API server.
func (l *Lab) Clientset() (*kubernetes.Clientset, error) {
	cfg, err := l.RESTConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// RepoRoot finds the root of the kubext repository (repo.Root).
func RepoRoot() (string, error) { return repo.Root() }
