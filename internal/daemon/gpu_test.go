package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/request"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// gpus is four NVIDIA GPUs on ht-2s-6c (NUMA 0 = CPUs 0-5,12-17, NUMA 1
// = 6-11,18-23; core k = {k, k+12}), minors not in bus order:
//
//	/dev/nvidia0  0000:86:00.0  numa_node 1                     -> node 1
//	/dev/nvidia1  0000:19:00.0  numa_node 0                     -> node 0
//	/dev/nvidia2  0000:d9:00.0  -1, local_cpulist 6-11,18-23    -> node 1
//	/dev/nvidia3  0000:1a:00.0  -1, local_cpulist 0-23          -> none
var gpus = []sysfstest.GPU{
	{PCI: "0000:86:00.0", Minor: 0, UUID: "GPU-8686a0b1-0000-4000-8000-000000000086", NUMA: "1", LocalCPUs: "6-11,18-23"},
	{PCI: "0000:19:00.0", Minor: 1, UUID: "GPU-1919a0b1-0000-4000-8000-000000000019", NUMA: "0", LocalCPUs: "0-5,12-17"},
	{PCI: "0000:d9:00.0", Minor: 2, UUID: "GPU-d9d9a0b1-0000-4000-8000-0000000000d9", NUMA: "-1", LocalCPUs: "6-11,18-23"},
	{PCI: "0000:1a:00.0", Minor: 3, UUID: "GPU-1a1aa0b1-0000-4000-8000-00000000001a", NUMA: "-1", LocalCPUs: "0-23"},
}

// gpuMachine writes ht-2s-6c with gs and returns the sysfs and procfs
// roots.
func gpuMachine(t *testing.T, gs ...sysfstest.GPU) (sys, proc string) {
	t.Helper()
	sys, proc = filepath.Join(t.TempDir(), "sys"), filepath.Join(t.TempDir(), "proc")
	if err := sysfstest.WriteNamed(sys, "ht-2s-6c"); err != nil {
		t.Fatal(err)
	}
	if err := sysfstest.WriteNVIDIA(sys, proc, gs...); err != nil {
		t.Fatal(err)
	}
	return sys, proc
}

// nvidia is /dev/nvidia<minor> as a runtime lists it.
func nvidia(minor int64) *api.LinuxDevice {
	return &api.LinuxDevice{Path: fmt.Sprintf("/dev/nvidia%d", minor), Type: "c", Major: 195, Minor: minor}
}

// controlNodes are what CDI and PASS_DEVICE_SPECS add beside each GPU:
// nvidiactl, nvidia-modeset, nvidia-uvm(-tools) (a dynamic major) and a
// MIG capability node; none has locality, none gives a warning.
var controlNodes = []*api.LinuxDevice{
	{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255},
	{Path: "/dev/nvidia-modeset", Type: "c", Major: 195, Minor: 254},
	{Path: "/dev/nvidia-uvm", Type: "c", Major: 238, Minor: 0},
	{Path: "/dev/nvidia-uvm-tools", Type: "c", Major: 238, Minor: 1},
	{Path: "/dev/nvidia-caps/nvidia-cap1", Type: "c", Major: 241, Minor: 1},
}

// gpuDaemon starts a daemon on ht-2s-6c under single-numa-node, CPUs
// 0,12 reserved, reading sys and proc; it returns the log hook.
func gpuDaemon(t *testing.T, rt *fakeRuntime, sys, proc string) (*running, *logtest.Hook) {
	t.Helper()
	cfg := testConfig(t, rt, t.TempDir(), fmt.Sprintf("reserved_system_cpus = \"0,12\"\ntopology_manager_policy = \"single-numa-node\"\nsysfs_root = %q\nprocfs_root = %q\n", sys, proc))
	log := testLogger(t)
	log.SetLevel(logrus.DebugLevel)
	hook := logtest.NewLocal(log)
	return startDaemon(t, rt, cfg, loadFixture(t, "ht-2s-6c"), WithLogger(log)), hook
}

