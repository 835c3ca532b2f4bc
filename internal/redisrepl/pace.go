package redisrepl

import "time"

// UrgentFor is how long after its primary stopped answering a group is
// observed urgently (see Pace.Urgent). A primary that is gone is known to
// be gone from its replicas' side within MaxLinkSilence+1 seconds of its
// last ping (see replicationState), and by a replica whose link broke at
// once; a primary that still does not answer kubext after 10 s while its
// replicas still hear it is most likely cut off from kubext alone, and the
// usual observation cadence does for it.
const UrgentFor = 10 * time.Second

// Pace is what is remembered of one group between observation rounds:
// since when each member that did not answer its last observation has not
// answered, by member name. It sets how long the next round waits for a
// member's dial (Mark) and whether the next round must come at once
// (Urgent). The zero Pace remembers nothing: every member is dialled with
// the usual timeout. A Pace is never changed; After returns a new one.
//
// Pace speeds up the observations, never the decision: a replica is still
// promoted only when Decide finds, in one round, the primary unreachable
// and no replica whose link to it is up.
type Pace map[string]time.Time

// Mark returns a copy of members in which those that did not answer their
// last observation are Unanswered.
func (p Pace) Mark(members []Member) []Member {
	out := make([]Member, len(members))
	for i, m := range members {
		_, m.Unanswered = p[m.Name]
		out[i] = m
	}
	return out
}

// After returns the Pace once obs have been made at now: a member that did
// not answer keeps the time it first did not (or now), one that answered
// is forgotten, and so are members no longer observed.
func (p Pace) After(obs []Observation, now time.Time) Pace {
	next := Pace{}
	for _, o := range obs {
		if o.Reachable() {
			continue
		}
		since, ok := p[o.Name]
		if !ok {
			since = now
		}
		next[o.Name] = since
	}
	return next
}

// Urgent reports whether the group must be observed again at once rather
// than at the usual cadence: its primary did not answer, for less than
// UrgentFor. Each round may then be the one in which its replicas' links
// count as down and a replica is promoted; a round waits for the primary's
// dial only UnansweredDialTimeout.
func (p Pace) Urgent(primary string, now time.Time) bool {
	since, ok := p[primary]
	return primary != "" && ok && now.Sub(since) < UrgentFor
}
