package witness

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The model: three nodes (A, B, C), one address, the API server and the
// controller. Every process runs the package's real decision functions
// (Witness, Holder, MayMove) on its own clock; the test explores, breadth
// first, every state reachable by any interleaving of:
//
//   - real time advancing one tick (each node's clock off by up to Drift,
//     see initial);
//   - a holder sending a probe; the probe delivered, with its answer, or
//     lost, at any time after it was sent (any delay, any partition);
//   - witnesses declaring silence and publishing it at the first tick
//     they may (see declare); with lateWrites, the publishing write
//     lands at any later time instead, even after its witness died and
//     restarted (see land);
//   - the controller moving the address (to any node, with any witnesses);
//   - an agent claiming, re-claiming in a new generation, releasing;
//   - an agent frozen and thawed, killed and restarted (its kernel keeps
//     what it programmed until the deadline it set, plus FenceSlack);
//   - the API server stalled and resumed.
//
// and checks in every state that at most one node's kernel answers for
// the address. A node answers until HoldFor + FenceSlack after the send
// of the probe its last quorum vouched for, by its own clock: the latest
// the real agent, or its kernel if the agent is frozen or dead, stops.
//
// States are compared by what can influence the future (every remembered
// time as an age, capped where older makes no difference), so the
// exploration reaches a fixed point: it is exhaustive within the budgets
// of moves, restarts, freezes, API stalls and generations below, not
// merely bounded in depth.

const (
	nA = iota
	nB
	nC
	nodes
)

var names = [nodes]string{"A", "B", "C"}

// defaultModelDepth is the exploration's depth in `make test`.
const defaultModelDepth = 15

// tick is the real time one step advances.
const tick = 20 * time.Millisecond

// budget bounds the adversary's rarer moves.
type budget struct {
	moves, restarts, freezes, stalls, gens int
}

type mclaim struct {
	gen Gen
	ws  []int
}

type mnode struct {
	rate time.Duration // local time per tick
	// timing is the node's durations in real time: its clock's rate
	// error scales every duration it measures (see initial).
	timing   Timing
	now      time.Duration // local clock
	up       bool          // process running
	frozen   bool
	restored bool // witness memory restored from the API
	gen      Gen
	w        *Witness
	h        *Holder
	claim    *mclaim
	deadline time.Duration // local time until which the kernel answers
}

type mhold struct {
	node int
	gen  Gen
}

type mapi struct {
	up        bool
	node      int // placement (-1: none)
	ws        []int
	att       *mhold
	published [nodes]map[string]Gen
}

type msg struct {
	gen Gen
	seq uint64
}

type state struct {
	n      [nodes]mnode
	api    mapi
	probes map[[2]int]msg // in flight, by (from, to); at most one each
	// pending are declarations a witness's agent asked to publish whose
	// write has not landed yet (lateWrites; nil: none): the latest, since
	// the heartbeat writes the whole set each time.
	pending [nodes]map[string]Gen
	b       budget
}

var epoch = time.Unix(1_000_000, 0)

func at(d time.Duration) time.Time { return epoch.Add(d) }

func (n *mnode) t() time.Time { return at(n.now) }

// answering is the invariant's subject: the node's kernel still answers.
func (n *mnode) answering() bool { return n.deadline > n.now }

func cloneWitness(w *Witness) *Witness {
	if w == nil {
		return nil
	}
	return &Witness{timing: w.timing, heard: maps.Clone(w.heard), declared: maps.Clone(w.declared), lastTick: w.lastTick}
}

func cloneHolder(h *Holder) *Holder {
	if h == nil {
		return nil
	}
	return &Holder{timing: h.timing, gen: h.gen, seq: h.seq, sent: maps.Clone(h.sent), vouched: maps.Clone(h.vouched), lost: h.lost}
}

func (s *state) clone() *state {
	c := *s
	for i := range c.n {
		c.pending[i] = maps.Clone(s.pending[i])
		c.n[i].w = cloneWitness(s.n[i].w)
		c.n[i].h = cloneHolder(s.n[i].h)
		if s.n[i].claim != nil {
			cl := *s.n[i].claim
			c.n[i].claim = &cl
		}
	}
	if s.api.att != nil {
		a := *s.api.att
		c.api.att = &a
	}
	c.probes = maps.Clone(s.probes)
	return &c
}

