package main

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	ipv1 "github.com/kubext/kubext/api/ip/v1alpha1"
	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/staticip"
)

// stallResult is what the client saw while a control-plane component was
// frozen and for stallWatch after.
type stallResult struct {
	// outage is the longest silence: from the last answer before a run
	// of unanswered probes to the first answer after it (0 when every
	// probe was answered).
	outage time.Duration
	// stillDown: the client got no answer at the end of the watch, so
	// outage is a lower bound.
	stillDown bool
	// unanswered and probes count the probes from the freeze on.
	unanswered, probes int
	// answerers are the pods that answered from the freeze on, in order
	// of first answer.
	answerers []string
	// holder and node held the address before; nodeAfter holds it once
	// the control plane answers again.
	holder, node, nodeAfter string
}

func (r stallResult) moved() bool {
	return r.nodeAfter != r.node || slices.ContainsFunc(r.answerers, func(a string) bool { return a != r.holder })
}

func (r stallResult) String() string {
	s := fmt.Sprintf("longest client outage %.2f s, %d of %d probes unanswered; answered by %s; IP on %s before, %s after",
		r.outage.Seconds(), r.unanswered, r.probes, strings.Join(r.answerers, ", "), r.node, r.nodeAfter)
	if r.stillDown {
		s += "; STILL DOWN at the end of the watch (the outage is a lower bound)"
	}
	if r.moved() {
		s += "; the address MOVED"
	} else {
		s += "; nothing moved"
	}
	return s
}

// stallFields are the last line's stall fields (none when -stall 0).
func stallFields(stalls map[string]stallResult) string {
	var b strings.Builder
	if r, ok := stalls[lab.ComponentAPIServer]; ok {
		fmt.Fprintf(&b, " stall_outage_s=%.2f stall_moved=%t", r.outage.Seconds(), r.moved())
	}
	if r, ok := stalls[lab.ComponentEtcd]; ok {
		fmt.Fprintf(&b, " stall_etcd_outage_s=%.2f stall_etcd_moved=%t", r.outage.Seconds(), r.moved())
	}
	return b.String()
}

// stall freezes the component for stallFor while the client probes the
// address, and keeps probing for stallWatch after it resumes.
func (b *bench) stall(ctx context.Context, addr netip.Addr, component string) (stallResult, error) {
	ip, err := staticip.WaitIP(ctx, b.c, "bench", 2*time.Minute, func(ip *ipv1.IP) bool { return staticip.Ready(ip) && len(ip.Status.Standbys) > 0 })
	if err != nil {
		return stallResult{}, err
	}
	r := stallResult{holder: staticip.PodName(ip.Status.Pod), node: ip.Status.Node}
	if _, err := staticip.AskUntil(b.lab.Net.ClientNamespace(), addr, r.holder, 30*time.Second); err != nil {
		return r, err
	}
	p := startProbe(b.lab.Net.ClientNamespace(), addr)
	time.Sleep(500 * time.Millisecond)
	// The component resumes by itself should this process fail before
	// resume below.
	resume, err := b.lab.PauseComponent(component, stallFor+5*time.Second)
	if err != nil {
		p.drain()
		return r, err
	}
	frozen := time.Now()
	fmt.Printf("stall: froze %s at %s for %s (holder %s on %s)\n", component, frozen.UTC().Format("15:04:05.000"), stallFor, r.holder, r.node)
	time.Sleep(stallFor)
	if err := resume(); err != nil {
		p.drain()
		return r, err
	}
	if b.manager != nil {
		// Restarted at once, where a kubelet would back off: the stall's
		// outage is the agents', not a crash loop's.
		time.Sleep(time.Second)
		if !b.manager.Running() {
			fmt.Printf("stall: the manager lost its leader Lease and exited; starting it again, as the kubelet would\n")
			if b.manager, err = b.lab.StartManager(ctx, "manager-after-"+component, b.managerArgs...); err != nil {
				p.drain()
				return r, err
			}
		}
	}
	time.Sleep(stallWatch)
	end := time.Now()
	answers := p.drain()
	r.outage, r.stillDown, r.unanswered, r.probes, r.answerers = longestOutage(answers, frozen, end)
	after, err := staticip.WaitIP(ctx, b.c, "bench", 30*time.Second, staticip.Ready)
	if err != nil {
		return r, err
	}
	r.nodeAfter = after.Status.Node
	return r, nil
}

// longestOutage is the longest run of unanswered probes from `from` on,
// measured from the answer before the run to the answer after it (or to
// end, when the run lasts to the end: stillDown).
func longestOutage(answers []answer, from, end time.Time) (longest time.Duration, stillDown bool, unanswered, probes int, answerers []string) {
	lastOK := from
	inGap := false
	for _, a := range answers {
		if a.at.Before(from) {
			if a.who != "" {
				lastOK = a.at
			}
			continue
		}
		probes++
		if a.who == "" {
			unanswered++
			inGap = true
			continue
		}
		if !slices.Contains(answerers, a.who) {
			answerers = append(answerers, a.who)
		}
		if inGap {
			longest = max(longest, a.at.Sub(lastOK))
			inGap = false
		}
		lastOK = a.at
	}
	if inGap {
		longest = max(longest, end.Sub(lastOK))
		stillDown = true
	}
	return longest, stillDown, unanswered, probes, answerers
}

// drain stops the probe and returns every answer it had not handed out.
func (p *probe) drain() []answer {
	close(p.stop)
	var out []answer
	for a := range p.results {
		out = append(out, a)
	}
	// Overlapping asks (-provider aws) may return out of order.
	slices.SortStableFunc(out, func(x, y answer) int { return x.at.Compare(y.at) })
	return out
}
