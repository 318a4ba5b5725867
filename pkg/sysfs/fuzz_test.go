package sysfs

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The list, MemTotal, distance and whole-tree fuzzers are in parse_test.go
// and read_test.go; these cover the number parser and the device lookup.

// FuzzParseInt: never panics; an error wraps ErrSyntax and quotes the
// input; what parses round-trips through strconv.
func FuzzParseInt(f *testing.F) {
	for _, s := range []string{"0", " 17\n", "-1", "2147483648", "0x10", "", "1e3", "+5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseInt(s)
		if err != nil {
			if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), strconv.Quote(strings.TrimSpace(s))) {
				t.Fatalf("ParseInt(%q) error %q does not wrap ErrSyntax and quote the input", s, err)
			}
			return
		}
		if m, err := strconv.Atoi(strings.TrimSpace(s)); err != nil || m != n {
			t.Fatalf("ParseInt(%q) = %d, strconv says %d, %v", s, n, m, err)
		}
	})
}

// FuzzDeviceNUMANode looks up arbitrary device numbers in a small device
// tree. It never panics, finds a node only for the devices the tree has,
// and never reads outside the tree: a link leading out of devices/ (as
// dev/char/5:5 -> / does) is an error naming it, not followed.
func FuzzDeviceNUMANode(f *testing.F) {
	root := f.TempDir()
	files := map[string]string{
		"devices/pci0000:80/0000:80:01.0/numa_node":               "1\n",
		"devices/pci0000:80/0000:80:01.0/0000:81:00.0/vfio/0/dev": "240:0\n",
		"devices/pci0000:00/0000:00:02.0/numa_node":               "-1\n",
		"devices/pci0000:00/0000:00:02.0/drm/card0/dev":           "226:0\n",
		"devices/pci0000:00/0000:00:03.0/numa_node":               "junk\n",
		"devices/pci0000:00/0000:00:03.0/misc/weird/dev":          "10:200\n",
		"outside/numa_node":                                       "0\n",
	}
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			f.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	links := map[string]string{
		"dev/char/240:0":  "../../devices/pci0000:80/0000:80:01.0/0000:81:00.0/vfio/0",
		"dev/char/226:0":  "../../devices/pci0000:00/0000:00:02.0/drm/card0",
		"dev/char/10:200": "../../devices/pci0000:00/0000:00:03.0/misc/weird",
		"dev/char/5:5":    "/",
		"dev/block/8:0":   "../../outside",
	}
	for p, target := range links {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			f.Fatal(err)
		}
		if err := os.Symlink(target, full); err != nil {
			f.Fatal(err)
		}
	}
	f.Add("char", int64(240), int64(0))
	f.Add("char", int64(226), int64(0))
	f.Add("char", int64(10), int64(200))
	f.Add("char", int64(5), int64(5))
	f.Add("block", int64(8), int64(0))
	f.Add("../char", int64(1), int64(3))
	f.Add("char", int64(-1), int64(0))
	f.Fuzz(func(t *testing.T, kind string, major, minor int64) {
		node, ok, err := DeviceNUMANode(root, kind, major, minor)
		dev := kind + " " + strconv.FormatInt(major, 10) + ":" + strconv.FormatInt(minor, 10)
		switch {
		case kind == "char" && major == 240 && minor == 0:
			if !ok || node != 1 || err != nil {
				t.Fatalf("%s = %d, %v, %v; want node 1", dev, node, ok, err)
			}
		case kind == "char" && major == 10 && minor == 200:
			if err == nil || !strings.Contains(err.Error(), "numa_node") {
				t.Fatalf("%s (numa_node holds junk) = %v, want an error naming the file", dev, err)
			}
		case (kind == "char" && major == 5 && minor == 5) || (kind == "block" && major == 8 && minor == 0):
			if err == nil || ok {
				t.Fatalf("%s leads outside devices/ and was followed: %d, %v, %v", dev, node, ok, err)
			}
		default:
			if ok {
				t.Fatalf("%s is not in the tree but has node %d", dev, node)
			}
			if err != nil && kind != "char" && kind != "block" && !strings.Contains(err.Error(), strconv.Quote(kind)) {
				t.Fatalf("%s: error %q does not name the kind", dev, err)
			}
		}
	})
}

// FuzzParseNVIDIAInformation: never panics; what parses has a canonical
// PCI address, a GPU minor (0-253) and a "GPU-" UUID.
func FuzzParseNVIDIAInformation(f *testing.F) {
	f.Add("GPU UUID: \t GPU-f7126b01-e63e-79d5-4f40-f4649151743c\nBus Location: \t 0000:00:06.0\nDevice Minor: \t 0\n")
	f.Add("Model: \t\t NVIDIA H200\nGPU UUID: \t GPU-x\nBus Location: \t 0000:AF:00.0\nDevice Minor: \t 253\n")
	f.Add("Device Minor: \t 254\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		g, err := ParseNVIDIAInformation([]byte(s))
		if err != nil {
			return
		}
		if addr, err := ParsePCIAddress(g.PCI); err != nil || addr != g.PCI {
			t.Fatalf("PCI %q is not canonical: %v", g.PCI, err)
		}
		if g.Minor < 0 || g.Minor > NVIDIAMaxGPUMinor || !strings.HasPrefix(g.UUID, "GPU-") {
			t.Fatalf("parsed %+v from %q", g, s)
		}
	})
}

// FuzzParseDRAMetadata: never panics; every device's PCI address is
// canonical and its node within 0-63.
func FuzzParseDRAMetadata(f *testing.F) {
	f.Add(`{"apiVersion":"metadata.resource.k8s.io/v1alpha1","kind":"DeviceMetadata","requests":[{"name":"r","devices":[{"name":"d","attributes":{"resource.kubernetes.io/pciBusID":{"string":"0000:86:00.0"},"resource.kubernetes.io/numaNode":{"int":1}}}]}]}`)
	f.Add(`{"kind":"DeviceMetadata"}`)
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		devs, err := ParseDRAMetadata([]byte(s))
		if err != nil {
			return
		}
		for _, d := range devs {
			if d.PCI != "" {
				if addr, err := ParsePCIAddress(d.PCI); err != nil || addr != d.PCI {
					t.Fatalf("PCI %q is not canonical: %v", d.PCI, err)
				}
			}
			if d.HasNode && (d.Node < 0 || d.Node >= MaxNUMANodes) {
				t.Fatalf("node %d", d.Node)
			}
		}
	})
}
