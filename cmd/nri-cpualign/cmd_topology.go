package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// topologyJSON is the --output json document. Scripts and tests read it, so
// fields are only ever added.
type topologyJSON struct {
	CPUs      int `json:"cpus"`
	Cores     int `json:"cores"`
	Sockets   int `json:"sockets"`
	NUMANodes int `json:"numa_nodes"` // nodes with CPUs
	L3Groups  int `json:"l3_groups"`
	// ThreadsPerCore is the kubelet's CPUsPerCore: cpus/cores, integer
	// division (1 on hybrid parts); MaxThreadsPerCore is the widest core.
	ThreadsPerCore    int                 `json:"threads_per_core"`
	MaxThreadsPerCore int                 `json:"max_threads_per_core"`
	CPUList           string              `json:"cpu_list"`
	CPUDetails        []topology.CPUInfo  `json:"cpu_details"`
	NUMADistances     map[int]map[int]int `json:"numa_distances"`
	Isolated          []int               `json:"isolated"`
	MemoryBytes       map[int]uint64      `json:"memory_bytes"`
	MemoryOnlyNodes   []int               `json:"memory_only_nodes"`
}

// cmdTopology prints the topology the plugin sees under a sysfs root.
func cmdTopology(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("nri-cpualign topology", flag.ContinueOnError)
	fl.SetOutput(stderr)
	root := fl.String("sysfs-root", "/sys", "directory that plays /sys (holds devices/system/cpu)")
	output := fl.String("output", "text", "output format: text or json")
	if err := fl.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "nri-cpualign topology: unexpected argument %q\n", fl.Arg(0))
		return 2
	}
	if *output != "text" && *output != "json" {
		fmt.Fprintf(stderr, "nri-cpualign topology: --output %q: want text or json\n", *output)
		return 2
	}
	topo, warns, err := sysfs.ReadWithWarnings(*root)
	if err != nil {
		fmt.Fprintf(stderr, "nri-cpualign topology: %v\n", err)
		return 1
	}
	for _, w := range warns {
		fmt.Fprintf(stderr, "nri-cpualign topology: warning: %s\n", w)
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(topologyDocument(topo)); err != nil {
			fmt.Fprintf(stderr, "nri-cpualign topology: %v\n", err)
			return 1
		}
		return 0
	}
	if _, err := io.WriteString(stdout, topologyText(topo)); err != nil {
		fmt.Fprintf(stderr, "nri-cpualign topology: %v\n", err)
		return 1
	}
	return 0
}

func topologyDocument(t *topology.Topology) topologyJSON {
	doc := topologyJSON{
		CPUs: t.NumCPUs(), Cores: t.NumCores(), Sockets: t.NumSockets(), NUMANodes: t.NumNUMANodes(),
		L3Groups: t.NumL3(), ThreadsPerCore: t.CPUsPerCore(), MaxThreadsPerCore: t.MaxThreadsPerCore(),
		CPUList: t.CPUs().String(), CPUDetails: t.Details(), NUMADistances: t.Distances(),
		Isolated: t.Isolated().List(), MemoryBytes: map[int]uint64{}, MemoryOnlyNodes: memoryOnlyNodes(t),
	}
	if doc.Isolated == nil {
		doc.Isolated = []int{}
	}
	for _, n := range t.MemoryNodes() {
		doc.MemoryBytes[n] = t.MemTotal(n)
	}
	return doc
}

// memoryOnlyNodes are the NUMA nodes with memory and no CPUs.
func memoryOnlyNodes(t *topology.Topology) []int {
	withCPUs := map[int]bool{}
	for _, n := range t.NUMANodes() {
		withCPUs[n] = true
	}
	out := []int{}
	for _, n := range t.MemoryNodes() {
		if !withCPUs[n] {
			out = append(out, n)
		}
	}
	return out
}

func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func gib(b uint64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

// topologyText is the tree socket → NUMA node → L3 group → core → threads.
// An L3 group or NUMA node that spans several parents (one L3 over four SNC
// nodes) appears under each, with the CPUs it has there.
func topologyText(t *topology.Topology) string {
	var b strings.Builder
	fmt.Fprintf(&b, "machine: %s, %s with CPUs, %s, %s, %s (%s)\n",
		plural(t.NumSockets(), "socket"), plural(t.NumNUMANodes(), "NUMA node"), plural(t.NumL3(), "L3 group"),
		plural(t.NumCores(), "core"), plural(t.NumCPUs(), "CPU"), t.CPUs())
	fmt.Fprintf(&b, "threads per core: %d (cpus/cores, as the kubelet computes it), widest core: %d\n",
		t.CPUsPerCore(), t.MaxThreadsPerCore())
	iso := "none"
	if !t.Isolated().IsEmpty() {
		iso = t.Isolated().String()
	}
	fmt.Fprintf(&b, "isolated: %s\n", iso)

	for _, s := range t.Sockets() {
		sCPUs := t.CPUsInSockets(s)
		nodes := t.NUMANodesOf(sCPUs)
		fmt.Fprintf(&b, "socket %d: %s, %s, %s (%s)\n", s, plural(len(nodes), "NUMA node"),
			plural(len(t.CoresOf(sCPUs)), "core"), plural(sCPUs.Size(), "CPU"), sCPUs)
		for _, n := range nodes {
			nCPUs := t.CPUsInNUMANodes(n).Intersection(sCPUs)
			mem := ""
			if m := t.MemTotal(n); m > 0 {
				mem = ", memory " + gib(m)
			}
			fmt.Fprintf(&b, "  numa %d: %s, %s (%s)%s\n", n, plural(len(t.CoresOf(nCPUs)), "core"),
				plural(nCPUs.Size(), "CPU"), nCPUs, mem)
			for _, l3 := range t.L3GroupsOf(nCPUs) {
				lAll := t.CPUsInL3Groups(l3)
				lCPUs := lAll.Intersection(nCPUs)
				span := ""
				if !lAll.Equals(lCPUs) {
					span = fmt.Sprintf(" [L3 %d has %s in all, on NUMA nodes %s]", l3,
						plural(lAll.Size(), "CPU"), cpuset.New(t.NUMANodesOf(lAll)...))
				}
				fmt.Fprintf(&b, "    l3 %d: %s, %s (%s)%s\n", l3, plural(len(t.CoresOf(lCPUs)), "core"),
					plural(lCPUs.Size(), "CPU"), lCPUs, span)
				for _, c := range t.CoresOf(lCPUs) {
					info, _ := t.Info(c)
					threads := t.CPUsInCores(c)
					fmt.Fprintf(&b, "      core %d (core_id %d): cpus %s\n", c, info.SysfsCoreID, threads)
				}
			}
		}
	}
	if mo := memoryOnlyNodes(t); len(mo) > 0 {
		for _, n := range mo {
			fmt.Fprintf(&b, "numa %d: no CPUs, memory %s\n", n, gib(t.MemTotal(n)))
		}
	}
	if d := t.Distances(); len(d) > 0 {
		nodes := slices.Sorted(maps.Keys(d))
		b.WriteString("numa distances:\n  node")
		for _, n := range nodes {
			fmt.Fprintf(&b, " %4d", n)
		}
		b.WriteString("\n")
		for _, a := range nodes {
			fmt.Fprintf(&b, "  %4d", a)
			for _, c := range nodes {
				if v, ok := t.Distance(a, c); ok {
					fmt.Fprintf(&b, " %4d", v)
				} else {
					b.WriteString("    -")
				}
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}
