package hints

import (
	"math/rand/v2"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
)

// scored is a hint with a Score; no nodes = any node.
func scored(preferred bool, score int64, nodes ...int) Hint {
	return Hint{Affinity: NewMask(nodes...), Preferred: preferred, Score: score}
}

// TestUtilizationScore: kubelet v1.38 topologymanager/score_test.go.
func TestUtilizationScore(t *testing.T) {
	for _, c := range []struct{ allocatable, assigned, want int64 }{
		{0, 0, 0},   // nothing allocatable: no signal
		{-1, 0, 0},  // the guard of the division
		{8, 0, 1},   // nothing assigned still scores 1
		{8, 4, 50},  // half
		{8, 8, 100}, // full
		{8, 1, 12},  // 12.5 truncated
		{101, 1, 1}, // under 1% floors to 1
		{8, 9, 112}, // over-assignment is not clamped
	} {
		if got := UtilizationScore(c.allocatable, c.assigned); got != c.want {
			t.Errorf("UtilizationScore(%d, %d) = %d, want %d", c.allocatable, c.assigned, got, c.want)
		}
	}
}

// TestAggregateHintScores: kubelet v1.38 topologymanager/policy_test.go.
func TestAggregateHintScores(t *testing.T) {
	for _, c := range []struct {
		name string
		perm []Hint
		want int64
		ok   bool
	}{
		{"all scores zero", []Hint{scored(true, 0, 0), scored(true, 0, 0)}, 0, false},
		{"single scored contributor", []Hint{scored(true, 60, 0)}, 60, true},
		{"multiple scored contributors averaged", []Hint{scored(true, 40, 0), scored(true, 80, 0)}, 60, true},
		{"nil affinity contributor ignored", []Hint{scored(true, 80, 0), scored(true, 40)}, 80, true},
		{"mixed scored and unscored contributors", []Hint{scored(true, 90, 0), scored(true, 0, 0)}, 90, true},
		{"lone minimum score survives unscored and affinity-less contributors",
			[]Hint{scored(true, 1, 0), scored(true, 0, 0), scored(true, 0), scored(true, 100)}, 1, true},
		{"odd sum truncates towards zero", []Hint{scored(true, 40, 0), scored(true, 81, 0)}, 60, true},
		{"minimum and maximum score truncate towards zero", []Hint{scored(true, 1, 0), scored(true, 100, 0)}, 50, true},
		{"low odd scores truncate towards zero", []Hint{scored(true, 1, 0), scored(true, 1, 0), scored(true, 3, 0)}, 1, true},
		{"empty permutation", []Hint{}, 0, false},
	} {
		if got, ok := AggregateScores(c.perm); got != c.want || ok != c.ok {
			t.Errorf("%s: AggregateScores = %d, %t; want %d, %t", c.name, got, ok, c.want, c.ok)
		}
	}
}

// TestMergePermutationCarriesScore: kubelet v1.38's rows (default mask
// {0,1}), each permutation as one hint per resource, so that it is the
// merge's only one. Under kubelet_version 1.37 no Score is carried.
func TestMergePermutationCarriesScore(t *testing.T) {
	for _, c := range []struct {
		name string
		perm []Hint
		want int64
	}{
		{"merged hint carries aggregated score", []Hint{scored(true, 40, 0), scored(true, 80, 0)}, 60},
		{"merged hint truncates a fractional average", []Hint{scored(true, 40, 0), scored(true, 81, 0)}, 60},
		{"merged hint carries a lone minimum score", []Hint{scored(true, 1, 0), scored(true, 0, 0), scored(true, 0)}, 1},
		{"merged hint score is zero when no contributors have scores", []Hint{scored(true, 0, 0)}, 0},
	} {
		for _, v := range []kubever.Version{kubever.V137, kubever.V138} {
			opts := DefaultOptions()
			opts.KubeletVersion = v
			m := merger(t, PolicyBestEffort, numaInfo(t, 2, nil, opts), opts)
			lists := make([][]Hint, len(c.perm))
			for i, h := range c.perm {
				lists[i] = []Hint{h}
			}
			want := c.want
			if v == kubever.V137 {
				want = 0
			}
			if got := m.MergeLists(lists...); got.Score != want || got.Affinity != NewMask(0) || !got.Preferred {
				t.Errorf("%s %s: merged %+v, want {0} preferred with Score %d", c.name, v, got, want)
			}
		}
	}
}

// TestCompareWinnerUnchangedByScore: kubelet v1.38's rows; Score never
// steers the choice, by compare or by a whole merge.
func TestCompareWinnerUnchangedByScore(t *testing.T) {
	m := merger(t, PolicyBestEffort, numaInfo(t, 2, nil, DefaultOptions()), DefaultOptions())
	for _, c := range []struct {
		name               string
		current, candidate Hint
		wantCurrent        bool
	}{
		{"narrower hint wins over wider hint with a higher score", scored(true, 10, 0), scored(true, 90, 0, 1), true},
		{"minimum score does not cost the narrower hint the win", scored(true, 1, 0), scored(true, 100, 0, 1), true},
		{"minimum score does not cost the narrower candidate the win", scored(true, 100, 0, 1), scored(true, 1, 0), false},
		{"unscored narrower hint wins over a fully scored wider hint", scored(true, 0, 0), scored(true, 100, 0, 1), true},
		{"preferred hint with the minimum score wins over a non-preferred hint with the maximum score",
			scored(false, 100, 0, 1), scored(true, 1, 0), false},
	} {
		want := c.candidate
		if c.wantCurrent {
			want = c.current
		}
		if got := m.compare(0, c.current, c.candidate); got != want {
			t.Errorf("%s: compare = %+v, want %+v", c.name, got, want)
		}
		// The same two hints as one resource's list, in both orders: the
		// winner and its own Score.
		for _, list := range [][]Hint{{c.current, c.candidate}, {c.candidate, c.current}} {
			if got := m.MergeLists(list); got != want {
				t.Errorf("%s: MergeLists(%v) = %+v, want %+v", c.name, list, got, want)
			}
		}
	}
}

