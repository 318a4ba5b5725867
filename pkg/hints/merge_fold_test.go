package hints

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// bruteMerge is the kubelet's walk, kept as the reference for the folded
// mergeLists: every combination of one hint per list, merged and compared
// in order.
func bruteMerge(m *Merger, lists [][]Hint) (Hint, bool) {
	for _, hs := range lists {
		if len(hs) == 0 {
			return Hint{}, false
		}
	}
	bestCount := bestNonPreferredCount(lists)
	var best Hint
	found := false
	var walk func(i int, and Mask, pref bool, first Mask)
	walk = func(i int, and Mask, pref bool, first Mask) {
		if i == len(lists) {
			if and == 0 {
				return
			}
			cand := Hint{Affinity: and, Preferred: pref}
			if !found {
				best, found = cand, true
				return
			}
			best = m.compare(bestCount, best, cand)
			return
		}
		for _, h := range lists[i] {
			a, p, f := and, pref && h.Preferred, first
			if h.Affinity != 0 {
				if f == 0 {
					f = h.Affinity
				} else if h.Affinity != f {
					p = false
				}
				a &= h.Affinity
			}
			walk(i+1, a, p, f)
		}
	}
	walk(0, m.numa.all, true, 0)
	return best, found
}

// randomNUMA is NUMA information for nodes with random distances (10 plus
// a multiple of step below levels*step) and prefer-closest-numa-nodes on
// or off at random.
func randomNUMA(t *testing.T, r *rand.Rand, nodes []int, levels, step int) (NUMAInfo, Options) {
	t.Helper()
	dist := map[int]map[int]int{}
	for _, a := range nodes {
		dist[a] = map[int]int{}
		for _, b := range nodes {
			dist[a][b] = 10 + r.IntN(levels)*step
		}
	}
	opts := DefaultOptions()
	opts.PreferClosestNUMA = r.IntN(2) == 0
	info, err := NewNUMAInfo(nodes, dist, opts)
	if err != nil {
		t.Fatal(err)
	}
	return info, opts
}

// TestMergeFoldMatchesBruteForce compares the folded merge with the plain
// cross-product walk on random hint lists, for every policy, with and
// without prefer-closest-numa-nodes, on random distances.
func TestMergeFoldMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 693))
	counted := 0
	defer func() {
		if counted < 1000 {
			t.Errorf("only %d cases went through mergeCounted", counted)
		}
	}()
	for iter := 0; iter < 3000; iter++ {
		n := 1 + r.IntN(5)
		// Half the runs use sparse node ids with hints that may name
		// unknown nodes (the map path), half nodes 0..n-1 (the table).
		nodes := make([]int, n)
		width := n
		for i := range nodes {
			nodes[i] = i
			if iter%2 == 1 {
				nodes[i] = 2*i + 1
				width = 2*n + 1
			}
		}
		info, opts := randomNUMA(t, r, nodes, 3, 5)
		var providers []map[string][]Hint
		for p := r.IntN(4); p >= 0; p-- {
			res := map[string][]Hint{}
			for k := r.IntN(3); k > 0; k-- {
				switch r.IntN(8) {
				case 0:
					res[fmt.Sprint("nil", k)] = nil
				case 1:
					res[fmt.Sprint("empty", k)] = []Hint{}
				default:
					var hs []Hint
					for j := 1 + r.IntN(6); j > 0; j-- {
						hs = append(hs, Hint{Affinity: Mask(r.IntN(1 << width)), Preferred: r.IntN(2) == 0})
					}
					res[fmt.Sprint("r", k)] = hs
				}
			}
			providers = append(providers, res)
		}
		for _, policy := range []string{PolicyBestEffort, PolicyRestricted, PolicySingleNUMANode} {
			m := merger(t, policy, info, opts)
			lists := flatten(providers)
			if policy == PolicySingleNUMANode {
				lists = singleNUMAOnly(lists)
			}
			want, wantOK := bruteMerge(m, lists)
			if got, gotOK := m.mergeFold(lists); got != want || gotOK != wantOK {
				t.Fatalf("iteration %d, %s, closest=%t, lists %v: fold = %v %t, brute force = %v %t",
					iter, policy, opts.PreferClosestNUMA, lists, got, gotOK, want, wantOK)
			}
			if got, gotOK := m.mergeLists(lists); got != want || gotOK != wantOK {
				t.Fatalf("iteration %d, %s, closest=%t, lists %v: mergeLists = %v %t, brute force = %v %t",
					iter, policy, opts.PreferClosestNUMA, lists, got, gotOK, want, wantOK)
			}
			if n := denseWidth(info.all, lists); n > 0 && allHaveHints(lists) {
				got, gotOK, ok := m.mergeCounted(lists, n)
				if !ok || got != want || gotOK != wantOK {
					t.Fatalf("iteration %d, %s, closest=%t, lists %v: counted = %v %t (ok %t), brute force = %v %t",
						iter, policy, opts.PreferClosestNUMA, lists, got, gotOK, ok, want, wantOK)
				}
				counted++
			}
		}
	}
}

