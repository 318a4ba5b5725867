package sysfs_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// TestRealH200: the real host's files (one H200, driver 580, 16 CPUs on
// one NUMA node). The information file maps minor 0 and the GPU's UUID
// to 0000:00:06.0; its numa_node is -1 and its local_cpulist 0-15 is
// every CPU of the one node, so it narrows nothing: no node.
func TestRealH200(t *testing.T) {
	sys, proc, err := sysfstest.WriteRealH200(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	info := filepath.Join(proc, "driver/nvidia/gpus/0000:00:06.0/information")
	data, err := os.ReadFile(info)
	if err != nil {
		t.Fatal(err)
	}
	// The sum of the file on the host (testdata/README.md).
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != "be4782096fe63fecf1d36e60ef2d99fffd9e2d4a68df6ae2b44aa48b6ef580c3" {
		t.Fatalf("information file is not the host's: sha256 %x", sum)
	}
	gpus, err := sysfs.ReadNVIDIAGPUs(proc)
	if err != nil || len(gpus.Bad) != 0 {
		t.Fatalf("ReadNVIDIAGPUs: %v, bad %v", err, gpus.Bad)
	}
	want := sysfs.NVIDIAGPU{UUID: "GPU-f7126b01-e63e-79d5-4f40-f4649151743c", PCI: "0000:00:06.0", Minor: 0, File: info}
	if len(gpus.GPUs) != 1 || gpus.GPUs[0] != want {
		t.Fatalf("GPUs = %+v, want [%+v]", gpus.GPUs, want)
	}
	if g, ok := gpus.ByMinor(0); !ok || g.PCI != "0000:00:06.0" {
		t.Fatalf("ByMinor(0) = %+v, %t", g, ok)
	}
	if g, ok := gpus.ByUUID("GPU-F7126B01-E63E-79D5-4F40-F4649151743C"); !ok || g.Minor != 0 {
		t.Fatalf("ByUUID (upper case) = %+v, %t", g, ok)
	}
	if _, ok := gpus.ByMinor(1); ok {
		t.Fatal("ByMinor(1) found a GPU the host does not have")
	}

	topo, err := sysfs.Read(sys)
	if err != nil {
		t.Fatal(err)
	}
	if topo.NumCPUs() != 16 || len(topo.NUMANodes()) != 1 {
		t.Fatalf("topology: %d CPUs, %d nodes; want 16, 1", topo.NumCPUs(), topo.NUMANodes())
	}
	nodes, err := sysfs.DeviceNodes(sys, sysfs.Device{Kind: "pci", PCI: "0000:00:06.0"})
	if err != nil || nodes != nil {
		t.Fatalf("DeviceNodes(H200) = %v, %v; want none (numa_node -1, local_cpulist 0-15 = the whole machine)", nodes, err)
	}
}

// gpuFixture is ht-2s-6c (NUMA 0 = CPUs 0-5,12-17, NUMA 1 = 6-11,18-23)
// with GPUs whose minors are not in bus order:
//
//	minor 0  0000:86:00.0  numa_node 1                        -> node 1
//	minor 1  0000:19:00.0  numa_node 0                        -> node 0
//	minor 2  0000:d9:00.0  -1, local_cpulist 6-11,18-23       -> node 1
//	minor 3  0000:1a:00.0  -1, local_cpulist 0-23 (all)       -> none
//	minor 5  0000:3d:00.0  -1, no local_cpulist               -> none
//	minor 7  0000:3e:00.0  -1, local_cpulist 0-2 (part of 0)  -> node 0
var gpuFixture = []sysfstest.GPU{
	{PCI: "0000:86:00.0", Minor: 0, UUID: "GPU-00000000-0000-0000-0000-000000000086", NUMA: "1", LocalCPUs: "6-11,18-23"},
	{PCI: "0000:19:00.0", Minor: 1, UUID: "GPU-00000000-0000-0000-0000-000000000019", NUMA: "0", LocalCPUs: "0-5,12-17"},
	{PCI: "0000:d9:00.0", Minor: 2, UUID: "GPU-00000000-0000-0000-0000-0000000000d9", NUMA: "-1", LocalCPUs: "6-11,18-23"},
	{PCI: "0000:1a:00.0", Minor: 3, UUID: "GPU-00000000-0000-0000-0000-00000000001a", NUMA: "-1", LocalCPUs: "0-23"},
	{PCI: "0000:3d:00.0", Minor: 5, UUID: "GPU-00000000-0000-0000-0000-00000000003d", NUMA: "-1"},
	{PCI: "0000:3e:00.0", Minor: 7, UUID: "GPU-00000000-0000-0000-0000-00000000003e", NUMA: "-1", LocalCPUs: "0-2"},
}

func writeGPUFixture(t *testing.T, gpus ...sysfstest.GPU) (sys, proc string) {
	t.Helper()
	sys, proc = filepath.Join(t.TempDir(), "sys"), filepath.Join(t.TempDir(), "proc")
	if err := sysfstest.WriteNamed(sys, "ht-2s-6c"); err != nil {
		t.Fatal(err)
	}
	if err := sysfstest.WriteNVIDIA(sys, proc, gpus...); err != nil {
		t.Fatal(err)
	}
	return sys, proc
}

func TestNVIDIAGPUsOnTwoNodes(t *testing.T) {
	sys, proc := writeGPUFixture(t, gpuFixture...)
	gpus, err := sysfs.ReadNVIDIAGPUs(proc)
	if err != nil || len(gpus.Bad) != 0 {
		t.Fatalf("ReadNVIDIAGPUs: %v, bad %v", err, gpus.Bad)
	}
	var order []string
	for _, g := range gpus.GPUs {
		order = append(order, g.PCI)
	}
	if want := []string{"0000:19:00.0", "0000:1a:00.0", "0000:3d:00.0", "0000:3e:00.0", "0000:86:00.0", "0000:d9:00.0"}; !slices.Equal(order, want) {
		t.Fatalf("GPUs in order %v, want bus order %v", order, want)
	}
	wantNodes := map[int64][]int{0: {1}, 1: {0}, 2: {1}, 3: nil, 5: nil, 7: {0}}
	for minor, want := range wantNodes {
		g, ok := gpus.ByMinor(minor)
		if !ok {
			t.Fatalf("no GPU with minor %d", minor)
		}
		if u, ok := gpus.ByUUID(g.UUID); !ok || u.PCI != g.PCI {
			t.Fatalf("ByUUID(%s) = %+v, %t", g.UUID, u, ok)
		}
		got, err := sysfs.DeviceNodes(sys, sysfs.Device{Kind: "pci", PCI: g.PCI})
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("minor %d (%s): nodes %v, %v; want %v", minor, g.PCI, got, err, want)
		}
	}
	if _, ok := gpus.ByMinor(4); ok {
		t.Fatal("ByMinor(4) found a GPU")
	}
	if _, ok := gpus.ByUUID("MIG-00000000-0000-0000-0000-000000000086"); ok {
		t.Fatal("ByUUID found a MIG UUID")
	}
	// Both nodes' GPUs together: the union a container holding them needs.
	got, err := sysfs.DeviceNUMANodes(sys, []sysfs.Device{{Kind: "pci", PCI: "0000:86:00.0"}, {Kind: "pci", PCI: "0000:19:00.0"}})
	if err != nil || !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("two GPUs: %v, %v; want [0 1]", got, err)
	}
}

