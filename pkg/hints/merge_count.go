package hints

import "math/bits"

// maxCountedNodes bounds the machines mergeCounted handles: its tables have
// 2^n entries per resource.
const maxCountedNodes = 10

// mergeCounted is mergeLists for a machine whose nodes are 0..n-1 (n <=
// maxCountedNodes) and whose hints name no other node. It does not walk
// the combinations:
//
//  1. Preferred merged hints: a mask m is one exactly when every resource
//     offers a preferred hint naming m or a preferred any-node hint (all
//     nodes when every resource offers the latter). If there is any, the
//     best of them is the answer: a preferred hint beats every other.
//  2. Otherwise every merged hint is non-preferred, and the candidates are
//     the non-empty masks that are the AND of some combination. The number
//     of combinations whose AND is exactly A is found with the superset-sum
//     transform: per resource F[S] = hints whose mask contains S; their
//     product counts combinations whose AND contains S; the inverse
//     transform leaves the exact counts. Every true count is at most the
//     product of the list lengths; while that fits in 64 bits, wrapping
//     uint64 arithmetic (arithmetic modulo 2^64, where the inverse
//     transform's negative intermediates are harmless) gives the counts
//     exactly. Beyond that ok=false and the caller folds instead.
//
// Cost: O(resources x n x 2^n) instead of the product of the list lengths.
func (m *Merger) mergeCounted(lists [][]Hint, n int) (best Hint, found, ok bool) {
	all := m.numa.all
	size := 1 << n
	combos := uint64(1)
	for _, hs := range lists {
		hi, lo := bits.Mul64(combos, uint64(len(hs)))
		if hi != 0 {
			return Hint{}, false, false
		}
		combos = lo
	}

	// Step 1.
	prefAll := true              // every resource offers a preferred any-node hint
	accepts := make([]int, size) // resources offering a preferred i or any-node hint
	exact := make([]bool, size)  // some resource offers a preferred i itself
	seen := make([]bool, size)
	for _, hs := range lists {
		clear(seen)
		any := false
		for _, h := range hs {
			switch {
			case !h.Preferred:
			case h.Affinity == 0:
				any = true
			default:
				seen[h.Affinity], exact[h.Affinity] = true, true
			}
		}
		prefAll = prefAll && any
		for i := 1; i < size; i++ {
			if seen[i] || any {
				accepts[i]++
			}
		}
	}
	bestCount := bestNonPreferredCount(lists)
	consider := func(h Hint) {
		if !found {
			best, found = h, true
			return
		}
		best = m.compare(bestCount, best, h)
	}
	if prefAll {
		consider(Hint{Affinity: all, Preferred: true})
	}
	for i := 1; i < size; i++ {
		if exact[i] && accepts[i] == len(lists) {
			consider(Hint{Affinity: Mask(i), Preferred: true})
		}
	}
	if found {
		return best, true, true
	}

	// Step 2.
	prod := make([]uint64, size)
	for i := range prod {
		prod[i] = 1
	}
	f := make([]uint64, size)
	for _, hs := range lists {
		clear(f)
		for _, h := range hs {
			a := h.Affinity
			if a == 0 {
				a = all
			}
			f[a]++
		}
		supersetSum(f, n)
		for i := range prod {
			prod[i] *= f[i]
		}
	}
	supersetDiff(prod, n)
	for i := 1; i < size; i++ {
		if prod[i] != 0 {
			consider(Hint{Affinity: Mask(i)})
		}
	}
	return best, found, true
}

// supersetSum turns f[S] into the sum of f[T] over all T containing S.
func supersetSum(f []uint64, n int) {
	for b := 0; b < n; b++ {
		bit := 1 << b
		for s := range f {
			if s&bit == 0 {
				f[s] += f[s|bit]
			}
		}
	}
}

// supersetDiff inverts supersetSum.
func supersetDiff(f []uint64, n int) {
	for b := 0; b < n; b++ {
		bit := 1 << b
		for s := range f {
			if s&bit == 0 {
				f[s] -= f[s|bit]
			}
		}
	}
}
