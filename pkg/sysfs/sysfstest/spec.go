// Package sysfstest writes fake sysfs trees for tests: a compact Spec of a
// machine becomes the files sysfs.Read reads (devices/system/cpu and
// devices/system/node), numbered the way the kernel numbers real machines.
// The named fixtures (Names, Get, Load) are the machines every test of the
// project runs on.
package sysfstest

import (
	"fmt"
)

// Numbering is how logical CPU ids are given to the threads of the cores.
type Numbering int

const (
	// SiblingsSpread gives every core's first thread an id first, all
	// sockets in order, then every core's second thread, and so on: thread
	// t of machine-wide core k is CPU t×cores+k. This is what x86 Linux does
	// (siblings N and N+cores).
	SiblingsSpread Numbering = iota
	// SiblingsAdjacent numbers core by core, a core's threads consecutive
	// (core0 = {0,1}, core1 = {2,3}); common on arm64, POWER and client
	// Intel parts.
	SiblingsAdjacent
)

// String names the scheme.
func (n Numbering) String() string {
	switch n {
	case SiblingsSpread:
		return "spread"
	case SiblingsAdjacent:
		return "adjacent"
	}
	return fmt.Sprintf("Numbering(%d)", int(n))
}

// Spec is a compact machine description. Zero values take the documented
// defaults.
//
// Cores are laid out socket by socket; inside a socket the CoresPerSocket
// SMT cores come first, then the ECoresPerSocket single-thread cores. A
// socket's cores are split into NUMAPerSocket equal runs of consecutive
// cores (NUMA node = socket×NUMAPerSocket + run) and into L3 groups of
// CoresPerL3 consecutive cores. sysfs core_id is the core's index within its
// socket, so it repeats across sockets as on real machines.
type Spec struct {
	// Description says what the machine is, in one line.
	Description string
	// Sockets is the number of packages (>= 1).
	Sockets int
	// NUMAPerSocket is the number of NUMA nodes per socket (0 = 1); it must
	// divide the cores of a socket.
	NUMAPerSocket int
	// CoresPerSocket is the number of cores with ThreadsPerCore threads
	// (the P-cores of a hybrid part).
	CoresPerSocket int
	// ThreadsPerCore is the SMT width (0 = 1).
	ThreadsPerCore int
	// ECoresPerSocket is the number of single-thread cores per socket after
	// the SMT cores (hybrid parts).
	ECoresPerSocket int
	// Numbering is the CPU numbering scheme.
	Numbering Numbering
	// CoresPerL3 is how many consecutive cores of a socket share an L3
	// (0 = one L3 per socket); it must divide the cores of a socket.
	CoresPerL3 int
	// NoL3 writes no level-3 cache at all.
	NoL3 bool
	// NoL3ID leaves out the L3 id files (arm64 kernels without firmware
	// cache ids); the reader then groups by shared_cpu_list.
	NoL3ID bool
	// L3IDBase is added to every L3 id written, so tests can tell an L3 id
	// from a socket id.
	L3IDBase int
	// NoDieID leaves out topology/die_id (kernels before 5.2).
	NoDieID bool
	// NoNodeDir writes no devices/system/node (a kernel without NUMA).
	NoNodeDir bool
	// MemoryOnlyNodes adds NUMA nodes with memory and no CPUs, numbered
	// after the nodes with CPUs.
	MemoryOnlyNodes int
	// MemoryMiBPerNode is MemTotal of every node (0 = 16384).
	MemoryMiBPerNode int
	// DistanceSameSocket is the distance between two nodes of one socket
	// (0 = 11); DistanceRemote between nodes of different sockets and from
	// or to memory-only nodes (0 = 21). Self is always 10.
	DistanceSameSocket, DistanceRemote int
	// Distances, when set, replaces the computed table: Distances[a][b] for
	// every node, memory-only ones included.
	Distances [][]int
	// Offline CPUs exist (cpuN/online = 0) but are not online.
	Offline []int
	// Isolated is the content of devices/system/cpu/isolated ("2-3,6-7").
	Isolated string
	// Hugepages maps a page size in kB to the nr_hugepages of every node
	// (node*/hugepages/hugepages-<kB>kB); nil writes no hugepages
	// directory.
	Hugepages map[int]int
}

// core is one physical core of a laid-out Spec.
type core struct {
	socket, index, node, l3 int
	threads                 []int // logical CPU ids, ascending
}

// layout is a Spec expanded to cores and CPU ids.
type layout struct {
	cores    []core
	cpuCore  map[int]int // cpu -> index into cores
	numCPUs  int
	cpuNodes int // NUMA nodes with CPUs
	numL3    int
	offline  map[int]bool
}

func (s Spec) numaPerSocket() int {
	if s.NUMAPerSocket == 0 {
		return 1
	}
	return s.NUMAPerSocket
}

func (s Spec) threadsPerCore() int {
	if s.ThreadsPerCore == 0 {
		return 1
	}
	return s.ThreadsPerCore
}

