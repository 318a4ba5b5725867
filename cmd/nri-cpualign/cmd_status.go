package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// stateDoc is the part of a plugin's /state document (docs/metrics.md)
// that status reads. It is decoded leniently: a newer plugin may add
// fields.
type stateDoc struct {
	Connected      bool           `json:"connected"`
	Synchronized   bool           `json:"synchronized"`
	Policy         string         `json:"cpu_manager_policy"`
	TopologyPolicy string         `json:"topology_manager_policy"`
	Scope          string         `json:"topology_manager_scope"`
	Reserved       string         `json:"reserved"`
	Shared         string         `json:"shared"`
	StrictUncore   string         `json:"strict_align_cpus_by_uncorecache"`
	Containers     []stateCtrView `json:"containers"`
	// Held are the CPUs held for stopped containers of live pods (absent
	// from older plugins' documents).
	Held []stateHeldView `json:"held"`
}

type stateHeldView struct {
	Pod       string `json:"pod"`
	PodUID    string `json:"pod_uid"`
	Container string `json:"container"`
	CPUs      string `json:"cpus"`
	NUMA      []int  `json:"numa"`
	L3        []int  `json:"l3"`
}

type stateCtrView struct {
	ID        string `json:"id"`
	Pod       string `json:"pod"`
	PodUID    string `json:"pod_uid"`
	Container string `json:"container"`
	CPUs      string `json:"cpus"`
	Exclusive bool   `json:"exclusive"`
	NUMA      []int  `json:"numa"`
	L3        []int  `json:"l3"`
	// Since is when the container got its CPUs (RFC 3339), for plugins
	// whose /state carries it.
	Since string `json:"since"`
}

// cpuCount is a CPU set as a Linux list and its size.
type cpuCount struct {
	CPUs  string `json:"cpus"`
	Count int    `json:"count"`
}

func countOf(s cpuset.CPUSet) cpuCount { return cpuCount{CPUs: s.String(), Count: s.Size()} }

// statusJSON is the -o json document. Scripts read it, so fields are
// only ever added.
type statusJSON struct {
	Address        string   `json:"address"`
	Connected      bool     `json:"connected"`
	Synchronized   bool     `json:"synchronized"`
	Policy         string   `json:"cpu_manager_policy"`
	TopologyPolicy string   `json:"topology_manager_policy"`
	Scope          string   `json:"topology_manager_scope"`
	StrictUncore   string   `json:"strict_align_cpus_by_uncorecache,omitempty"`
	Reserved       cpuCount `json:"reserved"`
	// Shared is the shared pool as the plugin reports it: with the
	// reserved CPUs, unless strict-cpu-reservation keeps them out.
	Shared cpuCount `json:"shared"`
	// Exclusive is every CPU some container holds exclusively; Free are
	// the CPUs a new exclusive container can get (shared minus reserved).
	Exclusive        cpuCount     `json:"exclusive"`
	Free             cpuCount     `json:"free"`
	SharedContainers int          `json:"shared_containers"`
	Pinned           []pinnedJSON `json:"pinned"`
	// Held are the assignments kept for stopped containers of live pods
	// (their CPUs are in Exclusive); HeldOnly are their CPUs no pinned
	// container runs on.
	Held     []heldJSON `json:"held"`
	HeldOnly cpuCount   `json:"held_only"`
	// NUMANodes and L3Groups are left out, and TopologyNote says why, when
	// the topology under --sysfs-root is not the plugin's machine.
	NUMANodes    []groupJSON `json:"numa_nodes,omitempty"`
	L3Groups     []groupJSON `json:"l3_groups,omitempty"`
	TopologyNote string      `json:"topology_note,omitempty"`
}

type pinnedJSON struct {
	Pod       string `json:"pod"`
	PodUID    string `json:"pod_uid"`
	Container string `json:"container"`
	ID        string `json:"id"`
	CPUs      string `json:"cpus"`
	NUMA      []int  `json:"numa"`
	L3        []int  `json:"l3"`
	Since     string `json:"since,omitempty"`
}

