// Package stats holds the little arithmetic the benchmarks share.
package stats

import (
	"math"
	"slices"
)

// Percentile is the nearest-rank p-th percentile of xs (0 for none): the
// smallest value at least p% of the values are at or below.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}
