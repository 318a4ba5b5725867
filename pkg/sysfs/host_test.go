package sysfs_test

import (
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
)

// TestReadHost reads the real /sys of the machine running the tests.
func TestReadHost(t *testing.T) {
	if _, err := os.Stat("/sys/devices/system/cpu"); err != nil {
		t.Skipf("no /sys/devices/system/cpu on this host: %v", err)
	}
	topo, err := sysfs.Read("/sys")
	if err != nil {
		t.Fatalf("Read(/sys): %v", err)
	}
	t.Logf("host: %d CPUs, %d cores, %d sockets, %d NUMA nodes, %d L3 groups",
		topo.NumCPUs(), topo.NumCores(), topo.NumSockets(), topo.NumNUMANodes(), topo.NumL3())

	// runtime.NumCPU counts the CPUs in this process's affinity mask, so it
	// equals the online count exactly when the mask holds every online CPU.
	allowed := allowedCPUs(t)
	if allowed == topo.CPUs().String() {
		if runtime.NumCPU() != topo.NumCPUs() {
			t.Errorf("NumCPUs() = %d, runtime.NumCPU() = %d with full affinity %s", topo.NumCPUs(), runtime.NumCPU(), allowed)
		}
	} else {
		t.Logf("affinity %q is not every online CPU %q: only checking NumCPU <= NumCPUs", allowed, topo.CPUs())
		if runtime.NumCPU() > topo.NumCPUs() {
			t.Errorf("runtime.NumCPU() = %d > NumCPUs() = %d", runtime.NumCPU(), topo.NumCPUs())
		}
	}
	if topo.NumCores() < 1 || topo.NumCores() > topo.NumCPUs() || topo.NumSockets() > topo.NumCores() ||
		topo.NumNUMANodes() < 1 || topo.NumL3() < 1 {
		t.Errorf("implausible counts: %d CPUs, %d cores, %d sockets, %d nodes, %d L3",
			topo.NumCPUs(), topo.NumCores(), topo.NumSockets(), topo.NumNUMANodes(), topo.NumL3())
	}
	for _, c := range topo.Details() {
		sib := topo.Siblings(c.CPU)
		if !sib.Contains(c.CPU) || sib.List()[0] != c.Core {
			t.Errorf("cpu %d: core %d, siblings %s", c.CPU, c.Core, sib)
		}
	}
	for _, n := range topo.NUMANodes() {
		if d, ok := topo.Distance(n, n); ok && d != 10 {
			t.Errorf("Distance(%d,%d) = %d, want 10", n, n, d)
		}
	}
}

// allowedCPUs is Cpus_allowed_list of this process, as a canonical list.
func allowedCPUs(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Logf("no /proc/self/status: %v", err)
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			set, err := sysfs.ParseList(v)
			if err != nil {
				t.Fatalf("Cpus_allowed_list %q: %v", v, err)
			}
			return set.String()
		}
	}
	return ""
}
