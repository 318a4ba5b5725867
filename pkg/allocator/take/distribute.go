package take

import "math"

// Distributed is distribute-cpus-across-numa (KEP-2902) as the kubelet
// implements it (takeByTopologyNUMADistributed): spread the request evenly,
// in groups of groupSize CPUs, over the fewest NUMA nodes that can hold it,
// the remainder striped to the subset that leaves the free CPUs best
// balanced. Falls back to packed when no combination works. Returns nil
// when the request cannot be met. f.BySocket is align-by-socket, which
// since kubelet v1.37 prefers NUMA combinations within one socket and caps
// each node's share at its free CPUs in whole groups; f.HintNUMAs (v1.38)
// raises the fewest nodes to the topology manager hint's node count.
func (m *Machine) Distributed(avail Bits, n, groupSize int, f Fit) Bits {
	if n%groupSize != 0 {
		return m.Packed(avail, n, f.packedPart())
	}
	a := m.newAccumulator(avail, n, f.V137)
	ok, fallback := a.distributed(groupSize, f)
	got := a.finish(ok)
	if fallback {
		return m.Packed(avail, n, f.packedPart())
	}
	return got
}

// distributed runs the distributed fit: ok when the need was met, fallback
// when no NUMA combination works and the packed fit should be used.
func (a *accumulator) distributed(groupSize int, f Fit) (ok, fallback bool) {
	m, n, bySocket := a.m, a.need, f.BySocket
	if a.satisfied() {
		return true, false
	}
	if a.failed() {
		return false, false
	}
	numas := a.sortedNUMA()
	hint := f.HintNUMAs
	if f.V137 {
		hint = 0 // v1.37 takes no hint
	}
	minK, maxK := a.rangeNUMANodesNeeded(groupSize, hint)
	// after[i] is the free CPU count of numas[i] after a candidate
	// allocation; pos maps a NUMA index to its place in numas.
	pos := make([]int, len(m.numas.ids))
	for i, g := range numas {
		pos[g] = i
	}
	after := make([]int, len(numas))
	scratch := make([]int, len(numas))

	for k := minK; k <= maxK; k++ {
		if binomial(len(numas), k) > maxCombinations {
			// The kubelet would enumerate them all (hours on a machine with
			// dozens of NUMA nodes); fall back to packed instead.
			break
		}
		bestBalance := math.MaxFloat64
		var bestCombo, bestRemainder []int
		bestInOneSocket := false
		IterateCombinations(numas, k, func(combo []int) bool {
			// A perfect balance ends the search, under align-by-socket
			// only once it is within one socket.
			if bestBalance == 0 && (!bySocket || bestInOneSocket) {
				return false
			}
			total, groups := 0, 0
			for _, g := range combo {
				total += a.numaFree[g]
				groups += a.numaFree[g] / groupSize
			}
			if total < n || groups*groupSize < n {
				return true
			}
			distribution := a.share(combo, n, groupSize, bySocket)
			for _, g := range combo {
				if a.numaFree[g] < distribution {
					return true
				}
			}
			for i, g := range numas {
				after[i] = a.numaFree[g]
			}
			for _, g := range combo {
				after[pos[g]] -= distribution
			}
			remainder := n - distribution*len(combo)
			var remainderCombo []int
			for _, g := range combo {
				if after[pos[g]] >= groupSize {
					remainderCombo = append(remainderCombo, g)
				}
			}
			bestLocal := math.MaxFloat64
			var bestLocalRemainder []int
			if remainder == 0 {
				bestLocal = standardDeviation(after)
			}
			for kk := len(remainderCombo); remainder > 0 && kk >= 1; kk-- {
				IterateCombinations(remainderCombo, kk, func(subset []int) bool {
					copy(scratch, after)
					sum := 0
					for _, g := range subset {
						sum += scratch[pos[g]]
					}
					if sum < remainder {
						return true
					}
					if !stripe(scratch, subset, pos, remainder, groupSize) {
						// The kubelet would loop forever here; a subset that
						// cannot take the remainder in whole groups is skipped.
						return true
					}
					if b := standardDeviation(scratch); b < bestLocal {
						bestLocal = b
						bestLocalRemainder = append([]int(nil), subset...)
					}
					return true
				})
			}
			if remainder > 0 && bestLocalRemainder == nil {
				// No subset takes the remainder. Without align-by-socket
				// such a combo never wins (its balance is +Inf); with it
				// the socket preference could pick it and the kubelet
				// would then loop forever handing out the remainder.
				return true
			}
			better := bestLocal < bestBalance
			inOneSocket := false
			if bySocket {
				// Any combination within one socket beats any that
				// crosses sockets; balance decides within each kind.
				inOneSocket = m.numasInOneSocket(combo)
				if inOneSocket != bestInOneSocket {
					better = inOneSocket
				}
			}
			if better {
				bestBalance = bestLocal
				bestRemainder = bestLocalRemainder
				bestCombo = append([]int(nil), combo...)
				bestInOneSocket = inOneSocket
			}
			return true
		})
		if bestCombo == nil {
			continue
		}
		distribution := a.share(bestCombo, n, groupSize, bySocket)
		for _, g := range bestCombo {
			got := m.Packed(a.free.And(m.numas.mask[g]), distribution, f.packedPart())
			if got == nil {
				return false, false
			}
			got.ForEach(a.take)
		}
		remainder := n - distribution*len(bestCombo)
		for remainder > 0 {
			progress := false
			for _, g := range bestRemainder {
				if remainder == 0 {
					break
				}
				if a.numaFree[g] < groupSize {
					continue
				}
				got := m.Packed(a.free.And(m.numas.mask[g]), groupSize, f.packedPart())
				if got == nil {
					return false, false
				}
				got.ForEach(a.take)
				remainder -= groupSize
				progress = true
			}
			if !progress {
				return false, false
			}
		}
		if a.need != 0 {
			return false, false
		}
		return true, false
	}
	return false, true
}

