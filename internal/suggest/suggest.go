// Package suggest finds what a person probably meant when they mistyped a name: a flag, a
// field of a definition. It owns only the distance and the threshold, not the wording
// of the messages that use it.
package suggest

import "strings"

// Closest returns the candidate nearest to s when it is near enough to be a misspelling
// of it (case ignored), else "". Ties go to the earlier candidate.
func Closest(s string, candidates []string) string {
	best, bestDist := "", 0
	for _, c := range candidates {
		d := distance(strings.ToLower(s), strings.ToLower(c))
		if best == "" || d < bestDist {
			best, bestDist = c, d
		}
	}
	// A third of the word, at least two edits: "timout" finds "timeout", "color" finds
	// nothing among a node's fields.
	if best == "" || bestDist > max(2, len(s)/3) {
		return ""
	}
	return best
}

// distance is the Levenshtein distance between a and b, counted in bytes.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
