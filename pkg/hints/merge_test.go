package hints

import (
	"errors"
	"strings"
	"testing"
)

// pref and notPref build hints; no nodes = any node.
func pref(nodes ...int) Hint    { return Hint{Affinity: NewMask(nodes...), Preferred: true} }
func notPref(nodes ...int) Hint { return Hint{Affinity: NewMask(nodes...), Preferred: false} }

func numaInfo(t testing.TB, n int, distances map[int]map[int]int, opts Options) NUMAInfo {
	t.Helper()
	nodes := make([]int, n)
	for i := range nodes {
		nodes[i] = i
	}
	info, err := NewNUMAInfo(nodes, distances, opts)
	if err != nil {
		t.Fatalf("NewNUMAInfo: %v", err)
	}
	return info
}

func merger(t testing.TB, policy string, info NUMAInfo, opts Options) *Merger {
	t.Helper()
	m, err := NewMerger(policy, info, opts)
	if err != nil {
		t.Fatalf("NewMerger(%q): %v", policy, err)
	}
	return m
}

type providers = []map[string][]Hint

func TestMergeTwoNodes(t *testing.T) {
	// On two nodes "all" is {0,1}; single-numa-node reports it as any.
	cases := []struct {
		name      string
		providers providers
		want      map[string]Hint // by policy
	}{
		{
			name:      "no providers: one empty combination, all nodes preferred",
			providers: nil,
			want: map[string]Hint{
				PolicyBestEffort: pref(0, 1), PolicyRestricted: pref(0, 1), PolicySingleNUMANode: pref(),
			},
		},
		{
			name:      "provider without resources has no preference",
			providers: providers{{}},
			want: map[string]Hint{
				PolicyBestEffort: pref(0, 1), PolicyRestricted: pref(0, 1), PolicySingleNUMANode: pref(),
			},
		},
		{
			name:      "nil list is no preference",
			providers: providers{{"cpu": nil}},
			want: map[string]Hint{
				PolicyBestEffort: pref(0, 1), PolicyRestricted: pref(0, 1), PolicySingleNUMANode: pref(),
			},
		},
		{
			// {any, not preferred}: the merged affinity is all nodes, not
			// preferred; single-numa-node drops the non-preferred hint,
			// leaving no combination, so the default {all, not preferred},
			// reported as any.
			name:      "empty list cannot be placed",
			providers: providers{{"cpu": {}}},
			want: map[string]Hint{
				PolicyBestEffort: notPref(0, 1), PolicyRestricted: notPref(0, 1), PolicySingleNUMANode: notPref(),
			},
		},
		{
			name:      "narrowest preferred wins, lower node on a tie",
			providers: providers{{"cpu": {pref(0), pref(1), notPref(0, 1)}}},
			want: map[string]Hint{
				PolicyBestEffort: pref(0), PolicyRestricted: pref(0), PolicySingleNUMANode: pref(0),
			},
		},
		{
			// Only {1}x{1} is preferred: {0}x{1} is empty (dropped), every
			// other combination has unequal masks or a non-preferred hint.
			name: "a device on node 1 pulls the CPU hint to node 1",
			providers: providers{
				{"cpu": {pref(0), pref(1), notPref(0, 1)}},
				{"dev": {pref(1), notPref(0, 1)}},
			},
			want: map[string]Hint{
				PolicyBestEffort: pref(1), PolicyRestricted: pref(1), PolicySingleNUMANode: pref(1),
			},
		},
		{
			// CPUs need both nodes; the device is on node 1. Merged:
			// {0,1}&{1} = {1} not preferred (masks differ), {0,1}&{0,1}
			// not preferred (device hint not preferred). The widest
			// narrowest need is 2 (CPUs), so {0,1} wins over {1}.
			// single-numa-node keeps no CPU hint at all.
			name: "CPUs need two nodes, device on one: not preferred",
			providers: providers{
				{"cpu": {pref(0, 1)}},
				{"dev": {pref(1), notPref(0, 1)}},
			},
			want: map[string]Hint{
				PolicyBestEffort: notPref(0, 1), PolicyRestricted: notPref(0, 1), PolicySingleNUMANode: notPref(),
			},
		},
		{
			// {0}&{1} is empty and dropped; nothing is left, so the
			// default {all, not preferred}.
			name: "disjoint single-node hints fall back to the default",
			providers: providers{
				{"cpu": {pref(0)}},
				{"dev": {pref(1)}},
			},
			want: map[string]Hint{
				PolicyBestEffort: notPref(0, 1), PolicyRestricted: notPref(0, 1), PolicySingleNUMANode: notPref(),
			},
		},
		{
			// A hint with any affinity does not narrow the merge and keeps
			// the combination preferred when it is preferred itself.
			name: "any-node hint in a list",
			providers: providers{
				{"cpu": {pref(1), notPref(0, 1)}},
				{"dev": {pref()}},
			},
			want: map[string]Hint{
				PolicyBestEffort: pref(1), PolicyRestricted: pref(1), PolicySingleNUMANode: pref(1),
			},
		},
	}
	for _, tc := range cases {
		for _, policy := range []string{PolicyBestEffort, PolicyRestricted, PolicySingleNUMANode} {
			t.Run(tc.name+"/"+policy, func(t *testing.T) {
				opts := DefaultOptions()
				m := merger(t, policy, numaInfo(t, 2, nil, opts), opts)
				got := m.Merge(tc.providers...)
				if want := tc.want[policy]; got != want {
					t.Fatalf("Merge = {%s %t}, want {%s %t}", got.Affinity, got.Preferred, want.Affinity, want.Preferred)
				}
			})
		}
	}
}

