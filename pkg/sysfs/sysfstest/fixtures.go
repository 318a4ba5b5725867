package sysfstest

import (
	"fmt"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

type named struct {
	name string
	spec Spec
}

// fixtures is the list of named machines. Each comment gives the CPU
// numbering the kernel would show and what the reader makes of it; "core X"
// is the machine-wide core id (= lowest thread id). The uncore (L3) column
// follows the kubelet's rule: an L3 shared by exactly (cores of the NUMA
// node × threads of the core) CPUs is a node-level cache, and the socket id
// is used instead.
func fixtures() []named {
	return []named{
		// 8 CPUs. core k = {k, k+4}, k = 0..3. One L3 shared by all 8 =
		// 4 cores × 2 threads of node 0 -> uncore falls back to socket 0.
		{"ht-1s-4c", Spec{
			Description: "1 socket, 4 cores, SMT2, siblings N and N+4",
			Sockets:     1, CoresPerSocket: 4, ThreadsPerCore: 2,
		}},
		// 8 CPUs. core 2k = {2k, 2k+1}, k = 0..3 (cores 0, 2, 4, 6). Uncore:
		// socket 0 (node-level L3, as ht-1s-4c).
		{"ht-1s-4c-adjacent", Spec{
			Description: "1 socket, 4 cores, SMT2, siblings adjacent",
			Sockets:     1, CoresPerSocket: 4, ThreadsPerCore: 2, Numbering: SiblingsAdjacent,
		}},
		// 24 CPUs, the kubelet's topoDualSocketHT. socket 0 = 0-5,12-17,
		// socket 1 = 6-11,18-23; core k = {k, k+12}, k = 0..11. NUMA node =
		// socket. Each socket's L3 (12 CPUs) = 6 cores × 2 threads of its
		// node -> uncore = socket id (0, 1).
		{"ht-2s-6c", Spec{
			Description: "2 sockets x 6 cores, SMT2, siblings N and N+12, 1 NUMA node per socket",
			Sockets:     2, CoresPerSocket: 6, ThreadsPerCore: 2, DistanceRemote: 21,
			// 16 GiB per node, of it 1 GiB of 2 MiB pages and 1 GiB of 1 GiB pages.
			Hugepages: map[int]int{2048: 512, 1048576: 1},
		}},
		// 80 CPUs. core k = {k, k+40}, k = 0..39; NUMA n (0..3) = cores
		// 10n..10n+9 = CPUs 10n..10n+9 and 40+10n..40+10n+9; socket 0 = NUMA
		// 0,1. One L3 per socket (40 CPUs) != 10 cores × 2 -> uncore = L3 id
		// = 0, 1. Distances 10 self, 11 same socket, 21 other socket.
		{"ht-2s-4numa-80", Spec{
			Description: "2 sockets, 2 NUMA nodes per socket, 10 cores per NUMA node, SMT2, siblings N and N+40",
			Sockets:     2, NUMAPerSocket: 2, CoresPerSocket: 20, ThreadsPerCore: 2,
			DistanceSameSocket: 11, DistanceRemote: 21,
			// 16 GiB per node, of it 512 MiB of 2 MiB pages.
			Hugepages: map[int]int{2048: 256},
		}},
		// 128 CPUs. core k = {k, k+64}, k = 0..63. L3 g (0..15) = cores
		// 4g..4g+3 = CPUs 4g..4g+3,64+4g..64+4g+3 (one CCX each). NPS=1:
		// one NUMA node.
		{"epyc-7702p-smt", Spec{
			Description: "AMD EPYC 7702P: 1P 64C SMT on, NPS=1, 16 L3 of 4 cores",
			Sockets:     1, CoresPerSocket: 64, ThreadsPerCore: 2, CoresPerL3: 4,
		}},
		// 64 CPUs, core k = {k}. L3 g (0..15) = CPUs 4g..4g+3.
		{"epyc-7702p-nosmt", Spec{
			Description: "AMD EPYC 7702P: 1P 64C SMT off, NPS=1, 16 L3 of 4 cores",
			Sockets:     1, CoresPerSocket: 64, ThreadsPerCore: 1, CoresPerL3: 4,
		}},
		// 64 CPUs. core k = {k, k+32}, k = 0..31; socket 0 = cores 0-15 =
		// CPUs 0-15,32-47, socket 1 = 16-31,48-63; NUMA node = socket.
		// L3 g (0..7) = cores 4g..4g+3 (L3 0-3 on socket 0, 4-7 on 1).
		// Distances 10 self, 32 other socket.
		{"epyc-7303-2p", Spec{
			Description: "AMD EPYC 7303: 2P 16C per socket, SMT on, NPS=1, 4 L3 of 4 cores per socket",
			Sockets:     2, CoresPerSocket: 16, ThreadsPerCore: 2, CoresPerL3: 4,
			DistanceRemote: 32,
		}},
		// 256 CPUs. core k = {k, k+128}, k = 0..127. L3 g (0..15) = cores
		// 8g..8g+7 = CPUs 8g..8g+7,128+8g..128+8g+7.
		{"epyc-9754", Spec{
			Description: "AMD EPYC 9754: 1P 128C SMT on, NPS=1, 16 L3 of 8 cores",
			Sockets:     1, CoresPerSocket: 128, ThreadsPerCore: 2, CoresPerL3: 8,
		}},
		// 192 CPUs, core k = {k}. socket 0 = 0-95, socket 1 = 96-191; NPS=2:
		// NUMA n (0..3) = CPUs 48n..48n+47 (half a socket). L3 g (0..23) =
		// CPUs 8g..8g+7, six per NUMA node. Distances 10 self, 11 same
		// socket, 32 other socket.
		{"epyc-9654-2p-nps2", Spec{
			Description: "AMD EPYC 9654: 2P 96C per socket, SMT off, NPS=2, 12 L3 of 8 cores per socket",
			Sockets:     2, NUMAPerSocket: 2, CoresPerSocket: 96, ThreadsPerCore: 1, CoresPerL3: 8,
			DistanceSameSocket: 11, DistanceRemote: 32,
		}},
		// 240 CPUs. CPUs 0-59 = first threads of socket 0, 60-119 of socket
		// 1, 120-179 second threads of socket 0, 180-239 of socket 1: core k
		// = {k, k+120}, k = 0..119. SNC4: NUMA node = socket×4 + (core index
		// within socket)/15, so NUMA 0 = CPUs 0-14,120-134, NUMA 4 = 60-74,
		// 180-194. One L3 per socket (120 CPUs) != 15 cores × 2 -> uncore =
		// L3 id = 0, 1, spanning 4 NUMA nodes each. Distances 10 self, 12
		// same socket, 21 other socket.
		{"xeon-8490h-2p-snc", Spec{
			Description: "Intel Xeon Platinum 8490H: 2P 60C per socket, HT, SNC4 (4 NUMA nodes per socket), one L3 per socket",
			Sockets:     2, NUMAPerSocket: 4, CoresPerSocket: 60, ThreadsPerCore: 2,
			DistanceSameSocket: 12, DistanceRemote: 21,
		}},
		// 24 CPUs. P-cores: core 2k = {2k, 2k+1}, k = 0..7 (CPUs 0-15);
		// E-cores: core 16+j = {16+j}, j = 0..7. 16 cores: CPUsPerCore =
		// 24/16 = 1 (kubelet average). One L3 (id 0) shared by all 24 CPUs:
		// for a P-core the node-level size is 16 cores × 2 = 32, for an
		// E-core 16 × 1 = 16; 24 matches neither, so the kubelet keeps the
		// L3 id 0 (which equals socket 0 anyway).
		{"i7-12850hx", Spec{
			Description: "Intel Core i7-12850HX: 1P hybrid, 8 P-cores with HT (CPUs 0-15, siblings adjacent) + 8 E-cores (CPUs 16-23), one L3",
			Sockets:     1, CoresPerSocket: 8, ThreadsPerCore: 2, ECoresPerSocket: 8,
			Numbering: SiblingsAdjacent,
		}},
		// 128 CPUs, core k = {k}. L3 g (0..15) = CPUs 8g..8g+7.
		{"ampere-altra", Spec{
			Description: "Ampere Altra: 1P 128C no SMT, 16 L3 of 8 cores",
			Sockets:     1, CoresPerSocket: 128, ThreadsPerCore: 1, CoresPerL3: 8,
		}},
		// 64 CPUs, core k = {k}. One L3 without an id file (the reader
		// groups by shared_cpu_list); it is shared by 64 CPUs = 64 cores ×
		// 1 thread of the node -> uncore falls back to socket 0.
		{"graviton3", Spec{
			Description: "AWS Graviton3: 1P 64C no SMT, one L3 (no cache id in sysfs)",
			Sockets:     1, CoresPerSocket: 64, ThreadsPerCore: 1, NoL3ID: true,
		}},
		// ht-1s-4c with CPU 7 offline: 7 CPUs, core 3 = {3} alone.
		{"offline-cpu", Spec{
			Description: "ht-1s-4c with CPU 7 offline",
			Sockets:     1, CoresPerSocket: 4, ThreadsPerCore: 2, Offline: []int{7},
		}},
		// 16 CPUs. core k = {k, k+8}, k = 0..7; socket/NUMA 0 = 0-3,8-11,
		// socket/NUMA 1 = 4-7,12-15; NUMA node 2 has 16 GiB and no CPUs.
		// Uncore = socket id (node-level L3s). Distances: 0-1 21, node 2 is
		// closer to node 0 (14) than to node 1 (24).
		{"memory-only-node", Spec{
			Description: "2 sockets x 4 cores SMT2 (1 NUMA node each) + NUMA node 2 with memory and no CPUs",
			Sockets:     2, CoresPerSocket: 4, ThreadsPerCore: 2, MemoryOnlyNodes: 1,
			Distances: [][]int{{10, 21, 14}, {21, 10, 24}, {14, 24, 10}},
		}},
		// ht-1s-4c with isolcpus 2-3,6-7 (cores 2 and 3).
		{"isolated", Spec{
			Description: "ht-1s-4c with isolated CPUs 2-3,6-7",
			Sockets:     1, CoresPerSocket: 4, ThreadsPerCore: 2, Isolated: "2-3,6-7",
		}},
	}
}

// Names returns the fixture names in their documented order.
func Names() []string {
	fs := fixtures()
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.name
	}
	return out
}

