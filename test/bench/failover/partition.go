package main

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/kubext/kubext/test/lab"
	"github.com/kubext/kubext/test/staticip"
)

// partitionFor and partitionWatch are -partition and -partition-watch.
var partitionFor, partitionWatch time.Duration

// partitionResult is what the client and the split detector saw while the
// holder's node was isolated from everything but the client, and for
// partitionWatch after it rejoined.
type partitionResult struct {
	node      string
	outage    time.Duration
	stillDown bool
	answerers []string
	// split is how long two nodes answered at once meanwhile.
	split time.Duration
}

func (r partitionResult) String() string {
	s := fmt.Sprintf("%s isolated %s: longest client outage %.2f s; answered by %s; two nodes answered for %d ms",
		r.node, partitionFor, r.outage.Seconds(), strings.Join(r.answerers, ", "), r.split.Milliseconds())
	if r.stillDown {
		s += "; STILL DOWN at the end of the watch"
	}
	return s
}

func (r partitionResult) fields() string {
	return fmt.Sprintf(" partition_outage_s=%.2f partition_split_ms=%d", r.outage.Seconds(), r.split.Milliseconds())
}

// partition isolates the holder's node (lab.Isolate: its link stays up and
// the client still reaches it, but it hears neither its peers nor the API
// server) for partitionFor while the client probes the address.
func partition(l *lab.Lab, splits *staticip.SplitDetector, addr netip.Addr, node string) (r partitionResult, err error) {
	r.node = node
	p := startProbe(l.Net.ClientNamespace(), addr)
	time.Sleep(500 * time.Millisecond)
	before := splits.SplitTime()
	if err := l.Isolate(node, l.Net.ClientAddr()); err != nil {
		p.drain()
		return r, err
	}
	isolated := time.Now()
	fmt.Printf("partition: isolated %s at %s for %s\n", node, isolated.UTC().Format("15:04:05.000"), partitionFor)
	time.Sleep(partitionFor)
	err = l.Rejoin(node)
	time.Sleep(partitionWatch)
	answers := p.drain()
	if err != nil {
		return r, err
	}
	r.outage, r.stillDown, _, _, r.answerers = longestOutage(answers, isolated, time.Now())
	r.split = splits.SplitTime() - before
	return r, nil
}
