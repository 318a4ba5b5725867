package topology

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// MaxCPUID is the largest logical CPU id ParseList accepts. The kernel's
// NR_CPUS tops out at 8192; the bound is generous but keeps a corrupt range
// such as "0-4000000000" from allocating a set of billions of CPUs (which
// cpuset.Parse would try to do).
const MaxCPUID = 65535

// ErrSyntax is wrapped by every ParseList error.
var ErrSyntax = errors.New("invalid syntax")

// ParseList parses the kernel's CPU/node list format ("0-3,8,10-11", the
// content of online, cpulist, thread_siblings_list, shared_cpu_list,
// isolated). Surrounding white space is ignored and an empty list is the
// empty set. Ids above MaxCPUID, reversed ranges and any other text are
// errors wrapping ErrSyntax.
func ParseList(s string) (cpuset.CPUSet, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return cpuset.New(), nil
	}
	type span struct{ lo, hi int }
	var spans []span
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := parseID(lo)
		if err != nil {
			return cpuset.CPUSet{}, fmt.Errorf("list %q: element %q: %w", s, part, err)
		}
		last := first
		if isRange {
			if last, err = parseID(hi); err != nil {
				return cpuset.CPUSet{}, fmt.Errorf("list %q: element %q: %w", s, part, err)
			}
			if last < first {
				return cpuset.CPUSet{}, fmt.Errorf("list %q: reversed range %q: %w", s, part, ErrSyntax)
			}
		}
		spans = append(spans, span{first, last})
	}
	// Merge overlapping ranges before expanding them, so a list repeating
	// "0-65535" thousands of times costs no more than one.
	sort.Slice(spans, func(i, j int) bool { return spans[i].lo < spans[j].lo })
	var ids []int
	next := 0 // lowest id not yet emitted
	for _, sp := range spans {
		for id := max(sp.lo, next); id <= sp.hi; id++ {
			ids = append(ids, id)
		}
		next = max(next, sp.hi+1)
	}
	return cpuset.New(ids...), nil
}

// parseID parses one decimal id of a list, 0..MaxCPUID, digits only (no
// sign, no spaces inside the list).
func parseID(s string) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("empty id: %w", ErrSyntax)
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("id %q is not a decimal number: %w", s, ErrSyntax)
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > MaxCPUID {
		return 0, fmt.Errorf("id %q is out of range 0-%d: %w", s, MaxCPUID, ErrSyntax)
	}
	return n, nil
}
