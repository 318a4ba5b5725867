package sysfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeDeviceTree writes a small sysfs device tree under root, laid out like
// the kernel's: /sys/dev/<kind>/M:m are relative symlinks into
// /sys/devices/..., and numa_node sits on the PCI function.
func writeDeviceTree(t *testing.T, root string) {
	t.Helper()
	files := map[string]string{
		// A VFIO char device whose PCI parent is on node 1.
		"devices/pci0000:80/0000:80:01.0/numa_node":                           "1\n",
		"devices/pci0000:80/0000:80:01.0/0000:81:00.0/numa_node":              "1\n",
		"devices/pci0000:80/0000:80:01.0/0000:81:00.0/vfio-dev/vfio0/dev":     "240:0\n",
		"devices/pci0000:80/0000:80:01.0/0000:81:00.0/nvme/nvme0/nvme0n1/dev": "259:0\n",
		// A device whose firmware gives no locality.
		"devices/pci0000:00/0000:00:02.0/numa_node":              "-1\n",
		"devices/pci0000:00/0000:00:02.0/drm/card0/dev":          "226:0\n",
		"devices/virtual/mem/null/dev":                           "1:3\n",
		"devices/pci0000:00/0000:00:03.0/numa_node":              "one\n",
		"devices/pci0000:00/0000:00:03.0/misc/weird/dev":         "10:200\n",
		"devices/pci0000:00/0000:00:04.0/numa_node":              "0\n",
		"devices/pci0000:00/0000:00:04.0/infiniband/uverbs0/dev": "231:192\n",
	}
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"dev/char/240:0":   "../../devices/pci0000:80/0000:80:01.0/0000:81:00.0/vfio-dev/vfio0",
		"dev/block/259:0":  "../../devices/pci0000:80/0000:80:01.0/0000:81:00.0/nvme/nvme0/nvme0n1",
		"dev/char/226:0":   "../../devices/pci0000:00/0000:00:02.0/drm/card0",
		"dev/char/1:3":     "../../devices/virtual/mem/null",
		"dev/char/10:200":  "../../devices/pci0000:00/0000:00:03.0/misc/weird",
		"dev/char/231:192": "../../devices/pci0000:00/0000:00:04.0/infiniband/uverbs0",
		"dev/char/5:5":     "/",
	}
	for p, target := range links {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, full); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDeviceNUMANode(t *testing.T) {
	root := t.TempDir()
	writeDeviceTree(t, root)
	cases := []struct {
		name         string
		kind         string
		major, minor int64
		node         int
		ok           bool
		errHas       string // non-empty: an error containing this is expected
	}{
		{"char device under a node-1 PCI function", "char", 240, 0, 1, true, ""},
		{"block device deeper under the same function", "block", 259, 0, 1, true, ""},
		{"node 0", "char", 231, 192, 0, true, ""},
		{"numa_node -1 means no affinity", "char", 226, 0, 0, false, ""},
		{"virtual device has no numa_node", "char", 1, 3, 0, false, ""},
		{"unknown device", "char", 9, 9, 0, false, ""},
		{"same numbers, other kind", "block", 240, 0, 0, false, ""},
		{"numa_node that does not parse", "char", 10, 200, 0, false, "0000:00:03.0/numa_node"},
		{"link out of the tree", "char", 5, 5, 0, false, "outside"},
		{"bad kind", "pipe", 1, 1, 0, false, `"pipe"`},
		{"negative major", "char", -1, 0, 0, false, "negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			node, ok, err := DeviceNUMANode(root, tc.kind, tc.major, tc.minor)
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("err = %v, want one containing %q", err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if ok != tc.ok || (ok && node != tc.node) {
				t.Fatalf("DeviceNUMANode = %d, %t; want %d, %t", node, ok, tc.node, tc.ok)
			}
		})
	}
}

func TestDeviceNUMANodeBadContentNamesFileAndContent(t *testing.T) {
	root := t.TempDir()
	writeDeviceTree(t, root)
	_, _, err := DeviceNUMANode(root, "char", 10, 200)
	if err == nil || !strings.Contains(err.Error(), "numa_node") || !strings.Contains(err.Error(), `"one"`) {
		t.Fatalf("err = %v, want one naming the numa_node file and its content", err)
	}
}

func TestDeviceNUMANodeMissingRoot(t *testing.T) {
	_, _, err := DeviceNUMANode(filepath.Join(t.TempDir(), "nope"), "char", 1, 3)
	if err == nil {
		t.Fatal("missing root accepted")
	}
}

func TestDeviceNUMANodes(t *testing.T) {
	root := t.TempDir()
	writeDeviceTree(t, root)
	nodes, err := DeviceNUMANodes(root, []Device{
		{Kind: "char", Major: 240, Minor: 0},   // node 1
		{Kind: "char", Major: 1, Minor: 3},     // no affinity
		{Kind: "char", Major: 231, Minor: 192}, // node 0
		{Kind: "block", Major: 259, Minor: 0},  // node 1 again
	})
	if err != nil || len(nodes) != 2 || nodes[0] != 0 || nodes[1] != 1 {
		t.Fatalf("DeviceNUMANodes = %v, %v; want [0 1]", nodes, err)
	}
	if _, err := DeviceNUMANodes(root, []Device{{Kind: "char", Major: 240, Minor: 0}, {Kind: "char", Major: 10, Minor: 200}}); err == nil {
		t.Fatal("unparsable numa_node accepted")
	}
	if nodes, err := DeviceNUMANodes(root, nil); err != nil || len(nodes) != 0 {
		t.Fatalf("no devices: %v, %v", nodes, err)
	}
}
