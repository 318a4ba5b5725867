package policy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// TestDeviceHintFromSysfs: on ht-2s-6c (NUMA 0 = 0-5,12-17, NUMA 1 =
// 6-11,18-23, core k = {k, k+12}) a VFIO char device 240:0 hangs off a PCI
// function whose numa_node is 1. Its hints pull a 4-CPU container, which
// would otherwise land on node 0, onto node 1.
func TestDeviceHintFromSysfs(t *testing.T) {
	root := t.TempDir()
	if err := sysfstest.WriteNamed(root, "ht-2s-6c"); err != nil {
		t.Fatal(err)
	}
	fn := filepath.Join(root, "devices", "pci0000:80", "0000:80:03.0")
	dev := filepath.Join(fn, "vfio-dev", "vfio0")
	for _, d := range []string{dev, filepath.Join(root, "dev", "char")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(fn, "numa_node"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../devices/pci0000:80/0000:80:03.0/vfio-dev/vfio0", filepath.Join(root, "dev", "char", "240:0")); err != nil {
		t.Fatal(err)
	}
	topo, err := sysfs.Read(root)
	if err != nil {
		t.Fatal(err)
	}
	node, ok, err := sysfs.DeviceNUMANode(root, "char", 240, 0)
	if err != nil || !ok || node != 1 {
		t.Fatalf("DeviceNUMANode = %d, %t, %v; want 1, true", node, ok, err)
	}
	for _, topoPolicy := range []string{"best-effort", "restricted", "single-numa-node"} {
		t.Run(topoPolicy, func(t *testing.T) {
			e, err := policy.New(topo, policy.Config{CPUManagerPolicy: "static", TopologyPolicy: topoPolicy})
			if err != nil {
				t.Fatal(err)
			}
			// Without the device: node 0, its two lowest whole cores.
			_, d := add(t, e, e.NewState(), guaranteed("p", "c", 4))
			check(t, d, want{cpus: "0-1,12-13", mems: "0-1", exclusive: true, numa: "0", preferred: true})

			req := guaranteed("p", "c", 4)
			req.Hints = map[string][]hints.Hint{"vfio/240:0": e.DeviceHints([]int{node})}
			_, d = add(t, e, e.NewState(), req)
			check(t, d, want{cpus: "6-7,18-19", mems: "0-1", exclusive: true, numa: "1", preferred: true})
		})
	}
}

// TestPodScopeLaterDeviceHints: under the pod scope on ht-2s-6c a pod of
// 4 CPUs whose first container's device is on node 1 gets affinity {1}
// (cores 6 and 7 for two 2-CPU containers). A later container with a
// device on node 0 merges {0} with the pod's {1}: nothing preferred, so
// restricted and single-numa-node refuse it with TopologyAffinityError,
// as the kubelet's pod-level merge would have refused the pod; best-effort
// places it within the pod's affinity. A later container with a device on
// node 1, or none, joins.
func TestPodScopeLaterDeviceHints(t *testing.T) {
	topo := sysfstest.Load(t, "ht-2s-6c")
	for _, tc := range []struct {
		policy string
		refuse bool
	}{{"best-effort", false}, {"restricted", true}, {"single-numa-node", true}} {
		t.Run(tc.policy, func(t *testing.T) {
			e, err := policy.New(topo, policy.Config{CPUManagerPolicy: "static", TopologyPolicy: tc.policy, TopologyScope: hints.ScopePod})
			if err != nil {
				t.Fatal(err)
			}
			dev := func(req policy.Request, node int) policy.Request {
				req.PodCPURequestMilli = 4000
				req.Hints = map[string][]hints.Hint{"devices": e.DeviceHints([]int{node})}
				return req
			}
			st, d := add(t, e, e.NewState(), dev(guaranteed("p", "a", 2), 1))
			check(t, d, want{cpus: "6,18", mems: "0-1", exclusive: true, numa: "1", preferred: true})
			_, _, err = e.Add(st, dev(guaranteed("p", "b", 2), 0))
			if tc.refuse {
				if err == nil || !strings.Contains(err.Error(), "TopologyAffinityError") {
					t.Fatalf("later container with a node-0 device: err = %v, want TopologyAffinityError", err)
				}
			} else if err != nil {
				t.Fatalf("best-effort refused: %v", err)
			}
			_, d = add(t, e, st, dev(guaranteed("p", "b", 2), 1))
			check(t, d, want{cpus: "7,19", mems: "0-1", exclusive: true, numa: "1", preferred: true})
		})
	}
}