// model explores from the initial states and returns the first state
// that breaks the invariant, with the actions that led to it.
type model struct {
	timing Timing
	budget budget
	depth  int // actions from the initial state
	// witnesses of the first hold (default B and C); heldBy starts A
	// holding on their word, vouched for at the start.
	witnesses []int
	held      bool
	// lateWrites lets a declaration's write land at any later time.
	lateWrites bool
	// unconfirmedRestore is the restore of the earlier code: it reads the
	// declarations back without the write that confirms the read, so a
	// write of the dead run still in flight can land after it
	// (witnessrun.restore; the model must find the split it allowed).
	unconfirmedRestore bool
}

// trail is a state and how it was reached (parent links, so that the
// frontier does not carry whole paths).
type trail struct {
	s      *state
	name   string
	parent *trail
	depth  int
}

func (t *trail) path() []string {
	var out []string
	for ; t != nil && t.parent != nil; t = t.parent {
		out = append(out, t.name)
	}
	slices.Reverse(out)
	return out
}

func (m model) initial() []*state {
	var out []*state
	// A clock that runs at rate r measures every duration d as d/r of
	// real time; since no duration is ever measured by two processes,
	// that is all a rate error does. So the model keeps one clock and
	// scales each node's durations: by 1/(1-Drift) for a slow clock, by
	// 1/(1+Drift) for a fast one. The first holder, A, runs slow (the
	// worst case for its hold); B and C, which witness it and may hold
	// after it, run at either rate.
	slow, fast := m.timing.scaled(1/(1-m.timing.Drift)), m.timing.scaled(1/(1+m.timing.Drift))
	for mask := range 1 << (nodes - 1) {
		s := &state{probes: map[[2]int]msg{}, b: m.budget}
		for i := range s.n {
			tm := slow
			if i > 0 && mask&(1<<(i-1)) != 0 {
				tm = fast
			}
			s.n[i] = mnode{rate: tick, timing: tm, up: true, restored: true, gen: 1, w: NewWitness(tm, nil), h: NewHolder(tm, 1)}
		}
		ws := m.witnesses
		if ws == nil {
			ws = []int{nB, nC}
		}
		s.api = mapi{up: true, node: nA, ws: slices.Clone(ws)}
		if m.held {
			// A probed its witnesses, they vouched, and A claimed.
			a := &s.n[nA]
			for _, w := range ws {
				seq := a.h.Probe(names[w], a.t())
				a.h.Answered(names[w], seq, s.n[w].w.Probe(names[nA], a.h.Gen(), seq, s.n[w].t()))
			}
			s.api.att = &mhold{node: nA, gen: a.h.Gen()}
			a.claim = &mclaim{gen: a.h.Gen(), ws: slices.Clone(ws)}
			m.extend(a)
		}
		out = append(out, s)
	}
	return out
}

// run explores breadth first every state reachable in at most m.depth
// actions, each once however many ways lead to it.
func (m model) run(t *testing.T) (bad *trail, states int) {
	t.Helper()
	seen := map[string]struct{}{}
	var queue []*trail
	visit := func(tr *trail) {
		k := m.key(tr.s)
		if _, ok := seen[k]; ok {
			return
		}
		seen[k] = struct{}{}
		queue = append(queue, tr)
	}
	for _, s := range m.initial() {
		visit(&trail{s: s})
	}
	for len(queue) > 0 {
		cur := queue[0]
		queue[0] = nil
		queue = queue[1:]
		if n := answering(cur.s); n > 1 {
			return cur, len(seen)
		}
		if cur.depth < m.depth {
			for _, a := range m.actions(cur.s) {
				next := cur.s.clone()
				a.do(next)
				visit(&trail{s: next, name: a.name, parent: cur, depth: cur.depth + 1})
			}
		}
		// Only the trail, not the state, is needed once expanded.
		cur.s = nil
	}
	return nil, len(seen)
}

func answering(s *state) int {
	n := 0
	for i := range s.n {
		if s.n[i].answering() {
			n++
		}
	}
	return n
}

type action struct {
	name string
	do   func(*state)
}

// active: the agent process runs and is not frozen.
func active(n *mnode) bool { return n.up && !n.frozen }

// probeTargets are the witnesses an agent probes: those of its claim, or
// of the placement the API shows it (a stale view only costs liveness).
func probeTargets(s *state, i int) []int {
	if c := s.n[i].claim; c != nil {
		return c.ws
	}
	if s.api.node == i {
		return s.api.ws
	}
	return nil
}

