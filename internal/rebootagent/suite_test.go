package rebootagent

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kubext/kubext/internal/agentkube"
	"github.com/kubext/kubext/test/testenv"
)

const (
	// thisNode is the node the agent under test runs on.
	thisNode = "agent-node"
	// sentinelInterval is short so that tests see the agent react quickly.
	sentinelInterval = 100 * time.Millisecond
	// waitFor is the patience of every Eventually in this package.
	waitFor = 20 * time.Second
)

var (
	k8s     client.Client // direct, uncached
	scheme  = runtime.NewScheme()
	testEnv *testenv.Env
	// dir holds the agent's sentinel file, the marker its reboot command
	// appends to, and the switch that makes the command fail.
	dir string
	// recorded counts the Events the agent of thisNode emits (the API
	// server shows repeats of an Event as one).
	recorded *countingRecorder
)

type countingRecorder struct {
	agentkube.EventRecorder
	mu sync.Mutex
	n  map[string]int
}

func (r *countingRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.mu.Lock()
	r.n[reason]++
	r.mu.Unlock()
	r.EventRecorder.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

func (r *countingRecorder) count(reason string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[reason]
}

func TestMain(m *testing.M) {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	testenv.Main(m, func(ctx context.Context, env *testenv.Env) error {
		testEnv = env
		var err error
		if dir, err = os.MkdirTemp("", "rebootagent-test"); err != nil {
			return err
		}
		context.AfterFunc(ctx, func() { _ = os.RemoveAll(dir) })
		if k8s, err = client.New(env.Config, client.Options{Scheme: scheme}); err != nil {
			return err
		}
		if err := k8s.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: thisNode}}); err != nil {
			return err
		}
		recorded, err = startAgent(ctx, env.Config, thisNode, testCommand(dir))
		return err
	})
}

// testCommand stands in for `systemctl reboot`: it appends a line to
// dir/rebooted, or fails with a message on stderr while dir/fail exists.
func testCommand(dir string) Command {
	return Command{"sh", "-c", `if [ -e "$0/fail" ]; then echo "reboot refused: $(cat "$0/fail")" >&2; exit 1; fi; echo rebooted >> "$0/rebooted"`, dir}
}

// startAgent runs the agent of node with cfg as cmd/reboot-agent wires it,
// with its sentinel file in dir, until ctx ends; configure, if any, sets
// what the flags would. It returns the agent's Event recorder.
func startAgent(ctx context.Context, cfg *rest.Config, node string, reboot Rebooter, configure ...func(*Agent)) (*countingRecorder, error) {
	agentScheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	c, err := agentkube.New(cfg, agentScheme)
	if err != nil {
		return nil, err
	}
	logger := log.Log.WithName(node)
	events := c.NewRecorder("reboot-agent", logger)
	recorder := &countingRecorder{EventRecorder: events, n: map[string]int{}}
	a := &Agent{
		Client:           c,
		Recorder:         recorder,
		Node:             node,
		Rebooter:         reboot,
		SentinelFile:     filepath.Join(dir, node+"-reboot-required"),
		SentinelInterval: sentinelInterval,
		BootTime:         HostBootTime,
	}
	for _, configure := range configure {
		configure(a)
	}
	go func() { _ = events.Run(ctx) }()
	go func() {
		if err := a.Run(logr.NewContext(ctx, logger)); err != nil {
			logger.Error(err, "The agent stopped")
		}
	}()
	return recorder, nil
}

// setBootID sets the node's status.nodeInfo.bootID, as the kubelet does.
func setBootID(ctx context.Context, node, bootID string) error {
	n := &corev1.Node{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
		return err
	}
	orig := n.DeepCopy()
	n.Status.NodeInfo.BootID = bootID
	return k8s.Status().Patch(ctx, n, client.MergeFrom(orig))
}

// annotate sets (or with a nil value removes) annotations of the node, as
// the controller or an admin would.
func annotate(ctx context.Context, node string, ann map[string]*string) error {
	n := &corev1.Node{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
		return err
	}
	orig := n.DeepCopy()
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	for k, v := range ann {
		if v == nil {
			delete(n.Annotations, k)
		} else {
			n.Annotations[k] = *v
		}
	}
	return k8s.Patch(ctx, n, client.MergeFrom(orig))
}

func annotations(ctx context.Context, node string) (map[string]string, error) {
	n := &corev1.Node{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
		return nil, err
	}
	return n.Annotations, nil
}

// nodeEvents are the notes of the node's Events with the reason.
func nodeEvents(ctx context.Context, node, reason string) ([]string, error) {
	list := &eventsv1.EventList{}
	if err := k8s.List(ctx, list); err != nil {
		return nil, err
	}
	var notes []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Node" && e.Regarding.Name == node && e.Reason == reason {
			notes = append(notes, e.Note)
		}
	}
	return notes, nil
}

// reboots counts the runs of the test reboot command.
func reboots() int {
	data, err := os.ReadFile(filepath.Join(dir, "rebooted"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	if err != nil {
		panic(err)
	}
	return strings.Count(string(data), "rebooted\n")
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
