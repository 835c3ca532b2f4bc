// Command lab brings kubext's lab up and down (`make lab-up`, `make
// lab-down`) and runs the lab's API forwarder.
//
//	lab up [--nodes N] [--name NAME] [--network=auto|true|false] [--subnet CIDR] [--pod-subnet CIDR] [--crds DIR]
//	lab down [--name NAME]
//	lab forward --listen ADDR --target ADDR [--device BRIDGE]
//	lab podserver --listen ADDR --reply TEXT
//	lab reboot [--name NAME | --dir DIR] [--downtime D] NODE
//	lab install [--name NAME] [--manifest FILE]
//	lab sandbox SPEC
//	lab sandbox-exec SPEC
//
// install applies kubext's install manifest (default: config/default
// rendered by kubectl kustomize) to a lab that is up and runs kubext's own
// pods as processes until interrupted (deployed mode; see lab.Install).
// sandbox and sandbox-exec are the pod init and container entry that
// deployed mode runs for each container.
//
// podserver is the lab's stand-in for a pod's workload: started inside a pod
// network namespace, it answers every TCP connection with TEXT and a newline.
//
// reboot is a simulated reboot of a node, the lab's reboot agents' reboot
// command: the node goes NotReady for the downtime, comes back with a new
// boot ID and turns Ready; it returns once the node is Ready.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/lab/labnet"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "up":
		err = up(ctx, os.Args[2:])
	case "down":
		err = down(ctx, os.Args[2:])
	case "forward":
		err = forward(ctx, os.Args[2:])
	case "podserver":
		err = podserver(ctx, os.Args[2:])
	case "reboot":
		err = reboot(ctx, os.Args[2:])
	case "install":
		err = install(ctx, os.Args[2:])
	case "sandbox", "sandbox-exec":
		if len(os.Args) != 3 {
			usage()
		}
		if os.Args[1] == "sandbox" {
			err = lab.RunSandbox(os.Args[2])
		} else {
			err = lab.ExecSandbox(os.Args[2])
		}
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lab:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: lab up|down|forward|podserver|reboot|install|sandbox|sandbox-exec [flags]")
	os.Exit(2)
}