func wsNames(ws []int) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = names[w]
	}
	return out
}

// extend sets the kernel's deadline from the holder's quorum, never
// earlier than it is (a late extension would only shorten answering).
func (m model) extend(n *mnode) {
	if n.claim == nil || n.claim.gen != n.h.Gen() {
		return
	}
	if until := n.h.HeldUntil(wsNames(n.claim.ws)); until.After(n.t()) {
		d := until.Sub(epoch) + n.timing.FenceSlack
		n.deadline = max(n.deadline, d)
	}
}

// fence stops the node answering, which may take FenceSlack.
func (m model) fence(n *mnode) {
	n.deadline = min(n.deadline, n.now+n.timing.FenceSlack)
}

func (m model) actions(s *state) []action {
	var out []action
	out = append(out, action{"tick", func(s *state) {
		for i := range s.n {
			s.n[i].now += s.n[i].rate
		}
		m.declare(s)
	}})
	for i := range s.n {
		n := &s.n[i]
		name := names[i]
		if active(n) && n.restored {
			// A holder probes all its witnesses at once, as the agent
			// does every ProbeInterval; each probe is then delivered or
			// lost on its own.
			if ws := probeTargets(s, i); len(ws) > 0 {
				out = append(out, action{name + " probes " + strings.Join(wsNames(ws), ","), func(s *state) {
					n := &s.n[i]
					for _, w := range ws {
						seq := n.h.Probe(names[w], n.t())
						s.probes[[2]int{i, w}] = msg{gen: n.h.Gen(), seq: seq}
					}
				}})
			}
		}
		if active(n) && s.api.up {
			ws := wsNames(s.api.ws)
			heldNow := n.h.HeldUntil(ws).After(n.t())
			switch {
			case s.api.node == i && s.api.att == nil && heldNow:
				out = append(out, action{name + " claims", func(s *state) {
					n := &s.n[i]
					s.api.att = &mhold{node: i, gen: n.h.Gen()}
					n.claim = &mclaim{gen: n.h.Gen(), ws: slices.Clone(s.api.ws)}
					m.extend(n)
				}})
			case s.api.att != nil && s.api.att.node == i && s.api.att.gen < n.h.Gen() && heldNow:
				out = append(out, action{name + " re-claims", func(s *state) {
					n := &s.n[i]
					s.api.att.gen = n.h.Gen()
					n.claim = &mclaim{gen: n.h.Gen(), ws: slices.Clone(s.api.ws)}
					m.extend(n)
				}})
			}
			if n.claim != nil && (s.api.att == nil || s.api.att.node != i) {
				out = append(out, action{name + " releases", func(s *state) {
					m.fence(&s.n[i])
					s.n[i].claim = nil
				}})
			}
			if !n.restored {
				out = append(out, action{name + " restores", func(s *state) {
					s.n[i].w = NewWitness(s.n[i].timing, s.api.published[i])
					s.n[i].restored = true
					if !m.unconfirmedRestore {
						// The confirming write (conditional on the version
						// read) lands, and with it every write of the dead
						// run still in flight is refused.
						s.pending[i] = nil
					}
				}})
			}
		}
		if s.b.freezes > 0 && n.up && !n.frozen {
			out = append(out, action{name + " freezes", func(s *state) { s.n[i].frozen = true; s.b.freezes-- }})
		}
		if n.frozen {
			out = append(out, action{name + " thaws", func(s *state) { s.n[i].frozen = false }})
		}
		if s.b.restarts > 0 && n.up {
			out = append(out, action{name + " dies", func(s *state) {
				n := &s.n[i]
				n.up, n.frozen, n.w, n.h, n.claim = false, false, nil, nil, nil
				s.b.restarts--
			}})
		}
		if !n.up && s.b.gens > 0 {
			out = append(out, action{name + " restarts", func(s *state) {
				n := &s.n[i]
				n.up, n.restored, n.gen = true, false, n.gen+1
				n.h = NewHolder(n.timing, n.gen)
				s.b.gens--
			}})
		}
	}
	for k, p := range sortedMsgs(s.probes) {
		w, h := &s.n[k[1]], &s.n[k[0]]
		if active(w) && w.restored {
			// The answer reaches the holder at once, or not at all: a
			// later answer sets the same deadline (it counts from the
			// probe's send), and a lost one only shortens the hold.
			name := fmt.Sprintf("%s hears %s", names[k[1]], names[k[0]])
			if active(h) && h.h != nil {
				name += ", and back"
			}
			out = append(out, action{name, func(s *state) {
				delete(s.probes, k)
				w, h := &s.n[k[1]], &s.n[k[0]]
				a := w.w.Probe(names[k[0]], p.gen, p.seq, w.t())
				if !active(h) || h.h == nil {
					return
				}
				if h.h.Answered(names[k[1]], p.seq, a) {
					m.fence(h)
					if s.b.gens > 0 {
						h.gen++
						h.h = NewHolder(h.timing, h.gen)
						s.b.gens--
					}
					return
				}
				m.extend(h)
			}})
		}
		out = append(out, action{fmt.Sprintf("probe %s>%s lost", names[k[0]], names[k[1]]), func(s *state) { delete(s.probes, k) }})
	}
	// The controller moves only a hold a quorum declared silent (moving an
	// address nobody claimed is not in question: nobody answers for it).
	if s.api.up && s.b.moves > 0 && s.api.att != nil {
		hold := Hold{Node: names[s.api.att.node], Gen: s.api.att.gen}
		if MayMove(hold, wsNames(s.api.ws), func(w, node string) Gen {
			return s.api.published[slices.Index(names[:], w)][node]
		}) {
			for to := range nodes {
				for _, ws := range subsetsWithout(to) {
					out = append(out, action{fmt.Sprintf("controller moves to %s with %v", names[to], wsNames(ws)), func(s *state) {
						s.api.node, s.api.ws, s.api.att = to, ws, nil
						s.b.moves--
					}})
				}
			}
		}
	}
	for i := range s.pending {
		if s.pending[i] != nil && s.api.up {
			out = append(out, action{names[i] + "'s declarations land", func(s *state) { m.land(s, i) }})
		}
	}
	if s.b.stalls > 0 {
		out = append(out, action{"API stalls/resumes", func(s *state) { s.api.up = !s.api.up; s.b.stalls--; m.declare(s) }})
	} else if !s.api.up {
		out = append(out, action{"API resumes", func(s *state) { s.api.up = true; m.declare(s) }})
	}
	return out
}