func TestMergeNone(t *testing.T) {
	opts := DefaultOptions()
	m := merger(t, PolicyNone, numaInfo(t, 2, nil, opts), opts)
	got := m.Merge(map[string][]Hint{"cpu": {}}, map[string][]Hint{"dev": {pref(1)}})
	if got != (Hint{}) {
		t.Fatalf("none policy merged to %+v, want the zero hint (nothing consulted)", got)
	}
	if err := m.Admit(got, "x"); err != nil {
		t.Fatalf("none policy rejected: %v", err)
	}
}

// TestMergeBestNonPreferred exercises the choice among non-preferred hints
// on four nodes, where the plain "narrowest" rule would pick differently.
func TestMergeBestNonPreferred(t *testing.T) {
	cases := []struct {
		name      string
		providers providers
		want      Hint
	}{
		{
			// cpu x dev: {0,1}&{0}={0}, {0,1}&{0,2}={0}, {2,3}&{0}=empty,
			// {2,3}&{0,2}={2}, {0,1,2}&{0}={0}, {0,1,2}&{0,2}={0,2}; none
			// preferred (unequal masks or a non-preferred hint). The target
			// width is max(narrowest cpu = 2, narrowest dev = 1) = 2, and
			// {0,2} is the only candidate of width 2, so it beats the
			// narrower {0}.
			name: "width equal to the largest narrowest need wins",
			providers: providers{
				{"cpu": {pref(0, 1), pref(2, 3), notPref(0, 1, 2)}},
				{"dev": {pref(0), notPref(0, 2)}},
			},
			want: notPref(0, 2),
		},
		{
			// Target width 2 ({1,2}); the first candidate {0,1,2,3} is wider,
			// so the narrower {1,2} replaces it.
			name:      "wider than the target gives way to a fitter hint",
			providers: providers{{"cpu": {notPref(0, 1, 2, 3), notPref(1, 2)}}},
			want:      notPref(1, 2),
		},
		{
			// a x b: {1}&{0,1}={1}, {1}&{0,1,2}={1}, {0,1,2}&{0,1}={0,1},
			// {0,1,2}&{0,1,2}={0,1,2}. Target max(1, 2) = 2: {0,1}.
			name: "narrower than the target creeps up to it, never above",
			providers: providers{
				{"a": {notPref(1), notPref(0, 1, 2)}},
				{"b": {notPref(0, 1), notPref(0, 1, 2)}},
			},
			want: notPref(0, 1),
		},
		{
			// Target 3 (b's narrowest); the candidates {0} = {0}&{0,1,2}
			// and {0,1} = {0,1}&{0,1,2} are both below it: the wider {0,1}
			// is closer.
			name: "below the target the wider hint wins",
			providers: providers{
				{"a": {notPref(0), notPref(0, 1)}},
				{"b": {notPref(0, 1, 2)}},
			},
			want: notPref(0, 1),
		},
		{
			// Target 1; candidates {3} and {1} (both width 1), from the
			// equally wide ones the numerically smaller mask.
			name: "equal widths: numerically smaller mask",
			providers: providers{
				{"a": {notPref(3), notPref(1)}},
			},
			want: notPref(1),
		},
		{
			// Any preferred hint beats every non-preferred one, however
			// narrow.
			name: "preferred beats narrower non-preferred",
			providers: providers{
				{"a": {notPref(0), pref(0, 1)}},
			},
			want: pref(0, 1),
		},
		{
			// Among preferred, fewer nodes first, then the numerically
			// smaller mask: {1,2} = 0b0110 beats {0,3} = 0b1001.
			name: "preferred tie on width: numerically smaller mask",
			providers: providers{
				{"a": {pref(0, 3), pref(1, 2)}},
			},
			want: pref(1, 2),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := DefaultOptions()
			m := merger(t, PolicyBestEffort, numaInfo(t, 4, nil, opts), opts)
			got := m.Merge(tc.providers...)
			if got != tc.want {
				t.Fatalf("Merge = {%s %t}, want {%s %t}", got.Affinity, got.Preferred, tc.want.Affinity, tc.want.Preferred)
			}
			// The merge must not depend on the order of the hints.
			var rev providers
			for _, p := range tc.providers {
				q := map[string][]Hint{}
				for k, hs := range p {
					r := make([]Hint, len(hs))
					for i := range hs {
						r[len(hs)-1-i] = hs[i]
					}
					q[k] = r
				}
				rev = append(rev, q)
			}
			if got := m.Merge(rev...); got != tc.want {
				t.Fatalf("Merge with reversed hint lists = {%s %t}, want {%s %t}", got.Affinity, got.Preferred, tc.want.Affinity, tc.want.Preferred)
			}
		})
	}
}

