package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// Host is this machine's CPU placement facts, read from sysfs, to translate
// a container's CPUs into NUMA nodes and L3 groups. It reads sysfs on its
// own rather than through pkg/sysfs, so the checks do not share the plugin's
// reading of the machine. L3 ids are sysfs cache ids (no kubelet uncore
// fallback): the demo shows the hardware.
type Host struct {
	CPUs        cpuset.CPUSet
	MemoryNodes cpuset.CPUSet // NUMA nodes with memory
	numa        map[int]int   // cpu -> NUMA node
	l3          map[int]int   // cpu -> L3 id (lowest CPU sharing it when sysfs has no id)
}

// ReadHost reads root (the directory playing /sys).
func ReadHost(root string) (*Host, error) {
	h := &Host{numa: map[int]int{}, l3: map[int]int{}}
	online, err := readList(filepath.Join(root, "devices/system/cpu/online"))
	if err != nil {
		return nil, err
	}
	h.CPUs = online
	nodes, _ := filepath.Glob(filepath.Join(root, "devices/system/node/node[0-9]*"))
	var mem []int
	for _, d := range nodes {
		id, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "node"))
		if err != nil {
			continue
		}
		cpus, err := readList(filepath.Join(d, "cpulist"))
		if err != nil {
			return nil, err
		}
		for _, c := range cpus.List() {
			h.numa[c] = id
		}
		if nodeHasMemory(filepath.Join(d, "meminfo")) {
			mem = append(mem, id)
		}
	}
	if len(nodes) == 0 {
		mem = []int{0}
	}
	h.MemoryNodes = cpuset.New(mem...)
	for _, c := range online.List() {
		if _, ok := h.numa[c]; !ok {
			h.numa[c] = 0 // no NUMA directory: a single-node machine
		}
		h.l3[c] = -1
		idx, _ := filepath.Glob(filepath.Join(root, fmt.Sprintf("devices/system/cpu/cpu%d/cache/index[0-9]*", c)))
		for _, d := range idx {
			lvl, err := os.ReadFile(filepath.Join(d, "level"))
			if err != nil || strings.TrimSpace(string(lvl)) != "3" {
				continue
			}
			if b, err := os.ReadFile(filepath.Join(d, "id")); err == nil {
				if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
					h.l3[c] = v
					break
				}
			}
			if s, err := readList(filepath.Join(d, "shared_cpu_list")); err == nil && s.Size() > 0 {
				h.l3[c] = s.List()[0]
			}
		}
	}
	return h, nil
}

// nodeHasMemory reports whether a node's meminfo ("Node 0 MemTotal: 123 kB")
// shows memory; an unreadable file counts as memory, the common case.
func nodeHasMemory(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return true
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 4 && f[2] == "MemTotal:" {
			return f[3] != "0"
		}
	}
	return true
}

func readList(path string) (cpuset.CPUSet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return cpuset.CPUSet{}, err
	}
	s, err := cpuset.Parse(strings.TrimSpace(string(b)))
	if err != nil {
		return cpuset.CPUSet{}, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// NUMANodes returns the NUMA nodes of cpus.
func (h *Host) NUMANodes(cpus cpuset.CPUSet) cpuset.CPUSet {
	var ids []int
	for _, c := range cpus.List() {
		ids = append(ids, h.numa[c])
	}
	return cpuset.New(ids...)
}

// L3Groups returns the L3 cache ids of cpus (-1 for a CPU without an L3).
func (h *Host) L3Groups(cpus cpuset.CPUSet) []int {
	seen := map[int]bool{}
	var ids []int
	for _, c := range cpus.List() {
		if id := h.l3[c]; !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids
}