// declare runs every witness's Tick and publishes what it declared, as
// early as possible: right after time advances (or the API server comes
// back). Declaring or publishing later only delays the controller, and
// the earliest declaration is the one the safety argument is tight on, so
// the model does not spend states on later ones.
func (m model) declare(s *state) {
	for i := range s.n {
		n := &s.n[i]
		if !active(n) || !n.restored {
			continue
		}
		n.w.Tick(n.t())
		decl := n.w.Declared()
		if maps.Equal(decl, s.api.published[i]) {
			continue
		}
		if m.lateWrites {
			s.pending[i] = decl
		} else if s.api.up {
			s.api.published[i] = decl
		}
	}
}

// land makes witness i's write in flight land: the declarations its run
// had made when it asked (the Lease's last version: every write of a run
// is conditional on the version its last write made, so a write lands
// unless one of another run, the restore's, landed first).
func (m model) land(s *state, i int) {
	s.api.published[i] = s.pending[i]
	s.pending[i] = nil
}

func subsetsWithout(holder int) [][]int {
	var out [][]int
	for mask := 1; mask < 1<<nodes; mask++ {
		if mask&(1<<holder) != 0 {
			continue
		}
		var ws []int
		for i := range nodes {
			if mask&(1<<i) != 0 {
				ws = append(ws, i)
			}
		}
		out = append(out, ws)
	}
	return out
}

// sortedMsgs iterates messages in a fixed order (the trail must be
// reproducible).
func sortedMsgs(m map[[2]int]msg) func(func([2]int, msg) bool) {
	return func(yield func([2]int, msg) bool) {
		keys := slices.SortedFunc(maps.Keys(m), func(a, b [2]int) int {
			if a[0] != b[0] {
				return a[0] - b[0]
			}
			return a[1] - b[1]
		})
		for _, k := range keys {
			if !yield(k, m[k]) {
				return
			}
		}
	}
}

