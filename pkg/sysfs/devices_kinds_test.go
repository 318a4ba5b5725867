package sysfs_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// deviceRoot writes sysfstest's device tree (PCI functions on NUMA nodes
// 0 and 1, IOMMU groups, VFIO group devices) into a fresh /sys root.
func deviceRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := sysfstest.WriteDevices(root); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestDeviceNodesPerKind: each device kind of the fixture, with the nodes
// its doc comment gives it.
func TestDeviceNodesPerKind(t *testing.T) {
	root := deviceRoot(t)
	char := func(major, minor int64) sysfs.Device { return sysfs.Device{Kind: "char", Major: major, Minor: minor} }
	pci := func(addr string) sysfs.Device { return sysfs.Device{Kind: "pci", PCI: addr} }
	cases := []struct {
		name string
		dev  sysfs.Device
		want []int
	}{
		{"VFIO group 40, VF on node 0", char(242, 0), []int{0}},
		{"VFIO group 90, VF on node 1", char(242, 1), []int{1}},
		{"VFIO group 91, two VFs on node 1", char(242, 2), []int{1}},
		{"VFIO group 7, numa_node -1", char(242, 3), nil},
		{"VFIO group 12, functions on both nodes", char(242, 4), []int{0, 1}},
		{"VFIO container /dev/vfio/vfio", char(10, 196), nil},
		{"vfio cdev under its PCI function", char(237, 0), []int{1}},
		{"DRM render node, node 0", char(226, 128), []int{0}},
		{"DRM render node, node 1", char(226, 129), []int{1}},
		{"accel device", char(261, 0), []int{0}},
		{"RDMA uverbs", char(231, 192), []int{1}},
		{"nvidia0: no sysfs entry", char(195, 0), nil},
		{"block device with the group's numbers", sysfs.Device{Kind: "block", Major: 242, Minor: 1}, nil},
		{"SR-IOV VF by address, node 0", pci("0000:3b:02.1"), []int{0}},
		{"SR-IOV VF by address, node 1", pci("0000:af:02.2"), []int{1}},
		{"upper-case address", pci("0000:AF:02.0"), []int{1}},
		{"function with numa_node -1", pci("0000:00:1f.0"), nil},
		{"address sysfs does not have", pci("0000:99:00.0"), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sysfs.DeviceNodes(root, tc.dev)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("DeviceNodes(%s) = %v, want %v", tc.dev, got, tc.want)
			}
		})
	}
}

// TestDeviceLocalitiesUnion: a DPDK pod's group 40 (node 0) and an SR-IOV
// VF by address on node 1 need both nodes; the VFIO container device
// adds none.
func TestDeviceLocalitiesUnion(t *testing.T) {
	root := deviceRoot(t)
	devs := []sysfs.Device{
		{Kind: "char", Major: 10, Minor: 196},
		{Kind: "char", Major: 242, Minor: 0},
		{Kind: "pci", PCI: "0000:af:02.0"},
	}
	locs, err := sysfs.DeviceLocalities(root, devs)
	if err != nil {
		t.Fatal(err)
	}
	if len(locs) != 3 || locs[0].Nodes != nil || !slices.Equal(locs[1].Nodes, []int{0}) || !slices.Equal(locs[2].Nodes, []int{1}) {
		t.Fatalf("DeviceLocalities = %+v", locs)
	}
	if got := sysfs.UnionNodes(locs); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("UnionNodes = %v, want [0 1]", got)
	}
	if got, err := sysfs.DeviceNUMANodes(root, devs[:2]); err != nil || !slices.Equal(got, []int{0}) {
		t.Fatalf("DeviceNUMANodes = %v, %v; want [0]", got, err)
	}
}

func TestIOMMUGroupNUMANodes(t *testing.T) {
	root := deviceRoot(t)
	for group, want := range map[int][]int{40: {0}, 91: {1}, 12: {0, 1}, 7: nil, 5: nil} {
		got, err := sysfs.IOMMUGroupNUMANodes(root, group)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("group %d: %v, %v; want %v", group, got, err, want)
		}
	}
	if _, err := sysfs.IOMMUGroupNUMANodes(root, -1); err == nil {
		t.Error("negative group accepted")
	}
}

