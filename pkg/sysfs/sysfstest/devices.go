package sysfstest

import (
	"os"
	"path/filepath"
)

// DeviceFiles and DeviceLinks are a device tree laid out as the kernel
// lays out /sys, with PCI functions on two NUMA nodes, for the device hint
// provider's tests. WriteDevices writes them under a /sys root (next to a
// CPU fixture or alone).
//
// NUMA node 0 (root port 0000:3a:00.0):
//   - NIC PF 0000:3b:00.0 and its VFs 0000:3b:02.0, 0000:3b:02.1;
//   - VF 0000:3b:02.0 is IOMMU group 40, VFIO group device 242:0;
//   - GPU 0000:17:00.0 with DRM render node renderD128 (226:128);
//   - accelerator 0000:18:00.0 with accel0 (261:0).
//
// NUMA node 1 (root port 0000:ae:00.0):
//   - NIC PF 0000:af:00.0 and VFs 0000:af:02.0, 0000:af:02.1, 0000:af:02.2;
//   - VF 0000:af:02.0 is IOMMU group 90 (VFIO 242:1); VFs 0000:af:02.1 and
//     0000:af:02.2 share IOMMU group 91 (VFIO 242:2);
//   - RDMA verbs device uverbs0 (231:192) on the PF 0000:af:00.0;
//   - GPU 0000:d8:00.0 with renderD129 (226:129), and the vfio cdev
//     vfio0 (237:0) of VF 0000:af:02.1.
//
// No locality, or both nodes:
//   - function 0000:00:1f.0 has numa_node -1; it is IOMMU group 7 (242:3);
//   - /dev/vfio/vfio, the VFIO container device (misc 10:196), is virtual;
//   - (both nodes) IOMMU group 12 (242:4) holds 0000:3b:02.1 (node 0) and
//     0000:af:00.0 (node 1), so its VFIO device gives nodes 0 and 1.
//
// /dev/nvidiaN (195:N) has no entry: the NVIDIA driver registers no
// class device, so sysfs has no 195:N.
var DeviceFiles = map[string]string{
	"devices/pci0000:3a/0000:3a:00.0/numa_node":                                 "0\n",
	"devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/numa_node":                    "0\n",
	"devices/pci0000:3a/0000:3a:00.0/0000:3b:02.0/numa_node":                    "0\n",
	"devices/pci0000:3a/0000:3a:00.0/0000:3b:02.1/numa_node":                    "0\n",
	"devices/pci0000:3a/0000:3a:00.0/0000:17:00.0/numa_node":                    "0\n",
	"devices/pci0000:3a/0000:3a:00.0/0000:17:00.0/drm/renderD128/dev":           "226:128\n",
	"devices/pci0000:3a/0000:3a:00.0/0000:18:00.0/numa_node":                    "0\n",
	"devices/pci0000:3a/0000:3a:00.0/0000:18:00.0/accel/accel0/dev":             "261:0\n",
	"devices/pci0000:ae/0000:ae:00.0/numa_node":                                 "1\n",
	"devices/pci0000:ae/0000:ae:00.0/0000:af:00.0/numa_node":                    "1\n",
	"devices/pci0000:ae/0000:ae:00.0/0000:af:00.0/infiniband_verbs/uverbs0/dev": "231:192\n",
	"devices/pci0000:ae/0000:ae:00.0/0000:af:02.0/numa_node":                    "1\n",
	"devices/pci0000:ae/0000:ae:00.0/0000:af:02.1/numa_node":                    "1\n",
	"devices/pci0000:ae/0000:ae:00.0/0000:af:02.1/vfio-dev/vfio0/dev":           "237:0\n",
	"devices/pci0000:ae/0000:ae:00.0/0000:af:02.2/numa_node":                    "1\n",
	"devices/pci0000:ae/0000:ae:00.0/0000:d8:00.0/numa_node":                    "1\n",
	"devices/pci0000:ae/0000:ae:00.0/0000:d8:00.0/drm/renderD129/dev":           "226:129\n",
	"devices/pci0000:00/0000:00:1f.0/numa_node":                                 "-1\n",
	"devices/virtual/vfio/40/dev":                                               "242:0\n",
	"devices/virtual/vfio/90/dev":                                               "242:1\n",
	"devices/virtual/vfio/91/dev":                                               "242:2\n",
	"devices/virtual/vfio/7/dev":                                                "242:3\n",
	"devices/virtual/vfio/12/dev":                                               "242:4\n",
	"devices/virtual/misc/vfio/dev":                                             "10:196\n",
}

