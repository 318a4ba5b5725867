// Package cpumask is an immutable set of logical CPU ids kept as a bitmap.
//
// The shared pool changes on every exclusive allocation and holds most of
// the machine's CPUs: as a map-based cpuset.CPUSet, converting it to and
// from the allocator's bitsets was four fifths of a decision on a 256-CPU
// machine. A Mask of 256 CPUs is four words; converting it is a copy.
//
// The zero Mask is the empty set. Every operation returns a new Mask and
// leaves its operands untouched, so Masks may be shared between goroutines
// and states without copying.
package cpumask

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// MaxID is the largest CPU id a Mask holds (the same bound as
// topology.MaxCPUID): at most 1024 words.
const MaxID = 65535

// Mask is a set of CPU ids. Its words never have trailing zero words, so
// two equal sets have equal word slices.
type Mask struct {
	w []uint64
}

// IDError names a CPU id a Mask cannot hold.
type IDError struct{ ID int }

func (e *IDError) Error() string {
	return fmt.Sprintf("cpumask: CPU id %d outside 0-%d", e.ID, MaxID)
}

// New returns the set of ids; an id outside 0..MaxID is an *IDError.
func New(ids ...int) (Mask, error) {
	hi := -1
	for _, id := range ids {
		if id < 0 || id > MaxID {
			return Mask{}, &IDError{ID: id}
		}
		if id > hi {
			hi = id
		}
	}
	if hi < 0 {
		return Mask{}, nil
	}
	w := make([]uint64, hi>>6+1)
	for _, id := range ids {
		w[id>>6] |= 1 << uint(id&63)
	}
	return Mask{w: w}, nil
}

// FromCPUSet converts a cpuset.CPUSet; an id outside 0..MaxID is an
// *IDError.
func FromCPUSet(s cpuset.CPUSet) (Mask, error) { return New(s.UnsortedList()...) }

// FromWords returns the set whose id i is bit i%64 of words[i/64]. The
// words are copied; a slice longer than MaxID allows is an *IDError naming
// its highest id.
func FromWords(words []uint64) (Mask, error) {
	n := len(words)
	for n > 0 && words[n-1] == 0 {
		n--
	}
	if n > MaxID>>6+1 {
		return Mask{}, &IDError{ID: (n-1)<<6 + 63 - bits.LeadingZeros64(words[n-1])}
	}
	if n == 0 {
		return Mask{}, nil
	}
	return Mask{w: append([]uint64(nil), words[:n]...)}, nil
}

// own wraps freshly computed words (no copy), trimming trailing zeros.
func own(w []uint64) Mask {
	n := len(w)
	for n > 0 && w[n-1] == 0 {
		n--
	}
	if n == 0 {
		return Mask{}
	}
	return Mask{w: w[:n:n]}
}

// Words appends the bitmap's words to dst (id i is bit i%64 of word i/64)
// and returns the extended slice.
func (m Mask) Words(dst []uint64) []uint64 { return append(dst, m.w...) }

// Word is word i of the bitmap (ids 64i..64i+63), 0 past its end.
func (m Mask) Word(i int) uint64 {
	if i < 0 || i >= len(m.w) {
		return 0
	}
	return m.w[i]
}

// Size is the number of CPUs.
func (m Mask) Size() int {
	n := 0
	for _, w := range m.w {
		n += bits.OnesCount64(w)
	}
	return n
}

// IsEmpty reports whether the set has no CPU.
func (m Mask) IsEmpty() bool { return len(m.w) == 0 }

// Contains reports whether id is in the set.
func (m Mask) Contains(id int) bool {
	return id >= 0 && id>>6 < len(m.w) && m.w[id>>6]&(1<<uint(id&63)) != 0
}

// Equals reports whether both sets hold the same CPUs.
func (m Mask) Equals(o Mask) bool {
	if len(m.w) != len(o.w) {
		return false
	}
	for i, w := range m.w {
		if w != o.w[i] {
			return false
		}
	}
	return true
}

// IsSubsetOf reports whether every CPU of m is in o.
func (m Mask) IsSubsetOf(o Mask) bool {
	for i, w := range m.w {
		if i >= len(o.w) {
			if w != 0 {
				return false
			}
			continue
		}
		if w&^o.w[i] != 0 {
			return false
		}
	}
	return true
}

// Union is m ∪ o.
func (m Mask) Union(o Mask) Mask {
	a, b := m.w, o.w
	if len(a) < len(b) {
		a, b = b, a
	}
	out := append([]uint64(nil), a...)
	for i, w := range b {
		out[i] |= w
	}
	return own(out)
}

// Intersection is m ∩ o.
func (m Mask) Intersection(o Mask) Mask {
	n := min(len(m.w), len(o.w))
	out := make([]uint64, n)
	for i := range out {
		out[i] = m.w[i] & o.w[i]
	}
	return own(out)
}

// Difference is m − o.
func (m Mask) Difference(o Mask) Mask {
	out := append([]uint64(nil), m.w...)
	for i := range out {
		if i < len(o.w) {
			out[i] &^= o.w[i]
		}
	}
	return own(out)
}

// ForEach calls f for every CPU id, ascending.
func (m Mask) ForEach(f func(id int)) {
	for wi, w := range m.w {
		for w != 0 {
			f(wi<<6 + bits.TrailingZeros64(w))
			w &= w - 1
		}
	}
}

// List returns the CPU ids, ascending.
func (m Mask) List() []int {
	out := make([]int, 0, m.Size())
	m.ForEach(func(id int) { out = append(out, id) })
	return out
}

// CPUSet converts to a cpuset.CPUSet.
func (m Mask) CPUSet() cpuset.CPUSet { return cpuset.New(m.List()...) }

// String is the kernel's list format ("0-3,8,10-11"), as cpuset.CPUSet
// prints it; "" for the empty set.
func (m Mask) String() string {
	var b strings.Builder
	start, prev := -2, -2
	flush := func() {
		if start < 0 {
			return
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(start))
		if prev > start {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(prev))
		}
	}
	m.ForEach(func(id int) {
		if id == prev+1 {
			prev = id
			return
		}
		flush()
		start, prev = id, id
	})
	flush()
	return b.String()
}