// twoSocketDistances: nodes 0 and 2 on one socket, 1 and 3 on the other
// (12 within a socket, 21 across, 10 to itself).
func twoSocketDistances() map[int]map[int]int {
	socket := map[int]int{0: 0, 2: 0, 1: 1, 3: 1}
	d := map[int]map[int]int{}
	for a := 0; a < 4; a++ {
		d[a] = map[int]int{}
		for b := 0; b < 4; b++ {
			switch {
			case a == b:
				d[a][b] = 10
			case socket[a] == socket[b]:
				d[a][b] = 12
			default:
				d[a][b] = 21
			}
		}
	}
	return d
}

func TestMergePreferClosest(t *testing.T) {
	// Every pair is a preferred hint. Narrowest alone picks {0,1} (0b0011,
	// the smallest value). By distance: {0,2} and {1,3} average
	// (10+12+12+10)/4 = 11, the cross-socket pairs (10+21+21+10)/4 = 15.5;
	// of the two closest, the smaller mask {0,2}.
	pairs := []Hint{pref(0, 1), pref(0, 2), pref(0, 3), pref(1, 2), pref(1, 3), pref(2, 3)}
	cases := []struct {
		name   string
		policy string
		opts   map[string]string
		hints  []Hint
		want   Hint
	}{
		{"without option: numerically smallest", PolicyBestEffort, nil, pairs, pref(0, 1)},
		{"with option: closest pair", PolicyBestEffort, map[string]string{OptPreferClosestNUMANodes: "true"}, pairs, pref(0, 2)},
		{"restricted with option", PolicyRestricted, map[string]string{OptPreferClosestNUMANodes: "true"}, pairs, pref(0, 2)},
		// Width still comes first: a single node beats the closest pair.
		{"narrower beats closer", PolicyBestEffort, map[string]string{OptPreferClosestNUMANodes: "true"}, append([]Hint{pref(3)}, pairs...), pref(3)},
		// Non-preferred hints are compared the same way (target width 2).
		{"non-preferred closest", PolicyBestEffort, map[string]string{OptPreferClosestNUMANodes: "true"},
			[]Hint{notPref(0, 1), notPref(1, 3), notPref(2, 3)}, notPref(1, 3)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts, err := ParseOptions(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			m := merger(t, tc.policy, numaInfo(t, 4, twoSocketDistances(), opts), opts)
			if got := m.Merge(map[string][]Hint{"cpu": tc.hints}); got != tc.want {
				t.Fatalf("Merge = {%s %t}, want {%s %t}", got.Affinity, got.Preferred, tc.want.Affinity, tc.want.Preferred)
			}
		})
	}
}