func allHaveHints(lists [][]Hint) bool {
	for _, hs := range lists {
		if len(hs) == 0 {
			return false
		}
	}
	return true
}

// BenchmarkMergeStrategies compares, on 8 NUMA nodes, the kubelet's walk
// over every combination with the fold and the counting merge, for the
// CPU hints of a small request (all 255 masks, single nodes preferred), a
// NIC on node 5 and a GPU on node 4 (128 masks each) under best-effort.
func BenchmarkMergeStrategies(b *testing.B) {
	opts := DefaultOptions()
	info := numaInfo(b, 8, nil, opts)
	m := merger(b, PolicyBestEffort, info, opts)
	var cpu []Hint
	for _, mask := range info.Masks() {
		cpu = append(cpu, Hint{Affinity: mask, Preferred: mask.Count() == 1})
	}
	lists := [][]Hint{cpu, DeviceHints(info, []int{5}), DeviceHints(info, []int{4})}
	want, _ := bruteMerge(m, lists)
	for _, s := range []struct {
		name  string
		merge func() Hint
	}{
		{"walk", func() Hint { h, _ := bruteMerge(m, lists); return h }},
		{"fold", func() Hint { h, _ := m.mergeFold(lists); return h }},
		{"count", func() Hint { h, _, _ := m.mergeCounted(lists, 8); return h }},
	} {
		b.Run(s.name, func(b *testing.B) {
			if got := s.merge(); got != want {
				b.Fatalf("%s = %v, want %v", s.name, got, want)
			}
			for i := 0; i < b.N; i++ {
				s.merge()
			}
		})
	}
}

// TestMergeOneMatchesBruteForce: the single-resource shortcut of mergeFold
// (the CPU provider alone) gives the kubelet's walk's result on random
// lists of up to 255 hints over up to 8 nodes, for every policy, with and
// without prefer-closest-numa-nodes.
func TestMergeOneMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 955))
	for iter := 0; iter < 2000; iter++ {
		n := 1 + r.IntN(8)
		nodes := make([]int, n)
		for i := range nodes {
			nodes[i] = i
		}
		info, opts := randomNUMA(t, r, nodes, 4, 6)
		hs := make([]Hint, r.IntN(1<<n))
		for i := range hs {
			hs[i] = Hint{Affinity: Mask(r.IntN(1 << n)), Preferred: r.IntN(3) == 0}
		}
		for _, policy := range []string{PolicyBestEffort, PolicyRestricted, PolicySingleNUMANode} {
			m := merger(t, policy, info, opts)
			lists := [][]Hint{hs}
			if policy == PolicySingleNUMANode {
				lists = singleNUMAOnly(lists)
			}
			want, wantOK := bruteMerge(m, lists)
			if got, gotOK := m.mergeFold(lists); got != want || gotOK != wantOK {
				t.Fatalf("iteration %d, %s, closest=%t, hints %v: mergeOne = %v %t, brute force = %v %t",
					iter, policy, opts.PreferClosestNUMA, lists[0], got, gotOK, want, wantOK)
			}
			// The engine's entry point agrees with Merge, nil and empty
			// lists included.
			in := hs
			switch iter % 10 {
			case 0:
				in = nil
			case 1:
				in = []Hint{}
			}
			if got, want := m.MergeLists(in), m.Merge(map[string][]Hint{"cpu": in}); got != want {
				t.Fatalf("iteration %d, %s: MergeLists(%v) = %v, Merge = %v", iter, policy, in, got, want)
			}
		}
	}
}
