package sysfs

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// MaxCPUID is the largest logical CPU id ParseList accepts.
const MaxCPUID = topology.MaxCPUID

// MaxNUMANodes is one more than the largest NUMA node id Read accepts:
// hints.Mask holds 64 nodes (bit i = node i).
const MaxNUMANodes = 64

// ErrSyntax is wrapped by every parse error, so callers can tell unparsable
// content from a missing file with errors.Is. It is topology.ErrSyntax, so
// list errors from either package match.
var ErrSyntax = topology.ErrSyntax

// ParseList parses the kernel's CPU/node list format; see
// topology.ParseList, which holds the bounded parser so the pure packages
// can use it too.
func ParseList(s string) (cpuset.CPUSet, error) { return topology.ParseList(s) }

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
