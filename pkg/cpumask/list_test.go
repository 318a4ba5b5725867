package cpumask

import "testing"

func TestSameList(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"0-3", "0,1,2,3", true},
		{"3,1", "1,3", true},
		{"", "", true},
		{"0-1", "0-2", false},
		{"0", "", false},
		{"x", "x", false},
	} {
		if got := SameList(c.a, c.b); got != c.want {
			t.Errorf("SameList(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