// Get returns the Spec of a named fixture.
func Get(name string) (Spec, bool) {
	for _, f := range fixtures() {
		if f.name == name {
			return f.spec, true
		}
	}
	return Spec{}, false
}

// WriteNamed writes the named fixture under dir (which plays /sys).
func WriteNamed(dir, name string) error {
	s, ok := Get(name)
	if !ok {
		return fmt.Errorf("sysfstest: unknown fixture %q (have %v)", name, Names())
	}
	return Write(dir, s)
}

// Load returns what sysfs.ReadFS discovers in the named fixture's tree;
// any error fails the test. The tree is built in memory (the same files
// Write puts on disk, see TestWriteMatchesFiles): writing thousands of files
// per test would make the big fixtures cost seconds each.
func Load(t testing.TB, name string) *topology.Topology {
	t.Helper()
	s, ok := Get(name)
	if !ok {
		t.Fatalf("sysfstest: unknown fixture %q (have %v)", name, Names())
	}
	return LoadSpec(t, s)
}

// LoadSpec is Load for an unnamed Spec.
func LoadSpec(t testing.TB, s Spec) *topology.Topology {
	t.Helper()
	fsys, err := FS(s)
	if err != nil {
		t.Fatalf("sysfstest: %v", err)
	}
	topo, err := sysfs.ReadFS(fsys)
	if err != nil {
		t.Fatalf("sysfstest: read: %v", err)
	}
	return topo
}
