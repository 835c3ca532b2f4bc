package ipcmd

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/internal/plugin"
)

func TestIPTableRows(t *testing.T) {
	moving := readyIP("default/web-2")
	moving.Status.Node, moving.Status.Pod = "", "default/web-1"
	notReady(moving, ipv1.ReasonDetaching, "handing over to default/web-1: waiting for node n1 to release 192.0.2.10")
	moving.Status.LastMoveTime = &metav1.Time{Time: now.Add(-90 * time.Second)}

	unprocessed := &ipv1.IP{ObjectMeta: metav1.ObjectMeta{Name: "new", CreationTimestamp: ago(5 * time.Second)}, Spec: ipv1.IPSpec{Pool: "lab"}}

	tests := []struct {
		name string
		ip   *ipv1.IP
		wide bool
		want []any
	}{{
		name: "ready with one standby",
		ip:   readyIP("default/web-1"),
		want: []any{"web", "192.0.2.10", "lab", "default/web-0", "n1", "n1", "default/web-1", "True", "60m", "<none>",
			"192.0.2.10 answers on node n1 for pod default/web-0"},
	}, {
		name: "several standbys: the first and a count",
		ip:   readyIP("default/web-1", "default/web-2", "other/web-3"),
		want: []any{"web", "192.0.2.10", "lab", "default/web-0", "n1", "n1", "default/web-1 +2", "True", "60m", "<none>",
			"192.0.2.10 answers on node n1 for pod default/web-0"},
	}, {
		name: "wide lists every standby",
		ip:   readyIP("default/web-1", "default/web-2", "other/web-3"),
		wide: true,
		want: []any{"web", "192.0.2.10", "lab", "default/web-0", "n1", "n1", "default/web-1,default/web-2,other/web-3", "True", "60m", "<none>",
			"192.0.2.10 answers on node n1 for pod default/web-0"},
	}, {
		name: "moving: node empty, still attached on the old node, reason shown",
		ip:   moving,
		want: []any{"web", "192.0.2.10", "lab", "default/web-1", "<none>", "n1", "default/web-2", "False (Detaching)", "60m", "90s",
			"handing over to default/web-1: waiting for node n1 to release 192.0.2.10"},
	}, {
		name: "not processed yet: pool from the spec, Ready unknown",
		ip:   unprocessed,
		want: []any{"new", "<none>", "lab", "<none>", "<none>", "<none>", "<none>", "Unknown", "5s", "<none>",
			"not processed by the controller yet"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table := ipTable([]ipv1.IP{*tt.ip}, tt.wide, now)
			if len(table.Rows) != 1 {
				t.Fatalf("got %d rows", len(table.Rows))
			}
			got := table.Rows[0].Cells
			if len(got) != len(table.ColumnDefinitions) || len(got) != len(tt.want) {
				t.Fatalf("got %d cells for %d columns, want %d", len(got), len(table.ColumnDefinitions), len(tt.want))
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("column %s = %q, want %q", table.ColumnDefinitions[i].Name, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestListOutputFormats(t *testing.T) {
	tests := []struct {
		format string
		want   []string
		absent []string
	}{
		{format: "", want: []string{"NAME ", "HOLDER", "STANDBYS", "web ", "default/web-1 +1", "other"}, absent: []string{"MESSAGE"}},
		{format: "wide", want: []string{"LAST MOVE", "MESSAGE", "default/web-1,default/web-2"}},
		{format: "name", want: []string{"ip.ip.kubext.io/other\nip.ip.kubext.io/web\n"}},
		{format: "yaml", want: []string{"kind: IPList", "kind: IP\n", "apiVersion: ip.kubext.io/v1alpha1", "address: 192.0.2.10"}},
		{format: "json", want: []string{`"kind": "IPList"`, `"kind": "IP"`, `"standbys": [`}},
		{format: "jsonpath={.items[*].status.address}", want: []string{"192.0.2.11 192.0.2.10"}},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			streams, _, out, _ := genericiooptions.NewTestIOStreams()
			env := plugin.NewEnv(streams)
			env.Now = func() time.Time { return now }
			o := newListOptions(env)
			*o.printFlags.OutputFormat = tt.format
			other := readyIP()
			other.Name, other.Status.Address = "other", "192.0.2.11"
			if err := o.print(&ipv1.IPList{Items: []ipv1.IP{*other, *readyIP("default/web-1", "default/web-2")}}); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, a := range tt.absent {
				if strings.Contains(out.String(), a) {
					t.Errorf("output has %q:\n%s", a, out)
				}
			}
		})
	}
}

func TestListEmpty(t *testing.T) {
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	if err := newListOptions(plugin.NewEnv(streams)).print(&ipv1.IPList{}); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 || !bytes.Contains(errOut.Bytes(), []byte("No IPs found.")) {
		t.Errorf("stdout %q, stderr %q", out, errOut)
	}
}
