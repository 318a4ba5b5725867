//go:build testhooks

package churn

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-cpualign/nri-cpualign/internal/invariant"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// Device hints (docs/devices.md). Where the node has devices, a /sys root
// holds the fixture machine and sysfstest's device tree (PCI functions on
// NUMA nodes 0 and 1), and some containers are given one device as the
// runtime lists it (a VFIO group, a DRM render node, an RDMA or
// accelerator device, an NVIDIA GPU) or as a device plugin names it
// (PCIDEVICE_*, NVIDIA_VISIBLE_DEVICES). Under single-numa-node an exclusive container admitted
// afresh with a device on a node must have all its CPUs on that node (it
// may be refused, with a reason word, when the node has too few free).

// device is one way to give a container a device and the NUMA node its
// PCI function sits on (-1: no locality).
type device struct {
	name string
	devs []*api.LinuxDevice
	env  string
	// dra is a DRA claim's device attributes, mounted as KEP-5304's
	// metadata file (the runtime mounts the host file below
	// /var/run/dra-device-attributes).
	dra  string
	node int
}

func char(path string, major, minor int64) *api.LinuxDevice {
	return &api.LinuxDevice{Path: path, Type: "c", Major: major, Minor: minor}
}

// vfioCtr is the VFIO container device every DPDK pod also gets.
var vfioCtr = char("/dev/vfio/vfio", 10, 196)

var devices = []device{
	{name: "vfio-40", devs: []*api.LinuxDevice{vfioCtr, char("/dev/vfio/40", 242, 0)}, node: 0},
	{name: "vfio-90", devs: []*api.LinuxDevice{vfioCtr, char("/dev/vfio/90", 242, 1)}, node: 1},
	{name: "render128", devs: []*api.LinuxDevice{char("/dev/dri/renderD128", 226, 128)}, node: 0},
	{name: "render129", devs: []*api.LinuxDevice{char("/dev/dri/renderD129", 226, 129)}, node: 1},
	{name: "accel0", devs: []*api.LinuxDevice{char("/dev/accel/accel0", 261, 0)}, node: 0},
	{name: "uverbs0", devs: []*api.LinuxDevice{char("/dev/infiniband/uverbs0", 231, 192)}, node: 1},
	{name: "sriov-af", env: "PCIDEVICE_INTEL_COM_SRIOV_NETDEVICE=0000:af:02.2", node: 1},
	{name: "sriov-3b", env: "PCIDEVICE_INTEL_COM_SRIOV_NETDEVICE=0000:3b:02.0", node: 0},
	{name: "nvidia0", devs: []*api.LinuxDevice{char("/dev/nvidia0", 195, 0), char("/dev/nvidiactl", 195, 255), char("/dev/nvidia-uvm", 238, 0)}, node: 1},
	{name: "nvidia1-uuid", env: "NVIDIA_VISIBLE_DEVICES=" + gpus[1].UUID, node: 0},
	{name: "nvidia-all", env: "NVIDIA_VISIBLE_DEVICES=all", node: -1},
	{name: "vfio-7", devs: []*api.LinuxDevice{char("/dev/vfio/7", 242, 3)}, node: -1},
	{name: "null", devs: []*api.LinuxDevice{char("/dev/null", 1, 3)}, node: -1},
	{name: "dra-numa0", dra: `"resource.kubernetes.io/numaNode": {"int": 0}`, node: 0},
	{name: "dra-numa1", dra: `"resource.kubernetes.io/numaNode": {"int": 1}`, node: 1},
	{name: "dra-pci-86", dra: `"resource.kubernetes.io/pciBusID": {"string": "` + gpus[0].PCI + `"}`, node: 1},
}

// gpus are two NVIDIA GPUs, minor 0 on node 1 and minor 1 on node 0 (the
// driver's procfs files map minors and UUIDs to PCI functions).
var gpus = []sysfstest.GPU{
	{PCI: "0000:86:00.0", Minor: 0, UUID: "GPU-8686a0b1-0000-4000-8000-000000000086", NUMA: "1"},
	{PCI: "0000:19:00.0", Minor: 1, UUID: "GPU-1919a0b1-0000-4000-8000-000000000019", NUMA: "0"},
}

// deviceTree writes the /sys and /proc roots under dir and returns their
// configuration lines.
func (c *churn) deviceTree(dir string) string {
	sys, proc := filepath.Join(dir, "sys"), filepath.Join(dir, "proc")
	if err := sysfstest.WriteNamed(sys, c.s.fixture); err != nil {
		c.t.Fatal(err)
	}
	if err := sysfstest.WriteDevices(sys); err != nil {
		c.t.Fatal(err)
	}
	if err := sysfstest.WriteNVIDIA(sys, proc, gpus...); err != nil {
		c.t.Fatal(err)
	}
	return fmt.Sprintf("sysfs_root = %q\nprocfs_root = %q\n", sys, proc)
}

// deviceOf is the device of pod and name: the first container of a name
// draws one, or none, where the node has devices.
func (c *churn) deviceOf(key invariant.Key) device {
	d, ok := c.devs[key]
	if ok || c.s.node != "devices" {
		return d
	}
	d = device{node: -1}
	if c.rng.Intn(100) < 50 {
		d = devices[c.rng.Intn(len(devices))]
		c.faults["device:"+d.name]++
	}
	c.devs[key] = d
	return d
}

// withDevices gives ct the device of its pod and name.
func (c *churn) withDevices(p *api.PodSandbox, ct *api.Container) {
	d := c.deviceOf(invariant.Key{Pod: p.Uid, Container: ct.Name})
	ct.Linux.Devices = append(ct.Linux.Devices, d.devs...)
	if d.env != "" {
		ct.Env = append(ct.Env, d.env)
	}
	if d.dra != "" {
		ct.Mounts = append(ct.Mounts, &api.Mount{Source: c.draFile(d), Type: "bind", Options: []string{"ro", "bind"},
			Destination: "/var/run/dra-device-attributes/claim-" + d.name + "/gpu/gpu.example.com-metadata.json"})
	}
}

// draFile is the host file of d's DRA metadata (written once).
func (c *churn) draFile(d device) string {
	p := filepath.Join(filepath.Dir(c.stateDir), d.name+"-metadata.json")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	doc := `{"apiVersion": "metadata.resource.k8s.io/v1alpha1", "kind": "DeviceMetadata",
	 "metadata": {"name": "claim-` + d.name + `", "namespace": "default"},
	 "requests": [{"name": "gpu", "devices": [{"name": "gpu-0", "driver": "gpu.example.com", "pool": "p",
	   "attributes": {` + d.dra + `}}]}]}`
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		c.t.Fatal(err)
	}
	return p
}

// deviceNode is the NUMA node of the device the next container of pod
// and name will have, when it is to be placed afresh (no assignment of
// that name yet); -1 otherwise.
func (c *churn) deviceNode(p *api.PodSandbox, name string) int {
	if c.s.node != "devices" {
		return -1
	}
	d := c.deviceOf(invariant.Key{Pod: p.Uid, Container: name})
	if d.node < 0 {
		return -1
	}
	e, st := c.d.EngineState()
	if _, held := e.Assignment(st, p.Uid, name); held {
		return -1
	}
	return d.node
}
