package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
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

// deviceSysfs is a /sys root with the ht-2s-6c CPUs (NUMA 0 = CPUs 0-5,
// 12-17, NUMA 1 = 6-11,18-23, core k = {k, k+12}) and sysfstest's device
// tree: VFIO group 90 (242:1) and 91 (242:2) and VF 0000:af:02.x on node
// 1, group 40 (242:0) and VF 0000:3b:02.x on node 0.
func deviceSysfs(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := sysfstest.WriteNamed(root, "ht-2s-6c"); err != nil {
		t.Fatal(err)
	}
	if err := sysfstest.WriteDevices(root); err != nil {
		t.Fatal(err)
	}
	return root
}

// vfio is /dev/vfio/<group> as the runtime lists it, with the VFIO
// group's major:minor (the path is only a label).
func vfio(group string, minor int64) *api.LinuxDevice {
	return &api.LinuxDevice{Path: "/dev/vfio/" + group, Type: "c", Major: 242, Minor: minor}
}

// vfioContainer is the VFIO container device every DPDK pod also gets; it
// has no locality.
var vfioContainer = &api.LinuxDevice{Path: "/dev/vfio/vfio", Type: "c", Major: 10, Minor: 196}

func stateDevices(t *testing.T, d *Daemon, pod string) []ledger.DeviceView {
	t.Helper()
	for _, c := range d.State().Containers {
		if c.Pod == "default/"+pod {
			return c.Devices
		}
	}
	t.Fatalf("no container of pod %s in /state", pod)
	return nil
}

func sameDevices(a, b []ledger.DeviceView) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Device != b[i].Device || fmt.Sprint(a[i].NUMA) != fmt.Sprint(b[i].NUMA) {
			return false
		}
	}
	return true
}

// TestDeviceHintsVFIOAndSRIOVEnvContainerScope: under single-numa-node,
// container scope, reserved 0,12:
//   - a DPDK container with /dev/vfio/vfio and /dev/vfio/90 (group 90, a
//     VF on node 1) gets node 1's lowest core, 6 = {6,18};
//   - a container whose VF the SR-IOV device plugin names in
//     PCIDEVICE_* (0000:af:02.2, node 1; the _INFO variable is JSON and
//     skipped, and a garbage value is skipped) gets node 1's next core,
//     7 = {7,19};
//   - a container with group 40 (node 0) and a VF on node 1 cannot have
//     one node for its devices and CPUs: TopologyAffinityError;
//   - /state shows the devices that gave nodes, also after a restart.
func TestDeviceHintsVFIOAndSRIOVEnvContainerScope(t *testing.T) {
	root := deviceSysfs(t)
	rt := startRuntime(t)
	cfg := testConfig(t, rt, t.TempDir(), fmt.Sprintf("reserved_system_cpus = \"0,12\"\ntopology_manager_policy = \"single-numa-node\"\nsysfs_root = %q\n", root))
	r := startDaemon(t, rt, cfg, loadFixture(t, "ht-2s-6c"))

	dpdk := rt.addPod(podSpec{uid: "dpdk", name: "dpdk", qos: "guaranteed"})
	c := rt.newCtr(dpdk, "c", 2000, 2000)
	c.Linux.Devices = []*api.LinuxDevice{vfioContainer, vfio("90", 1)}
	resp, err := rt.CreateContainer(context.Background(), dpdk, c)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetAdjust().GetLinux().GetResources().GetCpu().GetCpus(); got != "6,18" {
		t.Fatalf("VFIO group 90 container got %q, want 6,18", got)
	}

	sriov := rt.addPod(podSpec{uid: "sriov", name: "sriov", qos: "guaranteed"})
	c = rt.newCtr(sriov, "c", 2000, 2000)
	c.Env = append(c.Env, "PCIDEVICE_INTEL_COM_SRIOV_NETDEVICE=0000:af:02.2",
		`PCIDEVICE_INTEL_COM_SRIOV_NETDEVICE_INFO={"0000:3b:02.0":{"generic":{"deviceID":"0000:3b:02.0"}}}`,
		"PCIDEVICE_BOGUS=../../../etc")
	resp, err = rt.CreateContainer(context.Background(), sriov, c)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetAdjust().GetLinux().GetResources().GetCpu().GetCpus(); got != "7,19" {
		t.Fatalf("SR-IOV VF container got %q, want 7,19", got)
	}

	split := rt.addPod(podSpec{uid: "split", name: "split", qos: "guaranteed"})
	c = rt.newCtr(split, "c", 2000, 2000)
	c.Linux.Devices = []*api.LinuxDevice{vfio("40", 0)}
	c.Env = append(c.Env, "PCIDEVICE_INTEL_COM_SRIOV_NETDEVICE=0000:af:02.0")
	if _, err := rt.CreateContainer(context.Background(), split, c); err == nil || !strings.Contains(err.Error(), "TopologyAffinityError") {
		t.Fatalf("devices on nodes 0 and 1 under single-numa-node: err = %v, want TopologyAffinityError", err)
	}

	wantDPDK := []ledger.DeviceView{{Device: "/dev/vfio/90 (char 242:1)", NUMA: []int{1}}}
	wantSRIOV := []ledger.DeviceView{{Device: "PCIDEVICE_INTEL_COM_SRIOV_NETDEVICE 0000:af:02.2", NUMA: []int{1}}}
	check := func(when string) {
		t.Helper()
		if got := stateDevices(t, r.d, "dpdk"); !sameDevices(got, wantDPDK) {
			t.Errorf("%s: /state devices of dpdk = %+v, want %+v", when, got, wantDPDK)
		}
		if got := stateDevices(t, r.d, "sriov"); !sameDevices(got, wantSRIOV) {
			t.Errorf("%s: /state devices of sriov = %+v, want %+v", when, got, wantSRIOV)
		}
	}
	check("after admission")
	r.stop(t)
	r = startDaemon(t, rt, cfg, loadFixture(t, "ht-2s-6c"))
	check("after a restart")
}