// TestNVIDIAInformationBad: a truncated, malformed or oversized file, or
// two files claiming one minor, are listed with their paths; the other
// GPUs stay usable.
func TestNVIDIAInformationBad(t *testing.T) {
	good := gpuFixture[0]
	full := sysfstest.NVIDIAInformation(gpuFixture[1])
	truncated := gpuFixture[1]
	truncated.Information = full[:strings.Index(full, "Bus Location")] // cut mid-file
	garbage := gpuFixture[2]
	garbage.Information = "\x00\xff\xfe binary"
	big := gpuFixture[3]
	big.Information = full + strings.Repeat("Padding: \t x\n", 2000)
	dupA, dupB := gpuFixture[4], gpuFixture[5]
	dupB.Minor = dupA.Minor
	_, proc := writeGPUFixture(t, good, truncated, garbage, big, dupA, dupB)

	gpus, err := sysfs.ReadNVIDIAGPUs(proc)
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus.GPUs) != 1 || gpus.GPUs[0].PCI != good.PCI {
		t.Fatalf("GPUs = %+v, want only %s", gpus.GPUs, good.PCI)
	}
	want := map[string]string{
		"0000:19:00.0/information": "no Bus Location, Device Minor line (truncated?)",
		"0000:d9:00.0/information": "no GPU UUID, Bus Location, Device Minor line",
		"0000:1a:00.0/information": "larger than 16384 bytes",
		"0000:3d:00.0/information": "Device Minor 5 or GPU UUID",
		"0000:3e:00.0/information": "Device Minor 5 or GPU UUID",
	}
	if len(gpus.Bad) != len(want) {
		t.Fatalf("Bad = %v, want %d entries", gpus.Bad, len(want))
	}
	for file, why := range want {
		found := false
		for _, e := range gpus.Bad {
			if strings.Contains(e.Error(), file) && strings.Contains(e.Error(), why) {
				found = true
			}
		}
		if !found {
			t.Errorf("no error naming %s with %q in %v", file, why, gpus.Bad)
		}
	}
}