func TestAdmit(t *testing.T) {
	cases := []struct {
		policy string
		hint   Hint
		admit  bool
	}{
		{PolicyBestEffort, notPref(0, 1), true},
		{PolicyBestEffort, pref(0), true},
		{PolicyRestricted, notPref(0, 1), false},
		{PolicyRestricted, pref(0, 1), true},
		{PolicySingleNUMANode, pref(1), true},
		{PolicySingleNUMANode, notPref(), false},
		{PolicySingleNUMANode, pref(), true}, // nobody had a preference
		{PolicyNone, Hint{}, true},
	}
	for _, tc := range cases {
		t.Run(tc.policy+"/"+tc.hint.Affinity.String(), func(t *testing.T) {
			opts := DefaultOptions()
			m := merger(t, tc.policy, numaInfo(t, 2, nil, opts), opts)
			err := m.Admit(tc.hint, "pod p container c: 4 CPUs")
			if tc.admit {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			var tae *TopologyAffinityError
			if !errors.As(err, &tae) {
				t.Fatalf("error %v is not a *TopologyAffinityError", err)
			}
			if tae.Reason() != "TopologyAffinityError" || tae.Hint != tc.hint || tae.Policy != tc.policy {
				t.Fatalf("error carries %+v", tae)
			}
			if !strings.HasPrefix(err.Error(), "TopologyAffinityError: ") || !strings.Contains(err.Error(), "4 CPUs") {
				t.Fatalf("error text %q does not start with the reason or lacks the request", err)
			}
		})
	}
}

func TestParseOptions(t *testing.T) {
	cases := []struct {
		name    string
		in      map[string]string
		want    Options
		wantErr string
	}{
		{"defaults", nil, Options{MaxAllowableNUMANodes: 8}, ""},
		{"closest", map[string]string{"prefer-closest-numa-nodes": "true"}, Options{PreferClosestNUMA: true, MaxAllowableNUMANodes: 8}, ""},
		{"max", map[string]string{"max-allowable-numa-nodes": "16"}, Options{MaxAllowableNUMANodes: 16}, ""},
		{"bad bool", map[string]string{"prefer-closest-numa-nodes": "yes please"}, Options{}, `"prefer-closest-numa-nodes"`},
		{"bad int", map[string]string{"max-allowable-numa-nodes": "many"}, Options{}, `"max-allowable-numa-nodes"`},
		{"below kubelet minimum", map[string]string{"max-allowable-numa-nodes": "4"}, Options{}, `want 8 to 64`},
		{"unknown", map[string]string{"prefer-farthest": "true"}, Options{}, `"prefer-farthest"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseOptions(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %s", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseOptions = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestNUMAInfoLimit(t *testing.T) {
	nodes := []int{0, 1, 2, 3, 4, 5, 6, 7, 8}
	_, err := NewNUMAInfo(nodes, nil, DefaultOptions())
	var tooMany *TooManyNUMANodesError
	if !errors.As(err, &tooMany) || tooMany.Nodes != 9 || tooMany.Max != 8 {
		t.Fatalf("9 nodes under the default limit: err = %v", err)
	}
	if !strings.Contains(err.Error(), "8") || !strings.Contains(err.Error(), "9") {
		t.Fatalf("error %q does not name both numbers", err)
	}
	opts, _ := ParseOptions(map[string]string{OptMaxAllowableNUMANodes: "9"})
	if _, err := NewNUMAInfo(nodes, nil, opts); err != nil {
		t.Fatalf("9 nodes with max-allowable-numa-nodes=9: %v", err)
	}
	if _, err := NewNUMAInfo([]int{0, 64}, nil, DefaultOptions()); err == nil {
		t.Fatal("node id 64 accepted")
	}
}

func TestMasksOrder(t *testing.T) {
	info := numaInfo(t, 3, nil, DefaultOptions())
	want := []Mask{NewMask(0), NewMask(1), NewMask(2), NewMask(0, 1), NewMask(0, 2), NewMask(1, 2), NewMask(0, 1, 2)}
	got := info.Masks()
	if len(got) != len(want) {
		t.Fatalf("Masks = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Masks = %v, want %v", got, want)
		}
	}
}

func TestDeviceHints(t *testing.T) {
	cases := []struct {
		name  string
		nodes int
		dev   []int
		want  []Hint
	}{
		{"one device on node 1 of 2", 2, []int{1}, []Hint{pref(1), notPref(0, 1)}},
		{"devices on 0 and 2 of 4", 4, []int{0, 2}, []Hint{pref(0, 2), notPref(0, 1, 2), notPref(0, 2, 3), notPref(0, 1, 2, 3)}},
		{"no NUMA affinity", 2, nil, nil},
		{"unknown node ignored", 2, []int{5}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := DeviceHints(numaInfo(t, tc.nodes, nil, DefaultOptions()), tc.dev)
			if len(got) != len(tc.want) {
				t.Fatalf("DeviceHints = %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("DeviceHints = %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestEffectiveRequest(t *testing.T) {
	cases := []struct {
		name  string
		inits []InitContainer
		apps  []int64
		want  int64
	}{
		// KEP-693's example pod: init 2 and 2, apps 2 and 1 -> max(2, 3).
		{"KEP-693 example", []InitContainer{{Request: 2000}, {Request: 2000}}, []int64{2000, 1000}, 3000},
		{"init dominates", []InitContainer{{Request: 4000}}, []int64{1000, 1000}, 4000},
		{"no init", nil, []int64{1000, 500}, 1500},
		// Sidecar 1 stays: the init after it needs 1+2 = 3, apps 1+1 = 2.
		{"sidecar adds to later inits and apps", []InitContainer{{Request: 1000, Restartable: true}, {Request: 2000}}, []int64{1000}, 3000},
		// An init before the sidecar does not overlap it: max(2, 1+2) = 3.
		{"init before sidecar", []InitContainer{{Request: 2000}, {Request: 1000, Restartable: true}}, []int64{2000}, 3000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := EffectiveRequest(tc.inits, tc.apps); got != tc.want {
				t.Fatalf("EffectiveRequest = %d, want %d", got, tc.want)
			}
		})
	}
}