func warnings(hook *logtest.Hook) []string {
	var out []string
	for _, e := range hook.AllEntries() {
		if e.Level <= logrus.WarnLevel {
			s, _ := e.String()
			out = append(out, s)
		}
	}
	return out
}

// TestGPUByDeviceNode: without devices a Guaranteed 2-CPU container
// lands on node 0's lowest free core, {1,13}. With /dev/nvidia0 (node 1)
// and the control nodes, as CDI hands them over, it gets node 1's lowest
// core {6,18}; /state and the decision's line name the GPU; the control
// nodes give no warning. /dev/nvidia2 (numa_node -1, local_cpulist =
// node 1's CPUs) also lands on node 1 ({7,19}, the next core), and
// /dev/nvidia3 (-1, all CPUs) gives no hint: node 0, {1,13}.
func TestGPUByDeviceNode(t *testing.T) {
	sys, proc := gpuMachine(t, gpus...)
	rt := startRuntime(t)
	r, hook := gpuDaemon(t, rt, sys, proc)

	pod := rt.addPod(podSpec{uid: "gpu", name: "gpu", qos: "guaranteed"})
	c := rt.newCtr(pod, "c", 2000, 2000)
	c.Linux.Devices = append([]*api.LinuxDevice{nvidia(0)}, controlNodes...)
	if _, err := rt.CreateContainer(context.Background(), pod, c); err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(c); got != "6,18" {
		t.Fatalf("container with /dev/nvidia0 (node 1) got %q, want 6,18", got)
	}
	want := []ledger.DeviceView{{Device: "/dev/nvidia0 0000:86:00.0", NUMA: []int{1}}}
	if got := stateDevices(t, r.d, "gpu"); !sameDevices(got, want) {
		t.Fatalf("/state devices = %+v, want %+v", got, want)
	}
	admitted := false
	for _, e := range hook.AllEntries() {
		if e.Message == "container admitted" && fmt.Sprint(e.Data["devices"]) == "[/dev/nvidia0 0000:86:00.0 numa 1]" {
			admitted = true
		}
	}
	if !admitted {
		t.Fatal(`no "container admitted" line naming /dev/nvidia0 0000:86:00.0 numa 1`)
	}
	if w := warnings(hook); len(w) > 0 {
		t.Fatalf("warnings for a GPU and its control nodes: %q", w)
	}

	narrow := rt.addPod(podSpec{uid: "narrow", name: "narrow", qos: "guaranteed"})
	c2 := rt.newCtr(narrow, "c", 2000, 2000)
	c2.Linux.Devices = append([]*api.LinuxDevice{nvidia(2)}, controlNodes...)
	if _, err := rt.CreateContainer(context.Background(), narrow, c2); err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(c2); got != "7,19" {
		t.Fatalf("container with /dev/nvidia2 (numa_node -1, local_cpulist node 1) got %q, want 7,19", got)
	}

	wide := rt.addPod(podSpec{uid: "wide", name: "wide", qos: "guaranteed"})
	c3 := rt.newCtr(wide, "c", 2000, 2000)
	c3.Linux.Devices = []*api.LinuxDevice{nvidia(3)}
	if _, err := rt.CreateContainer(context.Background(), wide, c3); err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(c3); got != "1,13" {
		t.Fatalf("container with /dev/nvidia3 (numa_node -1, local_cpulist all) got %q, want 1,13 (no hint)", got)
	}
	if got := stateDevices(t, r.d, "wide"); len(got) != 0 {
		t.Fatalf("/state lists %+v for a GPU without locality", got)
	}
}