// key is the state as far as the future can tell: times as ages on the
// clock that took them, capped where older makes no difference.
func (m model) key(s *state) string {
	var b strings.Builder
	age := func(now time.Duration, t time.Time, limit time.Duration) time.Duration {
		return min(now-t.Sub(epoch), limit)
	}
	for i := range s.n {
		n := &s.n[i]
		fmt.Fprintf(&b, "%s r%d u%t f%t rs%t g%d d%d|", names[i], n.timing.HoldFor, n.up, n.frozen, n.restored, n.gen, max(n.deadline-n.now, 0))
		if n.claim != nil {
			fmt.Fprintf(&b, "c%d%v|", n.claim.gen, n.claim.ws)
		}
		if n.w != nil {
			// A witness's silences are counted up to its last Tick (it
			// credits a pause since; see Tick), which is now unless it is
			// frozen; any pause longer than pauseTicks intervals is
			// credited alike.
			heardAt := n.now
			if !n.w.lastTick.IsZero() {
				heardAt = n.w.lastTick.Sub(epoch)
				fmt.Fprintf(&b, "t%d ", age(n.now, n.w.lastTick, pauseTicks*n.timing.ProbeInterval+1))
			}
			for _, node := range slices.Sorted(maps.Keys(n.w.heard)) {
				h := n.w.heard[node]
				fmt.Fprintf(&b, "h%s%d@%d ", node, h.gen, age(heardAt, h.last, n.timing.SilentAfter))
			}
			for _, node := range slices.Sorted(maps.Keys(n.w.declared)) {
				fmt.Fprintf(&b, "x%s%d ", node, n.w.declared[node])
			}
		}
		if n.h != nil {
			fmt.Fprintf(&b, "H%d l%t ", n.h.gen, n.h.lost)
			for _, w := range slices.Sorted(maps.Keys(n.h.vouched)) {
				// A vouch HoldFor old holds nothing any more.
				if a := age(n.now, n.h.vouched[w], n.timing.HoldFor); a < n.timing.HoldFor {
					fmt.Fprintf(&b, "v%s@%d ", w, a)
				}
			}
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "api %t %d %v ", s.api.up, s.api.node, s.api.ws)
	if s.api.att != nil {
		fmt.Fprintf(&b, "att%d/%d ", s.api.att.node, s.api.att.gen)
	}
	for i := range s.api.published {
		for _, node := range slices.Sorted(maps.Keys(s.api.published[i])) {
			fmt.Fprintf(&b, "p%d%s%d ", i, node, s.api.published[i][node])
		}
	}
	// A message's sequence number matters only as the probe it refers
	// to: its witness and age in the holder's memory.
	sent := func(holder int, seq uint64) string {
		h := s.n[holder].h
		if h == nil {
			return "gone"
		}
		p, ok := h.sent[seq]
		if !ok {
			return "gone"
		}
		// A vouch for a probe HoldFor old holds nothing.
		a := age(s.n[holder].now, p.at, s.n[holder].timing.HoldFor)
		if a >= s.n[holder].timing.HoldFor {
			return "gone"
		}
		return fmt.Sprintf("%s@%d", p.to, a)
	}
	for k, p := range sortedMsgs(s.probes) {
		fmt.Fprintf(&b, "P%v g%d %s ", k, p.gen, sent(k[0], p.seq))
	}
	for i := range s.pending {
		if s.pending[i] != nil {
			fmt.Fprintf(&b, "w%d%v ", i, s.pending[i])
		}
	}
	fmt.Fprintf(&b, "b%+v", s.b)
	return b.String()
}

// modelTiming is coarse (ticks of 20 ms) and its clocks' rate error
// exaggerated (5 %) so that the exploration stays small and rate errors
// cross tick boundaries.
func modelTiming(silentAfter time.Duration) Timing {
	return Timing{ProbeInterval: 20 * time.Millisecond, HoldFor: 40 * time.Millisecond, SilentAfter: silentAfter,
		FenceSlack: 20 * time.Millisecond, Drift: 0.05}
}

// scaled is t with every duration multiplied by f.
func (t Timing) scaled(f float64) Timing {
	sc := func(d time.Duration) time.Duration { return time.Duration(float64(d) * f) }
	return Timing{ProbeInterval: sc(t.ProbeInterval), HoldFor: sc(t.HoldFor), SilentAfter: sc(t.SilentAfter), FenceSlack: sc(t.FenceSlack)}
}

func TestModelNoTwoNodesAnswer(t *testing.T) {
	tm := modelTiming(80 * time.Millisecond)
	if err := tm.Validate(); err != nil {
		t.Fatalf("model timing: %v", err)
	}
	// Each exploration gives the adversary a different set of rare moves
	// on top of any timing, delay and loss of every message: all of them
	// at once would not fit in memory.
	for _, tc := range []struct {
		name string
		m    model
	}{
		{"node loss and moves", model{budget: budget{moves: 2, gens: 1}}},
		{"agent frozen", model{budget: budget{moves: 1, freezes: 1, gens: 1}}},
		{"agent killed and restarted", model{budget: budget{moves: 1, restarts: 1, gens: 1}}},
		{"API server stalls", model{budget: budget{moves: 1, stalls: 2, gens: 1}}},
		// A's one witness C declares it silent; the write is still in
		// flight when C dies, and lands whenever it lands.
		{"a witness's last declaration lands after its restart", lateRestart},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.m
			m.timing, m.depth = tm, modelDepth(t)
			bad, states := m.run(t)
			if bad != nil {
				t.Fatalf("two nodes answer after:\n  %s\n%s", strings.Join(bad.path(), "\n  "), m2s(bad.s))
			}
			t.Logf("explored %d states: no two nodes answer", states)
		})
	}
}

