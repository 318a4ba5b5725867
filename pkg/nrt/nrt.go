// Package nrt builds the NodeResourceTopology object (topology.node.k8s.io/v1alpha2)
// a node publishes for topology-aware schedulers: one zone per NUMA node
// with its CPUs (and memory) as capacity, allocatable and available, the
// distances between zones as costs, and the topology manager policy and
// scope as attributes. It is pure: the input is a read-only view of the
// plugin's state, the output a value ready to be sent as JSON.
//
// The field names, zone names and attribute names are the ones the
// scheduler plugin NodeResourceTopologyMatch (kubernetes-sigs/scheduler-plugins)
// reads: zones of type "Node" named "node-<id>", attributes
// "topologyManagerPolicy", "topologyManagerScope" and
// "topologyManagerMaxNUMANodes".
package nrt

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// The object's type and the names the consumer looks for.
const (
	Group      = "topology.node.k8s.io"
	Version    = "v1alpha2"
	APIVersion = Group + "/" + Version
	Kind       = "NodeResourceTopology"
	// Plural is the resource name the API server serves the objects under.
	Plural = "noderesourcetopologies"

	ZoneTypeNode = "Node"

	AttrPolicy       = "topologyManagerPolicy"
	AttrScope        = "topologyManagerScope"
	AttrMaxNUMANodes = "topologyManagerMaxNUMANodes"

	ResourceCPU    = "cpu"
	ResourceMemory = "memory"
)

// Object is a NodeResourceTopology as the API server takes it.
type Object struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Metadata   Metadata    `json:"metadata"`
	Zones      []Zone      `json:"zones"`
	Attributes []Attribute `json:"attributes,omitempty"`
}

// Metadata is the part of the object's metadata the plugin sets.
type Metadata struct {
	Name string `json:"name"`
}

// Zone is one NUMA node.
type Zone struct {
	Name      string     `json:"name"`
	Type      string     `json:"type"`
	Costs     []Cost     `json:"costs,omitempty"`
	Resources []Resource `json:"resources,omitempty"`
}

// Cost is the distance from the zone to the named zone.
type Cost struct {
	Name  string `json:"name"`
	Value int64  `json:"value"`
}

// Resource is one resource of a zone. The quantities are plain integers
// (CPUs, bytes), sent as strings as the CRD's int-or-string quantities.
type Resource struct {
	Name        string `json:"name"`
	Capacity    int64  `json:"capacity,string"`
	Allocatable int64  `json:"allocatable,string"`
	Available   int64  `json:"available,string"`
}

// Attribute is a name/value pair of the object.
type Attribute struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Input is the read-only view the object is built from.
type Input struct {
	// Node is the Kubernetes node name, the object's name.
	Node string
	// Topology is the machine.
	Topology *topology.Topology
	// Reserved are the reserved CPUs: not allocatable.
	Reserved cpuset.CPUSet
	// Exclusive are the CPUs assigned exclusively, those held for
	// stopped containers of live pods included: not available.
	Exclusive cpuset.CPUSet
	// TopologyManagerPolicy and TopologyManagerScope are the configured
	// kubelet-style values ("single-numa-node", "pod", ...).
	TopologyManagerPolicy string
	TopologyManagerScope  string
	// MaxNUMANodes is the topology manager's max-allowable-numa-nodes; 0
	// leaves the attribute out (the consumer then assumes the kubelet's
	// default, 8).
	MaxNUMANodes int
	// Memory is the hook for a memory manager that accounts memory and
	// hugepages per NUMA node: its rows replace a zone's default memory
	// row. Nil means no memory manager: every zone reports its MemTotal
	// as capacity, allocatable and available, since nothing pins memory
	// to a node and the consumer refuses a Guaranteed pod whose memory
	// request finds no zone.
	Memory map[int][]Resource
}

// ZoneName is the zone name of NUMA node id, as the consumer parses it.
func ZoneName(id int) string { return "node-" + strconv.Itoa(id) }

// Build returns the object for in. It fails on a missing node name or
// topology, or exclusive CPUs outside the machine.
func Build(in Input) (Object, error) {
	if in.Node == "" {
		return Object{}, errors.New("nrt: no node name")
	}
	if in.Topology == nil {
		return Object{}, errors.New("nrt: no topology")
	}
	t := in.Topology
	if extra := in.Exclusive.Difference(t.CPUs()); !extra.IsEmpty() {
		return Object{}, fmt.Errorf("nrt: exclusive CPUs %s are not online CPUs of the machine (%s)", extra, t.CPUs())
	}
	nodes := slices.Sorted(slices.Values(unionInts(t.NUMANodes(), t.MemoryNodes())))
	obj := Object{APIVersion: APIVersion, Kind: Kind, Metadata: Metadata{Name: in.Node}, Zones: make([]Zone, 0, len(nodes))}
	for _, n := range nodes {
		z := Zone{Name: ZoneName(n), Type: ZoneTypeNode}
		for _, m := range nodes {
			if d, ok := t.Distance(n, m); ok {
				z.Costs = append(z.Costs, Cost{Name: ZoneName(m), Value: int64(d)})
			}
		}
		if cpus := t.CPUsInNUMANodes(n); cpus.Size() > 0 {
			alloc := cpus.Difference(in.Reserved)
			z.Resources = append(z.Resources, Resource{Name: ResourceCPU, Capacity: int64(cpus.Size()),
				Allocatable: int64(alloc.Size()), Available: int64(alloc.Difference(in.Exclusive).Size())})
		}
		if in.Memory != nil {
			z.Resources = append(z.Resources, in.Memory[n]...)
		} else if mem := t.MemTotal(n); mem > 0 && mem <= 1<<62 {
			b := int64(mem)
			z.Resources = append(z.Resources, Resource{Name: ResourceMemory, Capacity: b, Allocatable: b, Available: b})
		}
		obj.Zones = append(obj.Zones, z)
	}
	if in.TopologyManagerPolicy != "" {
		obj.Attributes = append(obj.Attributes, Attribute{Name: AttrPolicy, Value: in.TopologyManagerPolicy})
	}
	if in.TopologyManagerScope != "" {
		obj.Attributes = append(obj.Attributes, Attribute{Name: AttrScope, Value: in.TopologyManagerScope})
	}
	if in.MaxNUMANodes > 0 {
		obj.Attributes = append(obj.Attributes, Attribute{Name: AttrMaxNUMANodes, Value: strconv.Itoa(in.MaxNUMANodes)})
	}
	return obj, nil
}

func unionInts(a, b []int) []int {
	out := slices.Clone(a)
	for _, v := range b {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// ExclusiveCPUs is the union of the exclusive assignments (pod UID ->
// container -> CPUs), those held for stopped containers included.
func ExclusiveCPUs(assignments map[string]map[string]cpuset.CPUSet) cpuset.CPUSet {
	var all []int
	for _, ctrs := range assignments {
		for _, cpus := range ctrs {
			all = append(all, cpus.List()...)
		}
	}
	return cpuset.New(all...)
}