// TestGPUByVariable: NVIDIA_VISIBLE_DEVICES with the UUID of the
// node-1 GPU puts the container on node 1 ({6,18}); all, none, void,
// indices and MIG UUIDs give no hint and no warning ({1,13}); GPUs on
// both nodes are refused with TopologyAffinityError, by variable or by
// device node.
func TestGPUByVariable(t *testing.T) {
	sys, proc := gpuMachine(t, gpus...)
	rt := startRuntime(t)
	r, hook := gpuDaemon(t, rt, sys, proc)

	pod := rt.addPod(podSpec{uid: "env", name: "env", qos: "guaranteed"})
	c := rt.newCtr(pod, "c", 2000, 2000)
	c.Env = append(c.Env, "NVIDIA_VISIBLE_DEVICES="+strings.ToLower(gpus[0].UUID))
	if _, err := rt.CreateContainer(context.Background(), pod, c); err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(c); got != "6,18" {
		t.Fatalf("container with the node-1 GPU's UUID got %q, want 6,18", got)
	}
	want := []ledger.DeviceView{{Device: gpus[0].UUID + " 0000:86:00.0 via NVIDIA_VISIBLE_DEVICES", NUMA: []int{1}}}
	if got := stateDevices(t, r.d, "env"); !sameDevices(got, want) {
		t.Fatalf("/state devices = %+v, want %+v", got, want)
	}

	weak := rt.addPod(podSpec{uid: "weak", name: "weak", qos: "guaranteed"})
	c2 := rt.newCtr(weak, "c", 2000, 2000)
	c2.Env = append(c2.Env, "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=0,1,void,none,MIG-8686a0b1-0000-4000-8000-000000000086")
	if _, err := rt.CreateContainer(context.Background(), weak, c2); err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(c2); got != "1,13" {
		t.Fatalf("container with all/indices/MIG got %q, want 1,13 (no hint)", got)
	}
	if w := warnings(hook); len(w) > 0 {
		t.Fatalf("warnings: %q", w)
	}

	split := rt.addPod(podSpec{uid: "split", name: "split", qos: "guaranteed"})
	c3 := rt.newCtr(split, "c", 2000, 2000)
	c3.Env = append(c3.Env, "NVIDIA_VISIBLE_DEVICES="+gpus[0].UUID+","+gpus[1].UUID)
	if _, err := rt.CreateContainer(context.Background(), split, c3); err == nil || !strings.Contains(err.Error(), "TopologyAffinityError") {
		t.Fatalf("GPUs on nodes 0 and 1 by variable: err = %v, want TopologyAffinityError", err)
	}
	split2 := rt.addPod(podSpec{uid: "split2", name: "split2", qos: "guaranteed"})
	c4 := rt.newCtr(split2, "c", 2000, 2000)
	c4.Linux.Devices = []*api.LinuxDevice{nvidia(0), nvidia(1)}
	if _, err := rt.CreateContainer(context.Background(), split2, c4); err == nil || !strings.Contains(err.Error(), "TopologyAffinityError") {
		t.Fatalf("GPUs on nodes 0 and 1 by device node: err = %v, want TopologyAffinityError", err)
	}
}

// TestGPUInformationMalformed: a truncated information file is a
// warning naming it and no device hint for a container whose GPU it
// would have described ({1,13}); a GPU whose own file is fine still
// steers ({6,18}). A minor or UUID no file has is a warning too.
func TestGPUInformationMalformed(t *testing.T) {
	broken := gpus[2]
	info := sysfstest.NVIDIAInformation(broken)
	broken.Information = info[:strings.Index(info, "Device Minor")]
	sys, proc := gpuMachine(t, gpus[0], gpus[1], broken)
	rt := startRuntime(t)
	_, hook := gpuDaemon(t, rt, sys, proc)

	pod := rt.addPod(podSpec{uid: "bad", name: "bad", qos: "guaranteed"})
	c := rt.newCtr(pod, "c", 2000, 2000)
	c.Linux.Devices = []*api.LinuxDevice{nvidia(2)}
	if _, err := rt.CreateContainer(context.Background(), pod, c); err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(c); got != "1,13" {
		t.Fatalf("container whose GPU's file is truncated got %q, want 1,13 (no hint)", got)
	}
	w := warnings(hook)
	if len(w) != 1 || !strings.Contains(w[0], request.NoDeviceHintMsg) || !strings.Contains(w[0], "0000:d9:00.0/information") ||
		!strings.Contains(w[0], "no Device Minor line") {
		t.Fatalf("warnings = %q, want one naming 0000:d9:00.0/information", w)
	}

	good := rt.addPod(podSpec{uid: "good", name: "good", qos: "guaranteed"})
	c2 := rt.newCtr(good, "c", 2000, 2000)
	c2.Linux.Devices = []*api.LinuxDevice{nvidia(0)}
	if _, err := rt.CreateContainer(context.Background(), good, c2); err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(c2); got != "6,18" {
		t.Fatalf("container with a well-described GPU got %q, want 6,18", got)
	}

	hook.Reset()
	unknown := rt.addPod(podSpec{uid: "unknown", name: "unknown", qos: "guaranteed"})
	c3 := rt.newCtr(unknown, "c", 2000, 2000)
	c3.Env = append(c3.Env, "NVIDIA_VISIBLE_DEVICES=GPU-00000000-0000-0000-0000-000000000000")
	if _, err := rt.CreateContainer(context.Background(), unknown, c3); err != nil {
		t.Fatal(err)
	}
	if w := warnings(hook); len(w) != 1 || !strings.Contains(w[0], "no GPU with GPU UUID GPU-00000000-0000-0000-0000-000000000000") {
		t.Fatalf("warnings = %q, want one for the unknown UUID", w)
	}
}

