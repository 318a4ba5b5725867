package sysfs_test

import (
	"maps"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// The fixtures' nodes: 16384 MiB each; ht-2s-6c holds 512 pages of 2 MiB
// and one of 1 GiB per node, ht-2s-4numa-80 256 pages of 2 MiB.
func TestReadMemoryFixtures(t *testing.T) {
	const gib = uint64(1) << 30
	two := map[uint64]uint64{2 << 20: 512, gib: 1}
	four := map[uint64]uint64{2 << 20: 256}
	for _, tc := range []struct {
		name string
		want []sysfs.NodeMemory
	}{
		{"ht-2s-6c", []sysfs.NodeMemory{{0, 16 * gib, two}, {1, 16 * gib, two}}},
		{"ht-2s-4numa-80", []sysfs.NodeMemory{{0, 16 * gib, four}, {1, 16 * gib, four}, {2, 16 * gib, four}, {3, 16 * gib, four}}},
		{"ht-1s-4c", []sysfs.NodeMemory{{0, 16 * gib, map[uint64]uint64{}}}},
	} {
		got, err := sysfs.ReadMemoryFS(mapFS(files(t, tc.name)))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// On disk, through the root path, errors name the file under the root.
func TestReadMemoryDisk(t *testing.T) {
	root := t.TempDir()
	if err := sysfstest.WriteNamed(root, "ht-2s-6c"); err != nil {
		t.Fatal(err)
	}
	got, err := sysfs.ReadMemory(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].Hugepages[1<<30] != 1 {
		t.Fatalf("got %+v", got)
	}
	if _, err := sysfs.ReadMemory(filepath.Join(root, "missing")); err == nil || !strings.Contains(err.Error(), filepath.Join(root, "missing", "devices/system/node")) {
		t.Fatalf("missing root: %v", err)
	}
}

func TestReadMemoryErrors(t *testing.T) {
	base := files(t, "ht-2s-6c")
	pool := "devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages"
	for _, tc := range []struct {
		name   string
		edit   func(map[string]string)
		substr string
	}{
		{"bad count", func(f map[string]string) { f[pool] = "many\n" }, pool + ": not a page count"},
		{"negative count", func(f map[string]string) { f[pool] = "-1\n" }, pool},
		{"no count file", func(f map[string]string) {
			delete(f, pool)
			f["devices/system/node/node1/hugepages/hugepages-2048kB/free_hugepages"] = "0\n"
		}, pool},
		{"bad dir name", func(f map[string]string) {
			f["devices/system/node/node0/hugepages/hugepages-2MB/nr_hugepages"] = "1\n"
		}, "node0/hugepages/hugepages-2MB: hugepage directory"},
		{"bad meminfo", func(f map[string]string) {
			f["devices/system/node/node0/meminfo"] = "Node 0 MemFree: 1 kB\n"
		}, "devices/system/node/node0/meminfo"},
		{"no node dir", func(f map[string]string) {
			for p := range f {
				if strings.HasPrefix(p, "devices/system/node/") {
					delete(f, p)
				}
			}
		}, "devices/system/node: no NUMA nodes"},
	} {
		f := maps.Clone(base)
		tc.edit(f)
		_, err := sysfs.ReadMemoryFS(mapFS(f))
		if err == nil || !strings.Contains(err.Error(), tc.substr) {
			t.Errorf("%s: error %v, want it to contain %q", tc.name, err, tc.substr)
		}
	}
}

// A node without hugepages directory has no pools; one with an empty
// pool has a zero count.
func TestReadMemoryNoPools(t *testing.T) {
	f := files(t, "ht-2s-6c")
	for p := range f {
		if strings.Contains(p, "node0/hugepages/") {
			delete(f, p)
		}
	}
	f["devices/system/node/node1/hugepages/hugepages-1048576kB/nr_hugepages"] = "0\n"
	got, err := sysfs.ReadMemoryFS(mapFS(f))
	if err != nil {
		t.Fatal(err)
	}
	if len(got[0].Hugepages) != 0 {
		t.Errorf("node 0 pools %v, want none", got[0].Hugepages)
	}
	if want := map[uint64]uint64{2 << 20: 512, 1 << 30: 0}; !reflect.DeepEqual(got[1].Hugepages, want) {
		t.Errorf("node 1 pools %v, want %v", got[1].Hugepages, want)
	}
}

func TestParseHugepageDir(t *testing.T) {
	for name, want := range map[string]uint64{"hugepages-2048kB": 2 << 20, "hugepages-1048576kB": 1 << 30, "hugepages-64kB": 64 << 10} {
		got, ok, err := sysfs.ParseHugepageDir(name)
		if err != nil || !ok || got != want {
			t.Errorf("%s: %d %v %v, want %d", name, got, ok, err, want)
		}
	}
	if _, ok, err := sysfs.ParseHugepageDir("other"); ok || err != nil {
		t.Errorf("other: %v %v", ok, err)
	}
	for _, bad := range []string{"hugepages-kB", "hugepages-0kB", "hugepages-2048", "hugepages-x2kB"} {
		if _, _, err := sysfs.ParseHugepageDir(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