// TestDeviceHintsPodScope: under single-numa-node, pod scope, reserved
// 0,12, a 4-CPU pod whose first container holds VFIO group 91 (two VFs on
// node 1) fixes the pod's affinity to node 1: its containers get cores 6
// and 7, the second one without devices too; a third one with a VF on
// node 0 cannot share the pod's node: TopologyAffinityError, as the
// kubelet's pod-level merge would refuse the pod. A pod whose first container
// names a VF on node 0 by PCIDEVICE_* and holds group 90 on node 1 is
// refused with TopologyAffinityError.
func TestDeviceHintsPodScope(t *testing.T) {
	root := deviceSysfs(t)
	rt := startRuntime(t)
	cfg := testConfig(t, rt, t.TempDir(), fmt.Sprintf("reserved_system_cpus = \"0,12\"\ntopology_manager_policy = \"single-numa-node\"\ntopology_manager_scope = \"pod\"\nsysfs_root = %q\n", root))
	startDaemon(t, rt, cfg, loadFixture(t, "ht-2s-6c"))

	pod := rt.addPod(podSpec{uid: "dpdk", name: "dpdk", qos: "guaranteed", podMilli: 4000})
	c := rt.newCtr(pod, "a", 2000, 2000)
	c.Linux.Devices = []*api.LinuxDevice{vfioContainer, vfio("91", 2)}
	resp, err := rt.CreateContainer(context.Background(), pod, c)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetAdjust().GetLinux().GetResources().GetCpu().GetCpus(); got != "6,18" {
		t.Fatalf("first container got %q, want 6,18", got)
	}
	resp, err = rt.CreateContainer(context.Background(), pod, rt.newCtr(pod, "b", 2000, 2000))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetAdjust().GetLinux().GetResources().GetCpu().GetCpus(); got != "7,19" {
		t.Fatalf("second container got %q, want 7,19 (the pod's node 1)", got)
	}
	// The kubelet would have merged a third container's VF on node 0
	// into the pod's hint and refused the pod: it cannot join node 1.
	c = rt.newCtr(pod, "late", 1000, 1000)
	c.Env = append(c.Env, "PCIDEVICE_OPENSHIFT_IO_VF=0000:3b:02.1")
	if _, err := rt.CreateContainer(context.Background(), pod, c); err == nil || !strings.Contains(err.Error(), "TopologyAffinityError") {
		t.Fatalf("later container with a VF off the pod's node: err = %v, want TopologyAffinityError", err)
	}

	split := rt.addPod(podSpec{uid: "split", name: "split", qos: "guaranteed", podMilli: 2000})
	c = rt.newCtr(split, "a", 2000, 2000)
	c.Linux.Devices = []*api.LinuxDevice{vfio("90", 1)}
	c.Env = append(c.Env, "PCIDEVICE_OPENSHIFT_IO_VF=0000:3b:02.1")
	if _, err := rt.CreateContainer(context.Background(), split, c); err == nil || !strings.Contains(err.Error(), "TopologyAffinityError") {
		t.Fatalf("pod with devices on nodes 0 and 1 under single-numa-node: err = %v, want TopologyAffinityError", err)
	}
}

// TestDeviceHintsAtSynchronize: a container created while the plugin was
// away with VFIO group 91 (node 1) is placed at Synchronize on node 1's
// lowest core, 6 = {6,18}, under single-numa-node with 0,12 reserved, and
// /state names its device.
func TestDeviceHintsAtSynchronize(t *testing.T) {
	root := deviceSysfs(t)
	rt := startRuntime(t)
	cfg := testConfig(t, rt, t.TempDir(), fmt.Sprintf("reserved_system_cpus = \"0,12\"\ntopology_manager_policy = \"single-numa-node\"\nsysfs_root = %q\n", root))
	pod := rt.addPod(podSpec{uid: "dpdk", name: "dpdk", qos: "guaranteed"})
	c := rt.newCtr(pod, "c", 2000, 2000)
	c.Linux.Devices = []*api.LinuxDevice{vfioContainer, vfio("91", 2)}
	rt.CreateContainerAway(c)

	r := startDaemon(t, rt, cfg, loadFixture(t, "ht-2s-6c"))
	if got := rt.cpus(c); got != "6,18" {
		t.Fatalf("container placed at Synchronize got %q, want 6,18", got)
	}
	want := []ledger.DeviceView{{Device: "/dev/vfio/91 (char 242:2)", NUMA: []int{1}}}
	if got := stateDevices(t, r.d, "dpdk"); !sameDevices(got, want) {
		t.Fatalf("/state devices = %+v, want %+v", got, want)
	}
}