// TestGPURealH200: the real host's files. /dev/nvidia0 and its UUID map
// to 0000:00:06.0, whose numa_node is -1 and local_cpulist 0-15 covers
// the one node: no device hint, no warning, and /state lists no device.
func TestGPURealH200(t *testing.T) {
	sys, proc, err := sysfstest.WriteRealH200(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	topo, err := sysfs.Read(sys)
	if err != nil {
		t.Fatal(err)
	}
	rt := startRuntime(t)
	cfg := testConfig(t, rt, t.TempDir(), fmt.Sprintf("reserved_system_cpus = \"0\"\ntopology_manager_policy = \"single-numa-node\"\nsysfs_root = %q\nprocfs_root = %q\n", sys, proc))
	log := testLogger(t)
	log.SetLevel(logrus.DebugLevel)
	hook := logtest.NewLocal(log)
	r := startDaemon(t, rt, cfg, topo, WithLogger(log))

	pod := rt.addPod(podSpec{uid: "h200", name: "h200", qos: "guaranteed"})
	c := rt.newCtr(pod, "c", 2000, 2000)
	c.Linux.Devices = append([]*api.LinuxDevice{nvidia(0)}, controlNodes...)
	c.Env = append(c.Env, "NVIDIA_VISIBLE_DEVICES="+sysfstest.RealH200UUID)
	if _, err := rt.CreateContainer(context.Background(), pod, c); err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(c); got != "1-2" {
		t.Fatalf("container got %q, want 1-2", got)
	}
	if got := stateDevices(t, r.d, "h200"); len(got) != 0 {
		t.Fatalf("/state lists %+v; the H200 has no NUMA node", got)
	}
	if w := warnings(hook); len(w) > 0 {
		t.Fatalf("warnings: %q", w)
	}
	considered := false
	for _, e := range hook.AllEntries() {
		if e.Message == "device hints" && e.Data["considered"] == 5 && e.Data["numa"] == "" {
			considered = true
		}
	}
	if !considered {
		// nvidia0 and the GPU's UUID, and nvidia-uvm, nvidia-uvm-tools and
		// nvidia-cap1 looked up in sysfs (nvidiactl and nvidia-modeset are
		// left out), all without a node.
		t.Fatal(`no "device hints" line with 5 devices considered and no node`)
	}
}

// draMount is the bind mount KEP-5304's CDI spec adds: the driver's host
// file at the container's well-known path.
func draMount(src, claim, request, driver string) *api.Mount {
	return &api.Mount{Source: src, Destination: "/var/run/dra-device-attributes/" + claim + "/" + request + "/" + driver + "-metadata.json",
		Type: "bind", Options: []string{"ro", "bind"}}
}

func draMetadata(claim, attrs string) string {
	return `{"apiVersion": "metadata.resource.k8s.io/v1alpha1", "kind": "DeviceMetadata",
	 "metadata": {"name": "` + claim + `", "namespace": "default"},
	 "requests": [{"name": "gpu", "devices": [{"name": "gpu-0", "driver": "gpu.example.com", "pool": "p",
	   "attributes": {` + attrs + `}}]}]}`
}

// TestDRAMetadata: a DRA claim's metadata file, found through the
// container's mounts only: numaNode 1 puts it on node 1 ({6,18}), a
// pciBusID on node 1 likewise ({7,19}); the same file mounted elsewhere
// is not read ({1,13}), and a truncated file is a warning naming it and
// no hint ({2,14}, node 0's next core).
func TestDRAMetadata(t *testing.T) {
	sys, proc := gpuMachine(t, gpus...)
	host := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(host, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	byNode := write("node.json", draMetadata("claim-a", `"resource.kubernetes.io/numaNode": {"int": 1}`))
	byPCI := write("pci.json", draMetadata("claim-b", `"resource.kubernetes.io/pciBusID": {"string": "0000:86:00.0"}`))
	full := draMetadata("claim-c", `"resource.kubernetes.io/pciBusID": {"string": "0000:86:00.0"}`)
	cut := write("cut.json", full[:len(full)/2])
	rt := startRuntime(t)
	r, hook := gpuDaemon(t, rt, sys, proc)

	run := func(name string, m *api.Mount) *api.Container {
		t.Helper()
		pod := rt.addPod(podSpec{uid: name, name: name, qos: "guaranteed"})
		c := rt.newCtr(pod, "c", 2000, 2000)
		c.Mounts = append(c.Mounts, m)
		if _, err := rt.CreateContainer(context.Background(), pod, c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	if got := rt.cpus(run("node", draMount(byNode, "claim-a", "gpu", "gpu.example.com"))); got != "6,18" {
		t.Fatalf("numaNode 1: got %q, want 6,18", got)
	}
	want := []ledger.DeviceView{{Device: "DRA claim claim-a request gpu gpu.example.com/gpu-0", NUMA: []int{1}}}
	if got := stateDevices(t, r.d, "node"); !sameDevices(got, want) {
		t.Fatalf("/state devices = %+v, want %+v", got, want)
	}
	if got := rt.cpus(run("pci", draMount(byPCI, "claim-b", "gpu", "gpu.example.com"))); got != "7,19" {
		t.Fatalf("pciBusID on node 1: got %q, want 7,19", got)
	}
	elsewhere := &api.Mount{Source: byNode, Destination: "/etc/metadata.json", Type: "bind"}
	if got := rt.cpus(run("elsewhere", elsewhere)); got != "1,13" {
		t.Fatalf("metadata mounted elsewhere: got %q, want 1,13", got)
	}
	if w := warnings(hook); len(w) > 0 {
		t.Fatalf("warnings: %q", w)
	}
	if got := rt.cpus(run("cut", draMount(cut, "claim-c", "gpu", "gpu.example.com"))); got != "2,14" {
		t.Fatalf("truncated metadata: got %q, want 2,14", got)
	}
	if w := warnings(hook); len(w) != 1 || !strings.Contains(w[0], cut) || !strings.Contains(w[0], "not DeviceMetadata JSON") {
		t.Fatalf("warnings = %q, want one naming %s", w, cut)
	}

	// A metadata file the plugin cannot see (the kubelet's plugin
	// directory not mounted into its container) is a warning naming it;
	// the container's GPU still steers it to node 1 ({8,20}).
	hook.Reset()
	pod := rt.addPod(podSpec{uid: "unseen", name: "unseen", qos: "guaranteed"})
	c := rt.newCtr(pod, "c", 2000, 2000)
	missing := filepath.Join(host, "not-mounted", "metadata.json")
	c.Mounts = append(c.Mounts, draMount(missing, "claim-d", "gpu", "gpu.example.com"))
	c.Linux.Devices = []*api.LinuxDevice{nvidia(0)}
	if _, err := rt.CreateContainer(context.Background(), pod, c); err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(c); got != "8,20" {
		t.Fatalf("GPU on node 1 beside an unseen metadata file: got %q, want 8,20", got)
	}
	if w := warnings(hook); len(w) != 1 || !strings.Contains(w[0], missing) || !strings.Contains(w[0], "DRA metadata file not found") {
		t.Fatalf("warnings = %q, want one naming %s", w, missing)
	}
}