func TestReadNVIDIAGPUsNoDriver(t *testing.T) {
	gpus, err := sysfs.ReadNVIDIAGPUs(t.TempDir())
	if err != nil || len(gpus.GPUs) != 0 || len(gpus.Bad) != 0 {
		t.Fatalf("procfs without the driver: %+v, %v; want nothing", gpus, err)
	}
}

func TestParseNVIDIAInformation(t *testing.T) {
	real := "Model: \t\t NVIDIA H200\nIRQ:   \t\t 41\nGPU UUID: \t GPU-f7126b01-e63e-79d5-4f40-f4649151743c\n" +
		"Video BIOS: \t 96.00.a5.00.1a\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\n" +
		"Bus Location: \t 0000:00:06.0\nDevice Minor: \t 0\nGPU Firmware: \t 580.159.04\nGPU Excluded:\t No\n"
	g, err := sysfs.ParseNVIDIAInformation([]byte(real))
	if err != nil || g != (sysfs.NVIDIAGPU{UUID: "GPU-f7126b01-e63e-79d5-4f40-f4649151743c", PCI: "0000:00:06.0"}) {
		t.Fatalf("real file: %+v, %v", g, err)
	}
	// An older driver's upper-case bus and CRLF lines.
	g, err = sysfs.ParseNVIDIAInformation([]byte("GPU UUID:\tGPU-ab\r\nBus Location:\t0000:AF:00.0\r\nDevice Minor:\t12\r\n"))
	if err != nil || g.PCI != "0000:af:00.0" || g.Minor != 12 || g.UUID != "GPU-ab" {
		t.Fatalf("CRLF file: %+v, %v", g, err)
	}
	for _, tc := range []struct{ name, content, errHas string }{
		{"empty", "", "no GPU UUID, Bus Location, Device Minor line"},
		{"cut before the minor", real[:strings.Index(real, "Device Minor")], "no Device Minor line"},
		{"cut inside the bus", real[:strings.Index(real, "06.0")], "Bus Location"},
		{"control minor", strings.Replace(real, "Minor: \t 0", "Minor: \t 255", 1), `Device Minor "255": want 0-253`},
		{"minor not a number", strings.Replace(real, "Minor: \t 0", "Minor: \t zero", 1), `Device Minor "zero"`},
		{"MIG UUID", strings.Replace(real, "GPU-f7", "MIG-f7", 1), "want GPU-<uuid>"},
		{"two minors", real + "Device Minor: \t 1\n", `"Device Minor" given twice`},
		{"bus not PCI", strings.Replace(real, "0000:00:06.0", "00:06.0", 1), "Bus Location"},
	} {
		if _, err := sysfs.ParseNVIDIAInformation([]byte(tc.content)); err == nil || !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("%s: err = %v, want one containing %q", tc.name, err, tc.errHas)
		}
	}
}