// Validate reports a Spec that does not describe a machine.
func (s Spec) Validate() error {
	perSocket := s.CoresPerSocket + s.ECoresPerSocket
	switch {
	case s.Sockets < 1:
		return fmt.Errorf("sysfstest: Sockets = %d, want >= 1", s.Sockets)
	case s.CoresPerSocket < 0 || s.ECoresPerSocket < 0 || perSocket < 1:
		return fmt.Errorf("sysfstest: %d+%d cores per socket, want >= 1", s.CoresPerSocket, s.ECoresPerSocket)
	case s.NUMAPerSocket < 0 || perSocket%s.numaPerSocket() != 0:
		return fmt.Errorf("sysfstest: NUMAPerSocket = %d does not divide %d cores", s.NUMAPerSocket, perSocket)
	case s.ThreadsPerCore < 0 || s.ThreadsPerCore > 8:
		return fmt.Errorf("sysfstest: ThreadsPerCore = %d, want 0-8", s.ThreadsPerCore)
	case s.CoresPerL3 < 0 || (s.CoresPerL3 > 0 && perSocket%s.CoresPerL3 != 0):
		return fmt.Errorf("sysfstest: CoresPerL3 = %d does not divide %d cores", s.CoresPerL3, perSocket)
	case s.MemoryOnlyNodes < 0 || s.MemoryMiBPerNode < 0:
		return fmt.Errorf("sysfstest: negative MemoryOnlyNodes or MemoryMiBPerNode")
	case s.Numbering != SiblingsSpread && s.Numbering != SiblingsAdjacent:
		return fmt.Errorf("sysfstest: unknown numbering %v", s.Numbering)
	}
	nodes := s.Sockets*s.numaPerSocket() + s.MemoryOnlyNodes
	if s.Distances != nil {
		if len(s.Distances) != nodes {
			return fmt.Errorf("sysfstest: %d distance rows for %d nodes", len(s.Distances), nodes)
		}
		for i, row := range s.Distances {
			if len(row) != nodes {
				return fmt.Errorf("sysfstest: distance row %d has %d entries for %d nodes", i, len(row), nodes)
			}
		}
	}
	return nil
}

// lay expands the Spec into cores and logical CPU ids.
func (s Spec) lay() (layout, error) {
	if err := s.Validate(); err != nil {
		return layout{}, err
	}
	perSocket := s.CoresPerSocket + s.ECoresPerSocket
	coresPerNode := perSocket / s.numaPerSocket()
	l3PerSocket, coresPerL3 := 1, perSocket
	if s.CoresPerL3 > 0 {
		l3PerSocket, coresPerL3 = perSocket/s.CoresPerL3, s.CoresPerL3
	}
	var lay layout
	nthreads := func(index int) int {
		if index < s.CoresPerSocket {
			return s.threadsPerCore()
		}
		return 1
	}
	for sock := 0; sock < s.Sockets; sock++ {
		for i := 0; i < perSocket; i++ {
			lay.cores = append(lay.cores, core{
				socket: sock, index: i,
				node: sock*s.numaPerSocket() + i/coresPerNode,
				l3:   sock*l3PerSocket + i/coresPerL3,
			})
		}
	}
	next := 0
	switch s.Numbering {
	case SiblingsSpread:
		for t := 0; t < s.threadsPerCore(); t++ {
			for k := range lay.cores {
				if nthreads(lay.cores[k].index) > t {
					lay.cores[k].threads = append(lay.cores[k].threads, next)
					next++
				}
			}
		}
	case SiblingsAdjacent:
		for k := range lay.cores {
			for t := 0; t < nthreads(lay.cores[k].index); t++ {
				lay.cores[k].threads = append(lay.cores[k].threads, next)
				next++
			}
		}
	}
	lay.numCPUs = next
	lay.cpuNodes = s.Sockets * s.numaPerSocket()
	lay.numL3 = s.Sockets * l3PerSocket
	lay.cpuCore = make(map[int]int, next)
	for k, c := range lay.cores {
		for _, cpu := range c.threads {
			lay.cpuCore[cpu] = k
		}
	}
	lay.offline = map[int]bool{}
	for _, cpu := range s.Offline {
		if cpu < 0 || cpu >= next {
			return layout{}, fmt.Errorf("sysfstest: offline cpu %d is not one of the %d CPUs", cpu, next)
		}
		lay.offline[cpu] = true
	}
	if len(lay.offline) == next {
		return layout{}, fmt.Errorf("sysfstest: every CPU is offline")
	}
	return lay, nil
}

// distance is the distance from node a to node b.
func (s Spec) distance(a, b int) int {
	if s.Distances != nil {
		return s.Distances[a][b]
	}
	if a == b {
		return 10
	}
	same, remote := s.DistanceSameSocket, s.DistanceRemote
	if same == 0 {
		same = 11
	}
	if remote == 0 {
		remote = 21
	}
	cpuNodes := s.Sockets * s.numaPerSocket()
	if a < cpuNodes && b < cpuNodes && a/s.numaPerSocket() == b/s.numaPerSocket() {
		return same
	}
	return remote
}

// CPUs returns the number of logical CPUs the Spec describes, offline ones
// included.
func (s Spec) CPUs() int {
	lay, err := s.lay()
	if err != nil {
		return 0
	}
	return lay.numCPUs
}