func logf(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

func up(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	name := fs.String("name", "kubext", "lab name")
	nodes := fs.Int("nodes", 3, "number of simulated nodes")
	network := fs.String("network", "auto", "build the network namespaces: true, false, or auto (when root)")
	subnet := fs.String("subnet", "198.51.100.0/24", "documentation /24 of the lab bridge")
	podSubnet := fs.String("pod-subnet", "", "documentation range of the pod IPs with the network (default: 203.0.113.0/24, or 198.51.100.0/24 when the bridge uses 203.0.113.0/24)")
	crds := fs.String("crds", "", "directory of CRDs to install")
	_ = fs.Parse(args)
	prefix, err := netip.ParsePrefix(*subnet)
	if err != nil {
		return err
	}
	opts := lab.Options{Name: *name, Nodes: *nodes, Subnet: prefix, Keep: true, Log: logf}
	if *podSubnet != "" {
		if opts.PodSubnet, err = netip.ParsePrefix(*podSubnet); err != nil {
			return err
		}
	}
	switch *network {
	case "auto":
		opts.Network = os.Geteuid() == 0
		if !opts.Network {
			logf("Not root: the lab runs without its network namespaces")
		}
	case "true":
		opts.Network = true
	}
	if *crds != "" {
		opts.CRDDirs = []string{*crds}
	}
	l, err := lab.Up(ctx, opts)
	if err != nil {
		return err
	}
	logf("Lab %q is up", l.Name)
	fmt.Printf("\nexport KUBECONFIG=%s\n", l.Kubeconfig)
	if l.Net != nil {
		fmt.Printf("\nnode namespaces: ")
		for _, n := range l.Nodes {
			fmt.Printf("%s (%s %s)  ", n, l.Net.NodeNamespace(n), l.Net.NodeAddr(n))
		}
		fmt.Printf("\nclient namespace: %s (%s)\npod IPs from: %s\nagents use: %s\n", l.Net.ClientNamespace(), l.Net.ClientAddr(), l.PodSubnet, l.AgentKubeconfig)
	}
	return nil
}

func down(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("down", flag.ExitOnError)
	name := fs.String("name", "kubext", "lab name")
	_ = fs.Parse(args)
	root, err := lab.RepoRoot()
	if err != nil {
		return err
	}
	l, err := lab.Load(filepath.Join(root, ".lab", *name))
	if os.IsNotExist(err) {
		logf("No lab %q is up", *name)
		return nil
	}
	if err != nil {
		return err
	}
	l.SetLog(logf)
	if err := l.Down(ctx); err != nil {
		return err
	}
	logf("Lab %q removed", *name)
	return nil
}

func install(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("install", flag.ExitOnError)
	name := fs.String("name", "kubext", "lab name")
	manifest := fs.String("manifest", "", "install manifest, e.g. dist/install.yaml (default: config/default rendered with kubectl kustomize)")
	_ = fs.Parse(args)
	root, err := lab.RepoRoot()
	if err != nil {
		return err
	}
	l, err := lab.Load(filepath.Join(root, ".lab", *name))
	if err != nil {
		return fmt.Errorf("no lab %q is up: %w", *name, err)
	}
	l.SetLog(logf)
	d, err := l.Install(ctx, lab.InstallOptions{Manifest: *manifest})
	if err != nil {
		return err
	}
	logf("kubext is installed; its pods run as processes until interrupted (logs in %s)", filepath.Join(l.Dir, "logs"))
	<-ctx.Done()
	d.Stop()
	return nil
}

func reboot(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("reboot", flag.ExitOnError)
	name := fs.String("name", "kubext", "lab name")
	dir := fs.String("dir", "", "the lab's state directory (default .lab/NAME in the repository)")
	downtime := fs.Duration("downtime", 0, "how long the node stays NotReady: the simulated shutdown and boot")
	_ = fs.Parse(args)
	if fs.NArg() != 1 {
		return errors.New("reboot: exactly one node name is required")
	}
	node := fs.Arg(0)
	if *dir == "" {
		root, err := lab.RepoRoot()
		if err != nil {
			return err
		}
		*dir = filepath.Join(root, ".lab", *name)
	}
	l, err := lab.Load(*dir)
	if err != nil {
		return fmt.Errorf("no lab in %s: %w", *dir, err)
	}
	before, err := l.BootID(ctx, node)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := l.RebootFor(ctx, node, *downtime); err != nil {
		return err
	}
	after, err := l.BootID(ctx, node)
	if err != nil {
		return err
	}
	logf("Rebooted %s in %s: boot ID %s -> %s", node, time.Since(start).Round(10*time.Millisecond), before, after)
	return nil
}

func forward(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("forward", flag.ExitOnError)
	listen := fs.String("listen", "", "address to listen on (the bridge address)")
	target := fs.String("target", "", "address to forward to (the API server on loopback)")
	device := fs.String("device", "", "accept connections only from this interface")
	_ = fs.Parse(args)
	f, err := labnet.Forward(*listen, *target, *device)
	if err != nil {
		return err
	}
	logf("Forwarding %s to %s", f.Addr(), *target)
	<-ctx.Done()
	return f.Close()
}

func podserver(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("podserver", flag.ExitOnError)
	listen := fs.String("listen", "", "address to listen on, e.g. :8080")
	reply := fs.String("reply", "", "text to answer every connection with (a newline is added)")
	_ = fs.Parse(args)
	if *listen == "" {
		return errors.New("podserver: --listen is required")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	logf("Answering on %s with %q", ln.Addr(), *reply)
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			time.Sleep(10 * time.Millisecond) // e.g. EMFILE: keep serving
			continue
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = io.WriteString(c, *reply+"\n")
		}()
	}
}