// TestNodesOfCPUs: on a two-node machine (0 = 0-5,12-17, 1 = 6-11,
// 18-23), the nodes a local_cpulist narrows to, worked out by hand.
func TestNodesOfCPUs(t *testing.T) {
	nodes := map[int]cpuset.CPUSet{0: cpuset.New(0, 1, 2, 3, 4, 5, 12, 13, 14, 15, 16, 17), 1: cpuset.New(6, 7, 8, 9, 10, 11, 18, 19, 20, 21, 22, 23)}
	for _, tc := range []struct {
		local string
		want  []int
	}{
		{"6-11,18-23", []int{1}},
		{"0-5,12-17", []int{0}},
		{"3", []int{0}},
		{"0-23", nil},  // all: the kernel's answer for an unknown node
		{"5-6", nil},   // touches both
		{"40-41", nil}, // none of the machine's
		{"", nil},
	} {
		local, err := cpuset.Parse(tc.local)
		if err != nil {
			t.Fatal(err)
		}
		if got := sysfs.NodesOfCPUs(local, nodes); !slices.Equal(got, tc.want) {
			t.Errorf("NodesOfCPUs(%q) = %v, want %v", tc.local, got, tc.want)
		}
	}
	one := map[int]cpuset.CPUSet{0: cpuset.New(0, 1, 2, 3)}
	if got := sysfs.NodesOfCPUs(cpuset.New(0, 1), one); got != nil {
		t.Errorf("one-node machine: %v, want none", got)
	}
}

// TestNUMANodeMinusOneVFIO: the fallback applies to every kind that ends
// at a PCI function: a VFIO group whose only member has numa_node -1 and
// a narrow local_cpulist is on that node; a render node likewise.
func TestNUMANodeMinusOneVFIO(t *testing.T) {
	sys, _ := writeGPUFixture(t)
	write := func(p, content string) {
		t.Helper()
		full := filepath.Join(sys, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(p, target string) {
		t.Helper()
		full := filepath.Join(sys, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, full); err != nil {
			t.Fatal(err)
		}
	}
	write("devices/pci0000:c0/0000:c1:00.0/numa_node", "-1\n")
	write("devices/pci0000:c0/0000:c1:00.0/local_cpulist", "6-11,18-23\n")
	write("devices/pci0000:c0/0000:c1:00.0/drm/renderD130/dev", "226:130\n")
	write("devices/virtual/vfio/77/dev", "242:7\n")
	link("dev/char/242:7", "../../devices/virtual/vfio/77")
	link("dev/char/226:130", "../../devices/pci0000:c0/0000:c1:00.0/drm/renderD130")
	link("kernel/iommu_groups/77/devices/0000:c1:00.0", "../../../../devices/pci0000:c0/0000:c1:00.0")
	for _, d := range []sysfs.Device{{Kind: "char", Major: 242, Minor: 7}, {Kind: "char", Major: 226, Minor: 130}} {
		got, err := sysfs.DeviceNodes(sys, d)
		if err != nil || !slices.Equal(got, []int{1}) {
			t.Errorf("%s: %v, %v; want [1]", d, got, err)
		}
	}
	write("devices/pci0000:c0/0000:c1:00.0/local_cpulist", "zz\n")
	if _, err := sysfs.DeviceNodes(sys, sysfs.Device{Kind: "char", Major: 226, Minor: 130}); err == nil || !strings.Contains(err.Error(), "0000:c1:00.0/local_cpulist") {
		t.Errorf("bad local_cpulist: err = %v, want one naming the file", err)
	}
}

func TestDeviceNodesNUMAKind(t *testing.T) {
	root := t.TempDir()
	if got, err := sysfs.DeviceNodes(root, sysfs.Device{Kind: "numa", Nodes: []int{3, 1, 3}}); err != nil || !slices.Equal(got, []int{1, 3}) {
		t.Fatalf("numa 3,1,3: %v, %v; want [1 3]", got, err)
	}
	if got, err := sysfs.DeviceNodes(root, sysfs.Device{Kind: "numa"}); err != nil || got != nil {
		t.Fatalf("numa without nodes: %v, %v; want none", got, err)
	}
	if _, err := sysfs.DeviceNodes(root, sysfs.Device{Kind: "numa", Nodes: []int{64}}); err == nil {
		t.Fatal("node 64 accepted")
	}
}
