package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// KeyReservedMemory is the kubelet's reservedMemory: per NUMA node and
// memory resource, what containers may not take under
// memory_manager_policy Static.
const KeyReservedMemory = "reserved_memory"

// ReservedMemory is one [[reserved_memory]] entry, the kubelet's
// reservedMemory item line by line: numaNode is numa_node, limits keep
// their resource names ("memory", "hugepages-2Mi", "hugepages-1Gi") and
// Kubernetes quantities ("1Gi", "512Mi").
type ReservedMemory struct {
	NUMANode int               `toml:"numa_node"`
	Limits   map[string]string `toml:"limits"`
}

// rawReservedMemory is an entry as decoded: a limit may also be a TOML
// integer (bytes).
type rawReservedMemory struct {
	NUMANode *int64         `toml:"numa_node"`
	Limits   map[string]any `toml:"limits"`
}

// entryKey is the key of the i-th [[reserved_memory]] entry, as errors and
// keyLines name it.
func entryKey(i int) string { return KeyReservedMemory + "[" + strconv.Itoa(i) + "]" }

// reservedMemory converts the decoded entries; bad reports each problem.
func reservedMemory(in []rawReservedMemory, bad func(key, value, format string, args ...any)) []ReservedMemory {
	out := make([]ReservedMemory, 0, len(in))
	for i, e := range in {
		key := entryKey(i)
		r := ReservedMemory{Limits: map[string]string{}}
		switch {
		case e.NUMANode == nil:
			bad(key, "", "numa_node is missing")
		case *e.NUMANode < 0 || *e.NUMANode >= 64:
			bad(key+".numa_node", strconv.FormatInt(*e.NUMANode, 10), "want a NUMA node id 0-63")
		default:
			r.NUMANode = int(*e.NUMANode)
		}
		if len(e.Limits) == 0 {
			bad(key, "", "limits is missing or empty: want e.g. limits = { memory = \"1Gi\" }")
		}
		for _, name := range slices.Sorted(func(yield func(string) bool) {
			for k := range e.Limits {
				if !yield(k) {
					return
				}
			}
		}) {
			switch v := e.Limits[name].(type) {
			case string:
				r.Limits[name] = v
			case int64:
				r.Limits[name] = strconv.FormatInt(v, 10)
			default:
				bad(key+".limits."+name, fmt.Sprint(v), "want a quantity string like \"1Gi\" or a byte count")
			}
		}
		out = append(out, r)
	}
	return out
}

// parseQuantity reads a Kubernetes quantity of bytes.
func parseQuantity(s string) (uint64, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, fmt.Errorf("want a Kubernetes quantity like \"1Gi\" or \"512Mi\"")
	}
	if q.Sign() < 0 {
		return 0, fmt.Errorf("want a quantity >= 0")
	}
	v, ok := q.AsInt64()
	if !ok || v < 0 {
		return 0, fmt.Errorf("not a whole number of bytes below 2^63")
	}
	return uint64(v), nil
}

// reservedMemoryProblems applies the kubelet's checks of reservedMemory
// (memorymanager.ValidateReservations: resource names, no zero, no
// duplicate) and its Static policy's start-up check that some memory is
// reserved; the check against the machine's nodes is the engine's.
func (c Config) reservedMemoryProblems(bad func(key, value, format string, args ...any)) {
	var res []memorymanager.Reservation
	for i, e := range c.ReservedMemory {
		key := entryKey(i)
		r := memorymanager.Reservation{NUMANode: e.NUMANode, Limits: map[memorymanager.Resource]uint64{}}
		for name, v := range e.Limits {
			n, err := parseQuantity(v)
			if err != nil {
				bad(key+".limits."+name, v, "%v", err)
				continue
			}
			r.Limits[memorymanager.Resource(name)] = n
		}
		for _, err := range memorymanager.ValidateReservations([]memorymanager.Reservation{r}) {
			bad(key, "", "%v", err)
		}
		// Duplicates across entries: the kubelet's check over the list.
		for j, prev := range res {
			if prev.NUMANode != r.NUMANode {
				continue
			}
			for name := range r.Limits {
				if _, dup := prev.Limits[name]; dup {
					bad(key, "", "NUMA node %d resource %q is also reserved by %s", r.NUMANode, name, entryKey(j))
				}
			}
		}
		res = append(res, r)
	}
	if c.MemoryManagerPolicy != policy.MemoryPolicyStatic {
		return
	}
	var total uint64
	for _, r := range res {
		total += r.Limits[memorymanager.Memory]
	}
	if total == 0 {
		bad(KeyMemoryManagerPolicy, c.MemoryManagerPolicy, "Static needs reserved memory (the kubelet: \"you should specify the system reserved memory\"): "+
			"add [[reserved_memory]] entries with numa_node and limits = { memory = \"...\" }, as much in total as the kubelet's kube-reserved + system-reserved + eviction threshold of memory")
	}
}

// Reservations returns reserved_memory in the memory manager's form;
// the values were checked at load.
func (c Config) Reservations() []memorymanager.Reservation {
	out := make([]memorymanager.Reservation, 0, len(c.ReservedMemory))
	for _, e := range c.ReservedMemory {
		r := memorymanager.Reservation{NUMANode: e.NUMANode, Limits: map[memorymanager.Resource]uint64{}}
		for name, v := range e.Limits {
			n, _ := parseQuantity(v)
			r.Limits[memorymanager.Resource(name)] = n
		}
		out = append(out, r)
	}
	return out
}

// reservedMemoryString is reserved_memory in Summary's one-line form.
func reservedMemoryString(rs []ReservedMemory) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = strconv.Itoa(r.NUMANode) + ":" + mapString(r.Limits)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// lineOf is the line of key, else of the nearest enclosing key that has
// one (an inline table's entries, and the entries of an inline array of
// tables, have no line of their own).
func (c Config) lineOf(key string) int {
	for {
		if n, ok := c.lines[key]; ok {
			return n
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			return 0
		}
		key = key[:i]
	}
}