// TestDeviceNodesStaysInRoot: a group member or a PCI link leading out of
// the tree, and a numa_node that does not parse, are errors naming the
// file; a VFIO class device whose name is no group number gives nothing.
func TestDeviceNodesStaysInRoot(t *testing.T) {
	root := deviceRoot(t)
	link := func(p, target string) {
		t.Helper()
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, full); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, content string) {
		t.Helper()
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("devices/virtual/vfio/66/dev", "242:9\n")
	link("dev/char/242:9", "../../devices/virtual/vfio/66")
	link("kernel/iommu_groups/66/devices/0000:66:00.0", "/etc")
	write("devices/virtual/vfio/bogus/dev", "242:10\n")
	link("dev/char/242:10", "../../devices/virtual/vfio/bogus")
	link("bus/pci/devices/0000:77:00.0", "/etc")
	write("devices/pci0000:78/0000:78:00.0/numa_node", "x\n")
	link("bus/pci/devices/0000:78:00.0", "../../../devices/pci0000:78/0000:78:00.0")

	if _, err := sysfs.DeviceNodes(root, sysfs.Device{Kind: "char", Major: 242, Minor: 9}); err == nil || !strings.Contains(err.Error(), "iommu_groups/66/devices/0000:66:00.0") || !strings.Contains(err.Error(), "outside") {
		t.Errorf("group member outside the tree: err = %v", err)
	}
	if got, err := sysfs.DeviceNodes(root, sysfs.Device{Kind: "char", Major: 242, Minor: 10}); err != nil || got != nil {
		t.Errorf("VFIO device named bogus: %v, %v; want none", got, err)
	}
	if _, err := sysfs.DeviceNodes(root, sysfs.Device{Kind: "pci", PCI: "0000:77:00.0"}); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Errorf("PCI link outside the tree: err = %v", err)
	}
	if _, err := sysfs.DeviceNodes(root, sysfs.Device{Kind: "pci", PCI: "0000:78:00.0"}); err == nil || !strings.Contains(err.Error(), "0000:78:00.0/numa_node") {
		t.Errorf("unparsable numa_node: err = %v", err)
	}
}

func TestParsePCIAddress(t *testing.T) {
	good := map[string]string{
		"0000:3b:02.1":  "0000:3b:02.1",
		"0000:AF:1F.7":  "0000:af:1f.7",
		"10000:e1:00.0": "10000:e1:00.0", // VMD domain
	}
	for in, want := range good {
		if got, err := sysfs.ParsePCIAddress(in); err != nil || got != want {
			t.Errorf("ParsePCIAddress(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "3b:02.1", "0000:3b:02", "0000:3b:20.0", "0000:3b:02.8", "0000:3g:02.1",
		"000:3b:02.1", "0000:3b:02.1 ", "0000:3b:002.1", "../../../etc", "0000:3b:02.1/../x", "123456789:00:00.0", "0000:3b:02.-1"} {
		if _, err := sysfs.ParsePCIAddress(in); err == nil || !strings.Contains(err.Error(), "PCI address") {
			t.Errorf("ParsePCIAddress(%q) err = %v, want a PCI address error", in, err)
		}
	}
}

// FuzzDeviceNodesPCI: an arbitrary PCI address (as a pod's PCIDEVICE_*
// variable may hold) never panics; an accepted one is the input in lower
// case, accepted again as is, with no path separator; it has nodes only
// when sysfstest's tree has the function, and an address the parser
// refuses is an error quoting no more than the input.
func FuzzDeviceNodesPCI(f *testing.F) {
	root := f.TempDir()
	if err := sysfstest.WriteDevices(root); err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"0000:af:02.1", "0000:3B:02.0", "10000:e1:00.0", "0000:00:1f.0", "../../..", "0000:af:02.1/..", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		addr, perr := sysfs.ParsePCIAddress(s)
		nodes, err := sysfs.DeviceNodes(root, sysfs.Device{Kind: "pci", PCI: s})
		if perr != nil {
			if err == nil || nodes != nil || !strings.Contains(err.Error(), "PCI address") {
				t.Fatalf("refused address %q: DeviceNodes = %v, %v", s, nodes, err)
			}
			return
		}
		if addr != strings.ToLower(s) || strings.ContainsAny(addr, "/\\") {
			t.Fatalf("ParsePCIAddress(%q) = %q", s, addr)
		}
		if again, err := sysfs.ParsePCIAddress(addr); err != nil || again != addr {
			t.Fatalf("ParsePCIAddress(%q) = %q, %v on its own output", addr, again, err)
		}
		if err != nil {
			t.Fatalf("DeviceNodes(%q): %v", s, err)
		}
		_, inTree := sysfstest.DeviceLinks["bus/pci/devices/"+addr]
		if len(nodes) > 0 && !inTree {
			t.Fatalf("DeviceNodes(%q) = %v for a function the tree does not have", s, nodes)
		}
	})
}
