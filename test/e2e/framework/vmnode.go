package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/utils/cpuset"
)

// The machine of the VM test node (scripts/e2e-vm.sh), as its guest kernel
// shows it in sysfs: 8 CPUs in 2 sockets x 2 cores x 2 threads, sibling
// pairs 0-1 2-3 4-5 6-7, one L3 per socket (0-3, 4-7), NUMA node0 = 0-3 and
// node1 = 4-7 at distance 20.
var (
	VMNodeCPUs     = cpuset.New(0, 1, 2, 3, 4, 5, 6, 7)
	VMNodeSiblings = []string{"0-1", "0-1", "2-3", "2-3", "4-5", "4-5", "6-7", "6-7"}
	VMNodeNUMA     = map[int]string{0: "0-3", 1: "4-7"}
)

// VMNodeMismatch says how the machine of sysfs root sysRoot (whose CPUs
// h holds) differs from the VM test node's, "" when it is that machine.
// It reads sysfs on its own, so specs can skip with the reason.
func VMNodeMismatch(h *Host, sysRoot string) string {
	if !h.CPUs.Equals(VMNodeCPUs) {
		return fmt.Sprintf("this machine has CPUs %s, the VM test node %s", h.CPUs, VMNodeCPUs)
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(sysRoot, p))
		if err != nil {
			return "unreadable"
		}
		return strings.TrimSpace(string(b))
	}
	for c, want := range VMNodeSiblings {
		if got := read(fmt.Sprintf("devices/system/cpu/cpu%d/topology/thread_siblings_list", c)); got != want {
			return fmt.Sprintf("CPU %d's SMT siblings are %s, on the VM test node %s", c, got, want)
		}
		l3 := VMNodeNUMA[c/4]
		if got := read(fmt.Sprintf("devices/system/cpu/cpu%d/cache/index3/shared_cpu_list", c)); got != l3 {
			return fmt.Sprintf("CPU %d shares its L3 (cache/index3) with %s, on the VM test node %s", c, got, l3)
		}
	}
	for n, want := range VMNodeNUMA {
		if got := read(fmt.Sprintf("devices/system/node/node%d/cpulist", n)); got != want {
			return fmt.Sprintf("NUMA node %d has CPUs %s, on the VM test node %s", n, got, want)
		}
	}
	if got := read("devices/system/node/node0/distance"); got != "10 20" {
		return fmt.Sprintf("NUMA node 0's distances are %q, on the VM test node \"10 20\"", got)
	}
	return ""
}
