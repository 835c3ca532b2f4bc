package witness

import (
	"slices"
	"time"
)

// Holder is one agent's side of its holds in its current generation: the
// probes it sent and which of them each witness vouched for. It is not
// safe for concurrent use.
type Holder struct {
	timing Timing
	gen    Gen
	seq    uint64
	// sent is the local send time of each probe still young enough to
	// matter (HoldFor), by sequence number; to is its witness.
	sent map[uint64]probe
	// vouched is, per witness, the send time of the latest probe it
	// vouched for.
	vouched map[string]time.Time
	// lost is set once a witness says it declared gen silent.
	lost bool
}

type probe struct {
	to string
	at time.Time
}

// NewHolder starts the holder side of a session in generation gen.
func NewHolder(t Timing, gen Gen) *Holder {
	return &Holder{timing: t, gen: gen, sent: map[uint64]probe{}, vouched: map[string]time.Time{}}
}

// Gen is the holder's generation.
func (h *Holder) Gen() Gen { return h.gen }

// Probe records a probe to witness sent at now and returns its sequence
// number, which the answer must carry.
func (h *Holder) Probe(witness string, now time.Time) uint64 {
	h.seq++
	h.sent[h.seq] = probe{to: witness, at: now}
	for seq, p := range h.sent {
		if now.Sub(p.at) >= h.timing.HoldFor {
			delete(h.sent, seq)
		}
	}
	return h.seq
}

// Answered records witness's answer to probe seq. An answer to a probe the
// holder did not send to that witness, or no longer remembers, counts for
// nothing. It reports whether the witness has declared this generation
// silent: the agent must then stop answering and start a new generation.
func (h *Holder) Answered(witness string, seq uint64, a Answer) (lost bool) {
	if a.Declared >= h.gen {
		h.lost = true
	}
	p, ok := h.sent[seq]
	if ok && p.to == witness && a.Vouch && !h.lost && p.at.After(h.vouched[witness]) {
		h.vouched[witness] = p.at
	}
	return h.lost
}

// Lost reports whether a witness has declared this generation silent.
func (h *Holder) Lost() bool { return h.lost }

// HeldUntil is the local time until which the node may answer for an
// address whose hold has these witnesses: HoldFor after the send of the
// latest probe that a quorum of them vouched for. The zero time means not
// at all: no quorum, no witnesses, or the generation is lost.
func (h *Holder) HeldUntil(witnesses []string) time.Time {
	if h.lost || len(witnesses) == 0 {
		return time.Time{}
	}
	times := make([]time.Time, 0, len(witnesses))
	for _, w := range witnesses {
		if t, ok := h.vouched[w]; ok {
			times = append(times, t)
		}
	}
	q := Quorum(len(witnesses))
	if len(times) < q {
		return time.Time{}
	}
	// The q-th latest vouch: q witnesses vouched at or after it.
	slices.SortFunc(times, func(a, b time.Time) int { return b.Compare(a) })
	return times[q-1].Add(h.timing.HoldFor)
}
