package sysfs_test

import (
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// TestUncoreFallback checks the kubelet's uncore id rules (kubelet-rules.md
// §1). The fixtures write L3 ids from 100 up (L3IDBase) so an L3 id can
// never be mistaken for a socket id.
func TestUncoreFallback(t *testing.T) {
	tests := []struct {
		name string
		spec sysfstest.Spec
		want map[int]int // cpu -> expected L3 (uncore) id
	}{
		{
			// Per-socket L3 of 12 CPUs; NUMA node = socket with 6 cores × 2
			// threads = 12: a node-level cache, so the socket id is used.
			name: "node-level L3 falls back to socket id",
			spec: sysfstest.Spec{Sockets: 2, CoresPerSocket: 6, ThreadsPerCore: 2, L3IDBase: 100},
			want: map[int]int{0: 0, 12: 0, 6: 1, 23: 1},
		},
		{
			// Per-socket L3 of 40 CPUs, NUMA node of 10 cores × 2 = 20: not
			// node-level, the L3 id stays.
			name: "L3 spanning two nodes keeps its id",
			spec: sysfstest.Spec{Sockets: 2, NUMAPerSocket: 2, CoresPerSocket: 20, ThreadsPerCore: 2, L3IDBase: 100},
			want: map[int]int{0: 100, 10: 100, 20: 101, 79: 101},
		},
		{
			// Two L3 of 2 cores per 4-core socket: 4 CPUs != 4 × 2.
			name: "L3 smaller than node keeps its id",
			spec: sysfstest.Spec{Sockets: 2, CoresPerSocket: 4, ThreadsPerCore: 2, CoresPerL3: 2, L3IDBase: 100},
			// core k = {k, k+8}; socket 0 = cores 0-3: L3 100 = cores 0,1.
			want: map[int]int{0: 100, 9: 100, 2: 101, 11: 101, 4: 102, 15: 103},
		},
		{
			name: "no L3 at all: socket id",
			spec: sysfstest.Spec{Sockets: 2, CoresPerSocket: 4, ThreadsPerCore: 2, CoresPerL3: 2, NoL3: true},
			want: map[int]int{0: 0, 3: 0, 4: 1, 15: 1},
		},
		{
			// i7-12850HX shape: one L3 (24 CPUs) on a 16-core node. P-core:
			// 16 × 2 = 32, E-core: 16 × 1 = 16; neither is 24, so every core
			// keeps the L3 id (not the socket id).
			name: "hybrid single L3 keeps its id",
			spec: sysfstest.Spec{Sockets: 1, CoresPerSocket: 8, ThreadsPerCore: 2, ECoresPerSocket: 8,
				Numbering: sysfstest.SiblingsAdjacent, L3IDBase: 100},
			want: map[int]int{0: 100, 1: 100, 15: 100, 16: 100, 23: 100},
		},
		{
			// ht-1s-4c with CPU 7 offline: the L3 lists 7 CPUs; core 0 needs
			// 4 × 2 = 8, core 3 (one thread left) 4 × 1 = 4 to be node-level.
			// Neither matches: the L3 id is kept, unlike on ht-1s-4c.
			name: "offline sibling makes the L3 not node-level",
			spec: sysfstest.Spec{Sockets: 1, CoresPerSocket: 4, ThreadsPerCore: 2, Offline: []int{7}, L3IDBase: 100},
			want: map[int]int{0: 100, 3: 100, 6: 100},
		},
		{
			// No id files: L3s are numbered by their lowest CPU in order; 16
			// groups of 4 CPUs -> CPU 13 is in group 3.
			name: "missing L3 ids: groups by shared_cpu_list",
			spec: sysfstest.Spec{Sockets: 1, CoresPerSocket: 64, CoresPerL3: 4, NoL3ID: true},
			want: map[int]int{0: 0, 3: 0, 4: 1, 13: 3, 63: 15},
		},
		{
			// One L3 for all 64 single-thread cores of the only node: node-level.
			name: "missing L3 id on a node-level cache: socket id",
			spec: sysfstest.Spec{Sockets: 1, CoresPerSocket: 64, NoL3ID: true},
			want: map[int]int{0: 0, 63: 0},
		},
		{
			// Two sockets without L3 ids, per-socket L3 = node-level -> socket.
			name: "memory-only node machine: socket ids",
			spec: sysfstest.Spec{Sockets: 2, CoresPerSocket: 4, ThreadsPerCore: 2, MemoryOnlyNodes: 1, L3IDBase: 100},
			want: map[int]int{0: 0, 8: 0, 4: 1, 12: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			topo := sysfstest.LoadSpec(t, tc.spec)
			for cpu, want := range tc.want {
				c, ok := topo.Info(cpu)
				if !ok {
					t.Fatalf("cpu %d not online", cpu)
				}
				if c.L3 != want {
					t.Errorf("cpu %d: L3 = %d, want %d", cpu, c.L3, want)
				}
			}
		})
	}
}
