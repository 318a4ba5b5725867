package take

import "testing"

func TestStandardDeviationRounding(t *testing.T) {
	tests := []struct {
		xs   []int
		want float64
	}{
		{[]int{6, 6, 20, 20}, 7},
		{[]int{4, 8, 20, 20}, 7.141},
		{[]int{18, 8, 8, 20}, 5.545},
		// mean 1.6667 rounds to 1.667 before the deviations are taken.
		{[]int{1, 2, 2}, 0.471},
		{[]int{5, 5}, 0},
	}
	for _, tc := range tests {
		if got := standardDeviation(tc.xs); got != tc.want {
			t.Errorf("stddev(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}

func TestBinomial(t *testing.T) {
	for _, c := range []struct{ n, k, want int }{{4, 2, 6}, {16, 8, 12870}, {8, 0, 1}, {3, 4, 0}, {40, 20, maxCombinations + 1}} {
		if got := binomial(c.n, c.k); got != c.want {
			t.Errorf("binomial(%d,%d) = %d, want %d", c.n, c.k, got, c.want)
		}
	}
}