// DeviceLinks are the tree's symlinks (path relative to the /sys root ->
// target, relative as the kernel writes them).
var DeviceLinks = map[string]string{
	"dev/char/226:128": "../../devices/pci0000:3a/0000:3a:00.0/0000:17:00.0/drm/renderD128",
	"dev/char/261:0":   "../../devices/pci0000:3a/0000:3a:00.0/0000:18:00.0/accel/accel0",
	"dev/char/231:192": "../../devices/pci0000:ae/0000:ae:00.0/0000:af:00.0/infiniband_verbs/uverbs0",
	"dev/char/226:129": "../../devices/pci0000:ae/0000:ae:00.0/0000:d8:00.0/drm/renderD129",
	"dev/char/237:0":   "../../devices/pci0000:ae/0000:ae:00.0/0000:af:02.1/vfio-dev/vfio0",
	"dev/char/242:0":   "../../devices/virtual/vfio/40",
	"dev/char/242:1":   "../../devices/virtual/vfio/90",
	"dev/char/242:2":   "../../devices/virtual/vfio/91",
	"dev/char/242:3":   "../../devices/virtual/vfio/7",
	"dev/char/242:4":   "../../devices/virtual/vfio/12",
	"dev/char/10:196":  "../../devices/virtual/misc/vfio",

	"kernel/iommu_groups/40/devices/0000:3b:02.0": "../../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:02.0",
	"kernel/iommu_groups/90/devices/0000:af:02.0": "../../../../devices/pci0000:ae/0000:ae:00.0/0000:af:02.0",
	"kernel/iommu_groups/91/devices/0000:af:02.1": "../../../../devices/pci0000:ae/0000:ae:00.0/0000:af:02.1",
	"kernel/iommu_groups/91/devices/0000:af:02.2": "../../../../devices/pci0000:ae/0000:ae:00.0/0000:af:02.2",
	"kernel/iommu_groups/7/devices/0000:00:1f.0":  "../../../../devices/pci0000:00/0000:00:1f.0",
	"kernel/iommu_groups/12/devices/0000:3b:02.1": "../../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:02.1",
	"kernel/iommu_groups/12/devices/0000:af:00.0": "../../../../devices/pci0000:ae/0000:ae:00.0/0000:af:00.0",

	"bus/pci/devices/0000:3b:00.0": "../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0",
	"bus/pci/devices/0000:3b:02.0": "../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:02.0",
	"bus/pci/devices/0000:3b:02.1": "../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:02.1",
	"bus/pci/devices/0000:17:00.0": "../../../devices/pci0000:3a/0000:3a:00.0/0000:17:00.0",
	"bus/pci/devices/0000:af:00.0": "../../../devices/pci0000:ae/0000:ae:00.0/0000:af:00.0",
	"bus/pci/devices/0000:af:02.0": "../../../devices/pci0000:ae/0000:ae:00.0/0000:af:02.0",
	"bus/pci/devices/0000:af:02.1": "../../../devices/pci0000:ae/0000:ae:00.0/0000:af:02.1",
	"bus/pci/devices/0000:af:02.2": "../../../devices/pci0000:ae/0000:ae:00.0/0000:af:02.2",
	"bus/pci/devices/0000:d8:00.0": "../../../devices/pci0000:ae/0000:ae:00.0/0000:d8:00.0",
	"bus/pci/devices/0000:00:1f.0": "../../../devices/pci0000:00/0000:00:1f.0",
}

// WriteDevices writes DeviceFiles and DeviceLinks under dir, the /sys root.
func WriteDevices(dir string) error {
	for p, content := range DeviceFiles {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			return err
		}
	}
	for p, target := range DeviceLinks {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(target, full); err != nil {
			return err
		}
	}
	return nil
}
