package request

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
)

// memoryOf is the memory manager's request from what NRI reports of a
// cgroup: the memory limit and the hugepage limits (in a Guaranteed pod
// requests equal limits). The kubelet writes a hugetlb limit for every
// page size of the machine, 0 for the sizes not requested: those are
// left out. A page size that does not parse (the runtimes write the
// kernel's hugetlb names only) is left out too.
func memoryOf(r *api.LinuxResources) memorymanager.Request {
	out := memorymanager.Request{}
	if r == nil {
		return out
	}
	if lim := r.GetMemory().GetLimit().GetValue(); lim > 0 {
		out[memorymanager.Memory] = uint64(lim)
	}
	for _, h := range r.GetHugepageLimits() {
		if h.GetLimit() == 0 {
			continue
		}
		size, err := pageSize(h.GetPageSize())
		if err != nil {
			continue
		}
		out[memorymanager.HugepagesResource(size)] += h.GetLimit()
	}
	return out
}

// pageSize reads a hugetlb page size as the runtimes spell it ("2MB",
// "1GB", "64KB": the kernel's hugetlb cgroup names, binary units).
func pageSize(s string) (uint64, error) {
	units := []struct {
		suffix string
		shift  uint
	}{{"KB", 10}, {"MB", 20}, {"GB", 30}, {"TB", 40}}
	for _, u := range units {
		digits, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(digits, 10, 32)
		if err != nil || n == 0 || n > 1<<(63-u.shift) {
			break
		}
		return n << u.shift, nil
	}
	return 0, fmt.Errorf("hugepage size %q: want <n>KB, <n>MB or <n>GB", s)
}
