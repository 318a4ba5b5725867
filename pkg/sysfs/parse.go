package sysfs

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
// such as "0-4000000000" from allocating a set of billions of CPUs.
const MaxCPUID = 65535

// MaxNUMANodes is one more than the largest NUMA node id Read accepts:
// hints.Mask holds 64 nodes (bit i = node i).
const MaxNUMANodes = 64

// ErrSyntax is wrapped by every parse error, so callers can tell unparsable
// content from a missing file with errors.Is.
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

// ParseInt parses a file holding one decimal integer (core_id,
// physical_package_id, die_id, cache id, level), ignoring surrounding white
// space. Values outside the int32 range are errors: no sysfs id is that big,
// and the bound keeps later arithmetic from overflowing.
func ParseInt(s string) (int, error) {
	t := strings.TrimSpace(s)
	n, err := strconv.ParseInt(t, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%q is not a 32-bit decimal integer: %w", t, ErrSyntax)
	}
	return int(n), nil
}

// ParseDistances parses a NUMA distance row (node*/distance: "10 21 21"),
// one non-negative distance per node. An empty row is an error.
func ParseDistances(s string) ([]int, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return nil, fmt.Errorf("empty distance row: %w", ErrSyntax)
	}
	out := make([]int, 0, len(fields))
	for _, f := range fields {
		d, err := strconv.ParseInt(f, 10, 32)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("distance %q is not a non-negative integer: %w", f, ErrSyntax)
		}
		out = append(out, int(d))
	}
	return out, nil
}

// ParseMemTotal finds the MemTotal line of a node*/meminfo file
// ("Node 0 MemTotal:       32768 kB") and returns the size in bytes. The
// line must name node; the unit must be kB.
func ParseMemTotal(s string, node int) (uint64, error) {
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[2] != "MemTotal:" {
			continue
		}
		if len(f) != 5 || f[0] != "Node" || f[1] != strconv.Itoa(node) || f[4] != "kB" {
			return 0, fmt.Errorf("MemTotal line %q: want \"Node %d MemTotal: <n> kB\": %w", line, node, ErrSyntax)
		}
		kb, err := strconv.ParseUint(f[3], 10, 64)
		if err != nil || kb > (1<<64-1)/1024 {
			return 0, fmt.Errorf("MemTotal line %q: size %q is not a kB count: %w", line, f[3], ErrSyntax)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("no \"Node %d MemTotal:\" line: %w", node, ErrSyntax)
}
