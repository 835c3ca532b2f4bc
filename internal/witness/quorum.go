package witness

import "slices"

// Quorum is the number of witnesses out of n that make a majority: any two
// quorums of the same witnesses share at least one.
func Quorum(n int) int { return n/2 + 1 }

// MayMove reports whether the controller may give the address of hold to
// another node: a quorum of the hold's witnesses has published a
// declaration covering the hold's generation. declared returns what a
// witness has published for a node (0 = nothing). A hold without
// witnesses is not a witness-mode hold and is never moved by this rule.
func MayMove(hold Hold, witnesses []string, declared func(witness, node string) Gen) bool {
	if len(witnesses) == 0 || slices.Contains(witnesses, hold.Node) {
		return false
	}
	n := 0
	for _, w := range witnesses {
		if declared(w, hold.Node) >= hold.Gen {
			n++
		}
	}
	return n >= Quorum(len(witnesses))
}

// Choose picks up to limit witnesses for a hold by holder from candidates,
// in the candidates' order (the caller puts the ones it prefers first),
// skipping the holder and duplicates.
func Choose(holder string, candidates []string, limit int) []string {
	out := make([]string, 0, limit)
	for _, c := range candidates {
		if len(out) == limit {
			break
		}
		if c != holder && c != "" && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}