type heldJSON struct {
	Pod       string `json:"pod,omitempty"`
	PodUID    string `json:"pod_uid"`
	Container string `json:"container"`
	CPUs      string `json:"cpus"`
	NUMA      []int  `json:"numa"`
	L3        []int  `json:"l3"`
}

// groupJSON is one NUMA node or L3 cache: its CPUs split into reserved,
// exclusive and free (they need not add up to CPUs: a reserved CPU is
// neither, and under cpu_manager_policy none nothing is exclusive).
type groupJSON struct {
	ID        int      `json:"id"`
	NUMA      []int    `json:"numa,omitempty"` // an L3's NUMA nodes
	CPUs      cpuCount `json:"cpus"`
	Reserved  cpuCount `json:"reserved"`
	Exclusive cpuCount `json:"exclusive"`
	Free      cpuCount `json:"free"`
}

// cmdStatus is `nri-cpualign status`: a running plugin's pools and pinned
// containers at a glance, from its /state.
func cmdStatus(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("nri-cpualign status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	address := fs.String("address", config.DefaultMetricsAddress, "the plugin's metrics_address (host:port serving /state)")
	root := fs.String("sysfs-root", "/sys", "directory that plays /sys, for the per-NUMA-node and per-L3 summary (the plugin's node)")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the plugin's answer")
	output := outputFlag(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, `usage: nri-cpualign status [--address host:port] [-o text|json]

Asks a running plugin for its /state and prints the shared pool, the
reserved CPUs, every container with exclusive CPUs and, per NUMA node and
L3 cache, the CPUs reserved, exclusive and free. The NUMA and L3 layout is
read from --sysfs-root, so run it on the plugin's node. Flags:`)
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if !checkOutput(fs, *output) {
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	st, err := fetchState(ctx, *address)
	if err != nil {
		fmt.Fprintf(stderr, "nri-cpualign status: %v\n", err)
		return exitFailed
	}
	// The topology only adds the summaries: without it status still
	// reports the pools and the containers.
	topo, _, topoErr := sysfs.ReadWithWarnings(*root)
	if topoErr != nil {
		topo = nil
		topoErr = fmt.Errorf("read the topology under %s: %v", *root, topoErr)
	}
	doc, err := buildStatus(*address, st, topo, topoErr)
	if err != nil {
		fmt.Fprintf(stderr, "nri-cpualign status: %s: %v\n", *address, err)
		return exitFailed
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(doc)
	} else {
		_, err = io.WriteString(stdout, statusText(doc))
	}
	if err != nil {
		fmt.Fprintf(stderr, "nri-cpualign status: %v\n", err)
		return exitFailed
	}
	return exitOK
}

// fetchState reads and decodes http://address/state.
func fetchState(ctx context.Context, address string) (stateDoc, error) {
	url := "http://" + address + "/state"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return stateDoc{}, fmt.Errorf("--address %q: %v", address, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return stateDoc{}, fmt.Errorf("no answer from a plugin at %s (is it running, and is this its metrics_address?): %v", address, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return stateDoc{}, fmt.Errorf("GET %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return stateDoc{}, fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	var st stateDoc
	if err := json.Unmarshal(body, &st); err != nil {
		return stateDoc{}, fmt.Errorf("GET %s: not a /state document: %v", url, err)
	}
	return st, nil
}

// buildStatus works out the status document from /state and, when topo is
// not nil, the machine's NUMA nodes and L3 caches. topoErr says why topo
// is nil.
func buildStatus(address string, st stateDoc, topo *topology.Topology, topoErr error) (statusJSON, error) {
	parse := func(what, list string) (cpuset.CPUSet, error) {
		s, err := cpuset.Parse(list)
		if err != nil {
			return cpuset.New(), fmt.Errorf("/state %s %q: not a CPU list", what, list)
		}
		return s, nil
	}
	reserved, err := parse("reserved", st.Reserved)
	if err != nil {
		return statusJSON{}, err
	}
	shared, err := parse("shared", st.Shared)
	if err != nil {
		return statusJSON{}, err
	}
	doc := statusJSON{
		Address: address, Connected: st.Connected, Synchronized: st.Synchronized,
		Policy: st.Policy, TopologyPolicy: st.TopologyPolicy, Scope: st.Scope, StrictUncore: st.StrictUncore,
		Pinned: []pinnedJSON{}, Held: []heldJSON{},
	}
	exclusive := cpuset.New()
	for _, c := range st.Containers {
		if !c.Exclusive {
			doc.SharedContainers++
			continue
		}
		cpus, err := parse("container "+c.Pod+"/"+c.Container+" cpus", c.CPUs)
		if err != nil {
			return statusJSON{}, err
		}
		exclusive = exclusive.Union(cpus)
		doc.Pinned = append(doc.Pinned, pinnedJSON{Pod: c.Pod, PodUID: c.PodUID, Container: c.Container, ID: c.ID,
			CPUs: cpus.String(), NUMA: nonNil(c.NUMA), L3: nonNil(c.L3), Since: c.Since})
	}
	held := cpuset.New()
	for _, h := range st.Held {
		cpus, err := parse("held "+h.PodUID+"/"+h.Container+" cpus", h.CPUs)
		if err != nil {
			return statusJSON{}, err
		}
		held = held.Union(cpus)
		doc.Held = append(doc.Held, heldJSON{Pod: h.Pod, PodUID: h.PodUID, Container: h.Container, CPUs: cpus.String(),
			NUMA: nonNil(h.NUMA), L3: nonNil(h.L3)})
	}
	doc.HeldOnly = countOf(held.Difference(exclusive))
	exclusive = exclusive.Union(held)
	free := shared.Difference(reserved)
	doc.Reserved, doc.Shared, doc.Exclusive, doc.Free = countOf(reserved), countOf(shared), countOf(exclusive), countOf(free)

	if topo == nil {
		doc.TopologyNote = "no topology"
		if topoErr != nil {
			doc.TopologyNote = topoErr.Error()
		}
		return doc, nil
	}
	// Every online CPU is reserved, shared or exclusive; a topology that
	// does not match is another machine's (status run elsewhere).
	seen := reserved.Union(shared).Union(exclusive)
	if !seen.Equals(topo.CPUs()) {
		doc.TopologyNote = fmt.Sprintf("the plugin's CPUs (%s) are not this machine's (%s): run status on the plugin's node, or with its --sysfs-root",
			seen, topo.CPUs())
		return doc, nil
	}
	group := func(id int, cpus cpuset.CPUSet) groupJSON {
		return groupJSON{ID: id, CPUs: countOf(cpus), Reserved: countOf(cpus.Intersection(reserved)),
			Exclusive: countOf(cpus.Intersection(exclusive)), Free: countOf(cpus.Intersection(free))}
	}
	for _, n := range topo.NUMANodes() {
		if cpus := topo.CPUsInNUMANodes(n); !cpus.IsEmpty() { // memory-only nodes have none
			doc.NUMANodes = append(doc.NUMANodes, group(n, cpus))
		}
	}
	for _, l3 := range topo.L3Groups() {
		cpus := topo.CPUsInL3Groups(l3)
		g := group(l3, cpus)
		g.NUMA = topo.NUMANodesOf(cpus)
		doc.L3Groups = append(doc.L3Groups, g)
	}
	return doc, nil
}

func nonNil(s []int) []int {
	if s == nil {
		return []int{}
	}
	return s
}

// statusText renders doc for a terminal.
func statusText(doc statusJSON) string {
	var b strings.Builder
	conn := "connected to the runtime"
	if !doc.Connected {
		conn = "NOT connected to the runtime"
	}
	sync := "synchronized"
	if !doc.Synchronized {
		sync = "NOT synchronized yet"
	}
	fmt.Fprintf(&b, "plugin at %s: %s, %s\n", doc.Address, conn, sync)
	fmt.Fprintf(&b, "cpu_manager_policy %s, topology_manager_policy %s, scope %s", doc.Policy, doc.TopologyPolicy, doc.Scope)
	if doc.StrictUncore != "" {
		fmt.Fprintf(&b, ", strict-align-cpus-by-uncorecache %s", doc.StrictUncore)
	}
	b.WriteString("\n\n")

	list := func(c cpuCount) string {
		if c.Count == 0 {
			return "none"
		}
		return fmt.Sprintf("%s (%d)", c.CPUs, c.Count)
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "reserved CPUs:\t%s\n", list(doc.Reserved))
	pool := list(doc.Shared)
	if doc.Shared.Count > 0 && doc.Free.Count == 0 && doc.Exclusive.Count > 0 {
		pool += ", only reserved CPUs left"
	}
	fmt.Fprintf(tw, "shared pool:\t%s, %s\n", pool, plural(doc.SharedContainers, "container"))
	fmt.Fprintf(tw, "exclusive CPUs:\t%s, %s\n", list(doc.Exclusive), plural(len(doc.Pinned), "container"))
	if len(doc.Held) > 0 {
		fmt.Fprintf(tw, "held, stopped:\t%s, %s\n", list(doc.HeldOnly), plural(len(doc.Held), "container"))
	}
	fmt.Fprintf(tw, "free CPUs:\t%s\n", list(doc.Free))
	tw.Flush()

	if len(doc.Pinned) > 0 {
		since := false
		for _, p := range doc.Pinned {
			since = since || p.Since != ""
		}
		b.WriteString("\n")
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		head := "POD\tCONTAINER\tCPUS\tNUMA\tL3"
		if since {
			head += "\tSINCE"
		}
		fmt.Fprintln(tw, head)
		for _, p := range doc.Pinned {
			row := fmt.Sprintf("%s\t%s\t%s\t%s\t%s", p.Pod, p.Container, p.CPUs, ints(p.NUMA), ints(p.L3))
			if since {
				row += "\t" + dash(p.Since)
			}
			fmt.Fprintln(tw, row)
		}
		tw.Flush()
	}

	if len(doc.Held) > 0 {
		b.WriteString("\n")
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "HELD FOR POD\tSTOPPED CONTAINER\tCPUS\tNUMA\tL3")
		for _, h := range doc.Held {
			pod := h.Pod
			if pod == "" {
				pod = "uid " + h.PodUID
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", pod, h.Container, h.CPUs, ints(h.NUMA), ints(h.L3))
		}
		tw.Flush()
	}

	if doc.TopologyNote != "" {
		fmt.Fprintf(&b, "\nno per-NUMA-node and per-L3 summary: %s\n", doc.TopologyNote)
		return b.String()
	}
	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NUMA\tCPUS\tRESERVED\tEXCLUSIVE\tFREE\tFREE CPUS")
	for _, g := range doc.NUMANodes {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%s\n", g.ID, g.CPUs.Count, g.Reserved.Count, g.Exclusive.Count, g.Free.Count, dash(g.Free.CPUs))
	}
	tw.Flush()
	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "L3\tNUMA\tCPUS\tRESERVED\tEXCLUSIVE\tFREE\tFREE CPUS")
	for _, g := range doc.L3Groups {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t%s\n", g.ID, ints(g.NUMA), g.CPUs.Count, g.Reserved.Count, g.Exclusive.Count, g.Free.Count, dash(g.Free.CPUs))
	}
	tw.Flush()
	return b.String()
}

func ints(s []int) string {
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = strconv.Itoa(v)
	}
	return dash(strings.Join(parts, ","))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
