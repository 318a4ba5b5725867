package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// TestDeviceHintPullsCPUsToItsNode: on ht-2s-6c (NUMA 0 = CPUs 0-5,12-17,
// NUMA 1 = 6-11,18-23; reserved 0,12) a Guaranteed 2-CPU container
// without devices lands on the most used node that fits, node 0, lowest
// free core: core 1 = {1,13}. The same request with a VFIO device whose
// PCI function sits on NUMA node 1 merges the CPU hints with the device's
// {1} hint and gets node 1's lowest core, core 6 = {6,18}, mems 1.
func TestDeviceHintPullsCPUsToItsNode(t *testing.T) {
	root := t.TempDir()
	if err := sysfstest.WriteNamed(root, "ht-2s-6c"); err != nil {
		t.Fatal(err)
	}
	pci := filepath.Join(root, "devices/pci0000:80/0000:80:01.0/0000:81:00.0")
	if err := os.MkdirAll(filepath.Join(pci, "vfio-dev/vfio0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pci, "numa_node"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "dev/char"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../devices/pci0000:80/0000:80:01.0/0000:81:00.0/vfio-dev/vfio0", filepath.Join(root, "dev/char/240:0")); err != nil {
		t.Fatal(err)
	}

	rt := startRuntime(t)
	cfg := testConfig(t, rt, t.TempDir(), fmt.Sprintf("reserved_system_cpus = \"0,12\"\ntopology_manager_policy = \"best-effort\"\nsysfs_root = %q\n", root))
	startDaemon(t, rt, cfg, loadFixture(t, "ht-2s-6c"))

	plain, _, err := rt.create(rt.addPod(podSpec{uid: "plain", name: "plain", qos: "guaranteed"}), "c", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(plain); got != "1,13" {
		t.Fatalf("container without devices got %q, want 1,13", got)
	}

	pod := rt.addPod(podSpec{uid: "dev", name: "dev", qos: "guaranteed"})
	c := rt.newCtr(pod, "c", 2000, 2000)
	c.Linux.Devices = []*api.LinuxDevice{
		{Path: "/dev/null", Type: "c", Major: 1, Minor: 3},           // virtual: no locality
		{Path: "/dev/vfio/0", Type: "c", Major: 240, Minor: 0},       // NUMA node 1
		{Path: "/dev/not-in-sysfs", Type: "b", Major: 999, Minor: 9}, // unknown: no locality
	}
	resp, err := rt.CreateContainer(context.Background(), pod, c)
	if err != nil {
		t.Fatal(err)
	}
	cpu := resp.GetAdjust().GetLinux().GetResources().GetCpu()
	if cpu.GetCpus() != "6,18" || cpu.GetMems() != "0-1" {
		t.Fatalf("container with a NUMA-1 device got cpus %q mems %q, want 6,18 and 0-1", cpu.GetCpus(), cpu.GetMems())
	}
}
