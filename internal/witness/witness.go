package witness

import (
	"maps"
	"slices"
	"strings"
	"time"
)

// Gen is a node agent's session generation. A node uses each generation at
// most once, and each higher than the last (see NextGen).
type Gen uint64

// NextGen is the generation an agent starts a session with, given the
// highest one it may have used before (read from the API) and the wall
// clock: above both, so that a restart never reuses a generation even if
// the previous session could not record its own.
func NextGen(last Gen, now time.Time) Gen {
	return max(last+1, Gen(now.UnixNano()))
}

// Hold is a node's claim on an address in one of its generations.
type Hold struct {
	Node string
	Gen  Gen
}

// Answer is a witness's reply to a probe.
type Answer struct {
	// Vouch is true when the witness vouches for the probe's sender and
	// generation.
	Vouch bool
	// Declared is the highest generation of the sender this witness has
	// declared silent (0 = none). A holder that sees its own generation
	// covered must start a new one.
	Declared Gen
}

// heard is what a witness knows of one node's latest generation.
type heard struct {
	gen  Gen
	seq  uint64    // the latest probe's sequence number
	last time.Time // local time it arrived
}

// Witness is one agent's memory as a witness for other nodes' holds. It is
// not safe for concurrent use.
type Witness struct {
	timing   Timing
	heard    map[string]heard
	declared map[string]Gen
	// lastTick is when Tick last ran: a longer gap than its cadence means
	// the witness itself was paused (frozen, starved), and did not listen.
	lastTick time.Time
}

// NewWitness starts a witness from the declarations it has published
// before (rule W1 survives restarts: a restarted witness must not answer
// any probe before it has them).
func NewWitness(t Timing, published map[string]Gen) *Witness {
	w := &Witness{timing: t, heard: map[string]heard{}, declared: map[string]Gen{}}
	maps.Copy(w.declared, published)
	return w
}

// Probe handles probe seq from node in generation gen, arrived at now.
// The witness vouches unless it has declared gen silent, or has heard a
// later generation of the node (an agent never goes back to an earlier
// one, so such a probe is stale; refusing it means every vouch for a
// generation precedes the first probe of the next). A probe no newer than
// one already heard (a replay) is answered but does not count as hearing
// the node, so replaying a dead node's probes cannot keep it "alive".
func (w *Witness) Probe(node string, gen Gen, seq uint64, now time.Time) Answer {
	declared := w.declared[node]
	h, ok := w.heard[node]
	if gen <= declared || (ok && gen < h.gen) {
		return Answer{Declared: declared}
	}
	if !ok || gen > h.gen || seq > h.seq {
		w.heard[node] = heard{gen: gen, seq: seq, last: now}
	}
	return Answer{Vouch: true, Declared: declared}
}

// Tick declares silent every generation not heard for SilentAfter and
// returns the new declarations, which the agent must publish. From the
// moment Tick returns, the witness no longer vouches for them.
//
// Tick is meant to run every ProbeInterval. Silence counts only over time
// the witness was listening: after a longer gap (the witness was frozen or
// starved; the probes it missed may still wait in its socket) the gap
// beyond one interval is not counted, so a witness that wakes up does not
// declare a holder that kept probing all along. Counting less silence only
// ever delays a declaration, which the safety argument allows.
func (w *Witness) Tick(now time.Time) []Hold {
	if gap := now.Sub(w.lastTick); !w.lastTick.IsZero() && gap > pauseTicks*w.timing.ProbeInterval {
		unheard := gap - w.timing.ProbeInterval
		for node, h := range w.heard {
			h.last = minTime(h.last.Add(unheard), now)
			w.heard[node] = h
		}
	}
	w.lastTick = now
	var out []Hold
	for node, h := range w.heard {
		if now.Sub(h.last) < w.timing.SilentAfter {
			continue
		}
		delete(w.heard, node)
		if h.gen > w.declared[node] {
			w.declared[node] = h.gen
			out = append(out, Hold{Node: node, Gen: h.gen})
		}
	}
	slices.SortFunc(out, func(a, b Hold) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// pauseTicks is how many intervals between two Ticks mean a pause rather
// than a late tick.
const pauseTicks = 2

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Declared is every node's highest generation declared silent: what the
// agent publishes for the controller.
func (w *Witness) Declared() map[string]Gen { return maps.Clone(w.declared) }

// Forget drops what the witness knows of a node that no longer exists.
// Its declaration stays: forgetting it could let a stale probe be vouched.
func (w *Witness) Forget(node string) { delete(w.heard, node) }
