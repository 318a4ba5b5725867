package request

import (
	"reflect"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
)

const gib = int64(1) << 30

// The memory request from what NRI reports: the memory limit and the
// hugetlb limits the kubelet writes (0 for page sizes not requested).
func TestMemoryOf(t *testing.T) {
	res := &api.LinuxResources{
		Memory: &api.LinuxMemory{Limit: &api.OptionalInt64{Value: 4 * gib}},
		HugepageLimits: []*api.HugepageLimit{
			{PageSize: "2MB", Limit: 512 << 20}, {PageSize: "1GB", Limit: 0}, {PageSize: "64KB", Limit: 1 << 20},
			{PageSize: "2mb", Limit: 1}, {PageSize: "99999999999TB", Limit: 1}, {PageSize: "16777216TB", Limit: 1},
		},
	}
	want := memorymanager.Request{"memory": 4 << 30, "hugepages-2Mi": 512 << 20, "hugepages-64Ki": 1 << 20}
	if got := memoryOf(res); !reflect.DeepEqual(got, want) {
		t.Errorf("memoryOf = %v, want %v", got, want)
	}
	if got := memoryOf(nil); len(got) != 0 {
		t.Errorf("memoryOf(nil) = %v", got)
	}
	for in, want := range map[string]uint64{"2MB": 2 << 20, "1GB": 1 << 30, "64KB": 64 << 10, "8388607TB": 8388607 << 40} {
		if got, err := pageSize(in); err != nil || got != want {
			t.Errorf("pageSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}
