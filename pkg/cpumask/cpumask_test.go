package cpumask

import (
	"errors"
	"math/rand"
	"slices"
	"testing"

	"k8s.io/utils/cpuset"
)

func mustNew(t *testing.T, ids ...int) Mask {
	t.Helper()
	m, err := New(ids...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestString(t *testing.T) {
	for _, tc := range []struct {
		ids  []int
		want string
	}{
		{nil, ""},
		{[]int{0}, "0"},
		{[]int{3, 1, 2, 0}, "0-3"},
		{[]int{0, 1, 2, 3, 8, 10, 11}, "0-3,8,10-11"},
		{[]int{63, 64}, "63-64"},
		{[]int{1, 3, 5}, "1,3,5"},
		{[]int{127, 0, 255, 128}, "0,127-128,255"},
		{[]int{MaxID}, "65535"},
	} {
		if got := mustNew(t, tc.ids...).String(); got != tc.want {
			t.Errorf("New(%v).String() = %q, want %q", tc.ids, got, tc.want)
		}
	}
}

func TestBounds(t *testing.T) {
	var ie *IDError
	for _, id := range []int{-1, MaxID + 1, 1 << 40} {
		if _, err := New(0, id); !errors.As(err, &ie) || ie.ID != id {
			t.Errorf("New(0, %d) error = %v, want an IDError naming %d", id, err, id)
		}
	}
	if _, err := FromCPUSet(cpuset.New(4, MaxID+64)); !errors.As(err, &ie) || ie.ID != MaxID+64 {
		t.Errorf("FromCPUSet error = %v, want an IDError naming %d", err, MaxID+64)
	}
	words := make([]uint64, MaxID>>6+2)
	words[len(words)-1] = 1 << 5
	if _, err := FromWords(words); !errors.As(err, &ie) || ie.ID != MaxID+1+5 {
		t.Errorf("FromWords error = %v, want an IDError naming %d", err, MaxID+6)
	}
	// Trailing zero words are not an error and are trimmed.
	m, err := FromWords([]uint64{0b1010, 0, 0, 0})
	if err != nil || m.String() != "1,3" || len(m.Words(nil)) != 1 {
		t.Errorf("FromWords = %q (%d words), %v; want \"1,3\" in 1 word", m, len(m.Words(nil)), err)
	}
	if m.Contains(-1) || m.Contains(1<<20) || !m.Contains(3) {
		t.Error("Contains is wrong at the edges")
	}
}

// TestAgainstCPUSet checks every operation against k8s.io/utils/cpuset on
// random sets spread over a few words.
func TestAgainstCPUSet(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	random := func() cpuset.CPUSet {
		var ids []int
		hi := rng.Intn(300) + 1
		for i := rng.Intn(hi); i > 0; i-- {
			ids = append(ids, rng.Intn(hi))
		}
		return cpuset.New(ids...)
	}
	for i := 0; i < 2000; i++ {
		a, b := random(), random()
		ma, err := FromCPUSet(a)
		if err != nil {
			t.Fatal(err)
		}
		mb, _ := FromCPUSet(b)
		check := func(op string, got Mask, want cpuset.CPUSet) {
			t.Helper()
			if got.String() != want.String() || got.Size() != want.Size() || !slices.Equal(got.List(), want.List()) ||
				!got.CPUSet().Equals(want) {
				t.Fatalf("%s of %s and %s: got %s, want %s", op, a, b, got, want)
			}
			if back, _ := FromCPUSet(want); !back.Equals(got) {
				t.Fatalf("%s of %s and %s: %s does not Equal the same set built anew", op, a, b, got)
			}
		}
		check("identity", ma, a)
		check("union", ma.Union(mb), a.Union(b))
		check("intersection", ma.Intersection(mb), a.Intersection(b))
		check("difference", ma.Difference(mb), a.Difference(b))
		if ma.Equals(mb) != a.Equals(b) || ma.IsSubsetOf(mb) != a.IsSubsetOf(b) || ma.IsEmpty() != a.IsEmpty() {
			t.Fatalf("predicates of %s and %s disagree with cpuset", a, b)
		}
		for id := -1; id < 310; id++ {
			if ma.Contains(id) != a.Contains(id) {
				t.Fatalf("Contains(%d) of %s", id, a)
			}
		}
	}
}

func TestImmutable(t *testing.T) {
	a := mustNew(t, 1, 2, 3, 70)
	b := mustNew(t, 2, 70)
	_ = a.Union(b)
	_ = a.Difference(b)
	_ = a.Intersection(b)
	w := a.Words(nil)
	w[0] = 0
	if a.String() != "1-3,70" || b.String() != "2,70" {
		t.Fatalf("operands changed: %s, %s", a, b)
	}
	var zero Mask
	if !zero.IsEmpty() || zero.Size() != 0 || zero.String() != "" || !zero.Equals(mustNew(t)) || !zero.IsSubsetOf(a) {
		t.Fatal("the zero Mask is not the empty set")
	}
	if !a.Difference(a).Equals(zero) {
		t.Fatal("a − a is not equal to the empty set")
	}
}