// share is the CPUs each node of combo gets before the remainder: an even
// split of n in whole groups; under align-by-socket (kubelet v1.37) capped
// at the free CPUs, in whole groups, of the combo's emptiest node, so a
// socket's nodes can share a request one of them could not hold evenly.
func (a *accumulator) share(combo []int, n, groupSize int, bySocket bool) int {
	d := (n / len(combo) / groupSize) * groupSize
	if bySocket {
		for _, g := range combo {
			d = min(d, a.numaFree[g]/groupSize*groupSize)
		}
	}
	return d
}

// numasInOneSocket reports whether every CPU of the NUMA nodes (group
// indexes) is in one socket: the kubelet's AreNUMANodesInSameSocket.
func (m *Machine) numasInOneSocket(nodes []int) bool {
	sock := -1
	for _, g := range nodes {
		for _, p := range m.numas.cpus[g] {
			switch s := m.sockOf[p]; {
			case sock < 0:
				sock = s
			case s != sock:
				return false
			}
		}
	}
	return true
}

// maxCombinations bounds the NUMA node combinations one distributed
// allocation examines per size; beyond it the packed fallback is used.
// Machines with up to 16 NUMA nodes never reach it (C(16,8) = 12870).
const maxCombinations = 100000

// binomial is n choose k, saturating above maxCombinations.
func binomial(n, k int) int {
	if k < 0 || k > n {
		return 0
	}
	if k > n-k {
		k = n - k
	}
	r := 1
	for i := 1; i <= k; i++ {
		r = r * (n - k + i) / i
		if r > maxCombinations {
			return maxCombinations + 1
		}
	}
	return r
}

// stripe hands out remainder CPUs in groups round-robin over subset,
// updating free (indexed through pos). It reports false when a round makes
// no progress.
func stripe(free []int, subset []int, pos []int, remainder, groupSize int) bool {
	for remainder > 0 {
		progress := false
		for _, g := range subset {
			if remainder == 0 {
				break
			}
			if free[pos[g]] < groupSize {
				continue
			}
			free[pos[g]] -= groupSize
			remainder -= groupSize
			progress = true
		}
		if !progress {
			return false
		}
	}
	return true
}

// rangeNUMANodesNeeded is the kubelet's bound on how many NUMA nodes a
// distributed allocation may use: the minimum from CPU-group arithmetic on
// the machine's total CPUs per node, the maximum the groups needed or the
// nodes with free CPUs. A hint (kubelet v1.38: the topology manager
// hint's NUMA count, 0 = none) above the minimum and within the maximum
// becomes the minimum, so the CPUs spread over as many nodes as the hint
// names; one above the maximum is ignored.
func (a *accumulator) rangeNUMANodesNeeded(groupSize, hint int) (int, int) {
	m := a.m
	numNUMA := len(m.numas.ids)
	available := 0
	for _, f := range a.numaFree {
		if f > 0 {
			available++
		}
	}
	groups := (m.n-1)/groupSize + 1
	perNode := (groups-1)/numNUMA + 1
	needed := (a.need-1)/groupSize + 1
	minK := (needed-1)/perNode + 1
	maxK := min(needed, available)
	if hint > minK && hint <= maxK {
		minK = hint
	}
	return minK, maxK
}

// IterateCombinations calls f with every k-element combination of items in
// lexicographic order of positions, until f returns false. The slice passed
// to f is reused; copy it to keep it.
func IterateCombinations(items []int, k int, f func([]int) bool) {
	if k < 1 || k > len(items) {
		return
	}
	idx := make([]int, k)
	combo := make([]int, k)
	for i := range idx {
		idx[i] = i
	}
	for {
		for i, j := range idx {
			combo[i] = items[j]
		}
		if !f(combo) {
			return
		}
		i := k - 1
		for i >= 0 && idx[i] == len(items)-k+i {
			i--
		}
		if i < 0 {
			return
		}
		idx[i]++
		for j := i + 1; j < k; j++ {
			idx[j] = idx[j-1] + 1
		}
	}
}

// standardDeviation is the population standard deviation with the kubelet's
// rounding: the mean and the result are rounded to 3 decimals.
func standardDeviation(xs []int) float64 {
	if len(xs) == 0 {
		return 0
	}
	sum := 0.0
	for _, x := range xs {
		sum += float64(x)
	}
	mean := math.Round(sum/float64(len(xs))*1000) / 1000
	sq := 0.0
	for _, x := range xs {
		d := float64(x) - mean
		sq += d * d
	}
	return math.Round(math.Sqrt(sq/float64(len(xs)))*1000) / 1000
}