// A merged hint's Score is that of the first combination, in the
// kubelet's walk order, that merges to the winner; single-numa-node's
// any-node result and the default hint score 0.
func TestMergedScoreFirstCombination(t *testing.T) {
	opts := DefaultOptions()
	info := numaInfo(t, 2, nil, opts)
	be := merger(t, PolicyBestEffort, info, opts)
	// CPU {0} 40, {1} 10, {0,1} 20; memory {0} 80, {0,1} 60 (not
	// preferred). Winner {0} preferred: CPU {0} with memory {0}: 60.
	cpu := []Hint{scored(true, 40, 0), scored(true, 10, 1), scored(false, 20, 0, 1)}
	mem := []Hint{scored(true, 80, 0), scored(false, 60, 0, 1)}
	if got := be.MergeLists(cpu, mem); got != scored(true, 60, 0) {
		t.Errorf("merged %+v, want {0} preferred Score 60", got)
	}
	// Two combinations merge to the winner {0} preferred: CPU any x
	// memory {0} (80), then CPU {0} x memory {0} ((40+80)/2 = 60). The
	// kubelet keeps the first.
	cpu = []Hint{scored(true, 0), scored(true, 40, 0)}
	mem = []Hint{scored(true, 80, 0)}
	if got := be.MergeLists(cpu, mem); got != scored(true, 80, 0) {
		t.Errorf("merged %+v, want {0} preferred Score 80", got)
	}
	// Non-preferred: bestCount is 2 (memory's narrowest), so {0,1} beats
	// {0}: CPU {0,1} x memory {0,1}, (20+60)/2 = 40.
	cpu = []Hint{scored(false, 40, 0), scored(false, 20, 0, 1)}
	mem = []Hint{scored(false, 60, 0, 1)}
	if got := be.MergeLists(cpu, mem); got != scored(false, 40, 0, 1) {
		t.Errorf("merged %+v, want {0,1} not preferred Score 40", got)
	}
	// single-numa-node: a hint of all nodes is rewritten to any, Score 0.
	sn := merger(t, PolicySingleNUMANode, info, opts)
	if got := sn.MergeLists([]Hint{scored(true, 30)}, []Hint{scored(true, 30)}); got != (Hint{Preferred: true}) {
		t.Errorf("single-numa-node: merged %+v, want {any, preferred} Score 0", got)
	}
	// No combination: the default hint, Score 0.
	if got := be.MergeLists([]Hint{scored(true, 30, 0)}, []Hint{scored(true, 30, 1)}); got != (Hint{Affinity: NewMask(0, 1)}) {
		t.Errorf("no combination: merged %+v, want {0,1} not preferred Score 0", got)
	}
}

// TestMergedScoreMatchesBruteForce: the merged Score against the kubelet's
// walk (every combination in order, compare keeping the current hint
// against an equal one, the Score of the combination that set it), on
// random lists with random scores, for every policy.
func TestMergedScoreMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 141796))
	for iter := 0; iter < 3000; iter++ {
		n := 1 + r.IntN(4)
		info, opts := randomNUMA(t, r, []int{0, 1, 2, 3}[:n], 3, 5)
		var lists [][]Hint
		for k := 1 + r.IntN(4); k > 0; k-- {
			var hs []Hint
			for j := 1 + r.IntN(5); j > 0; j-- {
				hs = append(hs, Hint{Affinity: Mask(r.IntN(1 << n)), Preferred: r.IntN(2) == 0, Score: int64(r.IntN(4) * 30)})
			}
			lists = append(lists, hs)
		}
		for _, policy := range []string{PolicyBestEffort, PolicyRestricted, PolicySingleNUMANode} {
			m := merger(t, policy, info, opts)
			in := lists
			if policy == PolicySingleNUMANode {
				in = singleNUMAOnly(lists)
			}
			want := bruteScore(m, in)
			got := m.MergeLists(lists...)
			if policy == PolicySingleNUMANode && got.Affinity == 0 {
				want = 0
			}
			if got.Score != want {
				t.Fatalf("iteration %d, %s, lists %v: merged %+v, brute force Score %d", iter, policy, lists, got, want)
			}
		}
	}
}

// bruteScore is the Score of the kubelet's merged hint: that of the
// combination whose merged hint compare last took; 0 when none has a
// non-empty affinity.
func bruteScore(m *Merger, lists [][]Hint) int64 {
	for _, hs := range lists {
		if len(hs) == 0 {
			return 0
		}
	}
	bestCount := bestNonPreferredCount(lists)
	var best Hint
	var score int64
	found := false
	perm := make([]Hint, 0, len(lists))
	var walk func(and Mask, pref bool, first Mask)
	walk = func(and Mask, pref bool, first Mask) {
		i := len(perm)
		if i == len(lists) {
			if and == 0 {
				return
			}
			cand := Hint{Affinity: and, Preferred: pref}
			if next := m.compare(bestCount, best, cand); !found || next != best {
				best, found = cand, true
				score, _ = AggregateScores(perm)
			}
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
			perm = append(perm, h)
			walk(a, p, f)
			perm = perm[:i]
		}
	}
	walk(m.numa.all, true, 0)
	return score
}