// lateRestart is the exploration of a witness restarted while its last
// declaration is in flight: A starts holding on C's word alone, so that
// the sequence fits in the depth (a declaration, a restart, a move and
// the new holder's claim).
var lateRestart = model{budget: budget{moves: 1, restarts: 1, gens: 1}, witnesses: []int{nC}, held: true, lateWrites: true}

// TestModelFindsTheSplitOfAnUnconfirmedRestore: with the restore of the
// earlier code, which read the declarations back without confirming the
// read with a write, the model finds the split it allowed (C declares A
// silent, dies with the write in flight, restores nothing, vouches for A
// again; the write lands and the controller moves the address to B,
// which C vouches for too).
func TestModelFindsTheSplitOfAnUnconfirmedRestore(t *testing.T) {
	m := lateRestart
	m.timing, m.depth, m.unconfirmedRestore = modelTiming(80*time.Millisecond), modelDepth(t), true
	bad, _ := m.run(t)
	if bad == nil {
		t.Fatal("no split found without the confirming write: the model does not explore late writes")
	}
	t.Logf("split found, as expected, after:\n  %s", strings.Join(bad.path(), "\n  "))
}

// TestModelFindsTheSplitWhenTimingIsUnsafe shows the model can fail, on
// each side of the inequality: with SilentAfter one tick short of
// HoldFor + FenceSlack, and with a SilentAfter that would be safe if
// clocks kept time but leaves no margin for their rate error (a slow
// holder answers until 63 ms, a fast witness declares at 59 ms).
func TestModelFindsTheSplitWhenTimingIsUnsafe(t *testing.T) {
	for name, silentAfter := range map[string]time.Duration{
		"short by a tick":     40 * time.Millisecond,
		"no margin for drift": 62 * time.Millisecond,
	} {
		t.Run(name, func(t *testing.T) {
			tm := modelTiming(silentAfter)
			if tm.Safe() {
				t.Fatal("the unsafe timing passes Safe")
			}
			bad, _ := model{timing: tm, budget: budget{moves: 1, gens: 1}, depth: modelDepth(t)}.run(t)
			if bad == nil {
				t.Fatal("the model found no split with an unsafe timing: it cannot fail")
			}
			t.Logf("split found, as expected, after:\n  %s", strings.Join(bad.path(), "\n  "))
		})
	}
}

// modelDepth is how many actions the exploration follows from the start:
// KUBEXT_MODEL_DEPTH, or a default that keeps `make test` within a minute.
func modelDepth(t *testing.T) int {
	if v := os.Getenv("KUBEXT_MODEL_DEPTH"); v != "" {
		d, err := strconv.Atoi(v)
		if err != nil || d < 1 {
			t.Fatalf("KUBEXT_MODEL_DEPTH=%q: want a positive number", v)
		}
		return d
	}
	return defaultModelDepth
}

func m2s(s *state) string {
	var b strings.Builder
	for i := range s.n {
		n := &s.n[i]
		fmt.Fprintf(&b, "%s: now %v deadline %v up %t frozen %t gen %d claim %+v\n", names[i], n.now, n.deadline, n.up, n.frozen, n.gen, n.claim)
	}
	fmt.Fprintf(&b, "api: up %t node %d ws %v att %+v published %v\n", s.api.up, s.api.node, s.api.ws, s.api.att, s.api.published)
	return b.String()
}
