package nrt_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/nrt"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

const gib16 = 16 << 30 // sysfstest's default MemTotal per node

func cpu(capacity, allocatable, available int64) nrt.Resource {
	return nrt.Resource{Name: "cpu", Capacity: capacity, Allocatable: allocatable, Available: available}
}

func mem(b int64) nrt.Resource {
	return nrt.Resource{Name: "memory", Capacity: b, Allocatable: b, Available: b}
}

func check(t *testing.T, got, want nrt.Object) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Errorf("object:\n%s\nwant:\n%s", g, w)
	}
}

// ht-2s-6c: node 0 = CPUs 0-5,12-17, node 1 = 6-11,18-23, distance 21.
// Reserved core 0 (CPUs 0,12); a container holds 1-2,13-14 on node 0 and
// a stopped one's CPUs 6,18 are held on node 1.
func TestBuildTwoNodesReservedAndHeld(t *testing.T) {
	topo := sysfstest.Load(t, "ht-2s-6c")
	got, err := nrt.Build(nrt.Input{
		Node: "worker-1", Topology: topo,
		Reserved:              cpuset.New(0, 12),
		Exclusive:             cpuset.New(1, 2, 13, 14, 6, 18),
		TopologyManagerPolicy: "single-numa-node", TopologyManagerScope: "container",
	})
	if err != nil {
		t.Fatal(err)
	}
	check(t, got, nrt.Object{
		APIVersion: "topology.node.k8s.io/v1alpha2", Kind: "NodeResourceTopology",
		Metadata: nrt.Metadata{Name: "worker-1"},
		Zones: []nrt.Zone{
			{Name: "node-0", Type: "Node", Costs: []nrt.Cost{{Name: "node-0", Value: 10}, {Name: "node-1", Value: 21}},
				// 12 CPUs, 2 reserved, 4 exclusive.
				Resources: []nrt.Resource{cpu(12, 10, 6), mem(gib16)}},
			{Name: "node-1", Type: "Node", Costs: []nrt.Cost{{Name: "node-0", Value: 21}, {Name: "node-1", Value: 10}},
				// 12 CPUs, none reserved, 2 held.
				Resources: []nrt.Resource{cpu(12, 12, 10), mem(gib16)}},
		},
		Attributes: []nrt.Attribute{{Name: "topologyManagerPolicy", Value: "single-numa-node"},
			{Name: "topologyManagerScope", Value: "container"}},
	})
}

// memory-only-node: node 0 = 0-3,8-11, node 1 = 4-7,12-15, node 2 memory
// only; distances 0-1 21, 0-2 14, 1-2 24. Node 2's zone has memory and no
// cpu row; the max NUMA nodes attribute is written when configured.
func TestBuildMemoryOnlyNode(t *testing.T) {
	topo := sysfstest.Load(t, "memory-only-node")
	got, err := nrt.Build(nrt.Input{
		Node: "n", Topology: topo, Reserved: cpuset.New(0), Exclusive: cpuset.New(4, 12),
		TopologyManagerPolicy: "restricted", TopologyManagerScope: "pod", MaxNUMANodes: 16,
	})
	if err != nil {
		t.Fatal(err)
	}
	costs := func(a, b, c int64) []nrt.Cost {
		return []nrt.Cost{{Name: "node-0", Value: a}, {Name: "node-1", Value: b}, {Name: "node-2", Value: c}}
	}
	check(t, got, nrt.Object{
		APIVersion: nrt.APIVersion, Kind: nrt.Kind, Metadata: nrt.Metadata{Name: "n"},
		Zones: []nrt.Zone{
			{Name: "node-0", Type: "Node", Costs: costs(10, 21, 14), Resources: []nrt.Resource{cpu(8, 7, 7), mem(gib16)}},
			{Name: "node-1", Type: "Node", Costs: costs(21, 10, 24), Resources: []nrt.Resource{cpu(8, 8, 6), mem(gib16)}},
			{Name: "node-2", Type: "Node", Costs: costs(14, 24, 10), Resources: []nrt.Resource{mem(gib16)}},
		},
		Attributes: []nrt.Attribute{{Name: "topologyManagerPolicy", Value: "restricted"},
			{Name: "topologyManagerScope", Value: "pod"}, {Name: "topologyManagerMaxNUMANodes", Value: "16"}},
	})
}

// A memory manager's rows replace the default memory row, hugepages
// included.
func TestBuildMemoryHook(t *testing.T) {
	topo := sysfstest.Load(t, "ht-2s-6c")
	rows := map[int][]nrt.Resource{
		0: {{Name: "memory", Capacity: 100, Allocatable: 90, Available: 40},
			{Name: "hugepages-2Mi", Capacity: 4 << 21, Allocatable: 4 << 21, Available: 2 << 21}},
		1: {{Name: "memory", Capacity: 100, Allocatable: 90, Available: 90}},
	}
	got, err := nrt.Build(nrt.Input{Node: "n", Topology: topo, Memory: rows})
	if err != nil {
		t.Fatal(err)
	}
	if r := got.Zones[0].Resources; !reflect.DeepEqual(r, append([]nrt.Resource{cpu(12, 12, 12)}, rows[0]...)) {
		t.Errorf("node-0 resources %+v", r)
	}
	if r := got.Zones[1].Resources; !reflect.DeepEqual(r, append([]nrt.Resource{cpu(12, 12, 12)}, rows[1]...)) {
		t.Errorf("node-1 resources %+v", r)
	}
}

// The JSON is what the CRD validates and the consumer decodes:
// quantities as strings, no empty attribute list.
func TestObjectJSON(t *testing.T) {
	topo := sysfstest.Load(t, "ht-1s-4c")
	obj, err := nrt.Build(nrt.Input{Node: "a", Topology: topo, Reserved: cpuset.New(0), Exclusive: cpuset.New(1, 5)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"apiVersion":"topology.node.k8s.io/v1alpha2","kind":"NodeResourceTopology","metadata":{"name":"a"},` +
		`"zones":[{"name":"node-0","type":"Node","costs":[{"name":"node-0","value":10}],` +
		`"resources":[{"name":"cpu","capacity":"8","allocatable":"7","available":"5"},` +
		`{"name":"memory","capacity":"17179869184","allocatable":"17179869184","available":"17179869184"}]}]}`
	if string(b) != want {
		t.Errorf("JSON\n%s\nwant\n%s", b, want)
	}
}

func TestBuildErrors(t *testing.T) {
	topo := sysfstest.Load(t, "ht-1s-4c")
	for _, tc := range []struct {
		name string
		in   nrt.Input
		want string
	}{
		{"no node", nrt.Input{Topology: topo}, "no node name"},
		{"no topology", nrt.Input{Node: "n"}, "no topology"},
		{"foreign CPUs", nrt.Input{Node: "n", Topology: topo, Exclusive: cpuset.New(3, 8, 9)}, "exclusive CPUs 8-9 are not online CPUs of the machine (0-7)"},
	} {
		if _, err := nrt.Build(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

// Built from a real engine state: under strict-cpu-reservation the shared
// pool leaves the reserved CPUs out, which changes nothing here (reserved
// CPUs are never allocatable); a 4-CPU container on node 1 and an
// exclusive 2-CPU container on node 0 are subtracted from their zones.
func TestFromEngineStrictReservation(t *testing.T) {
	for _, strict := range []bool{false, true} {
		opts := map[string]string{}
		if strict {
			opts[allocator.OptStrictCPUReservation] = "true"
		}
		topo := sysfstest.Load(t, "ht-2s-6c")
		e, err := policy.New(topo, policy.Config{CPUManagerPolicy: "static", ReservedCPUs: cpuset.New(0, 12),
			CPUOptions: opts, TopologyPolicy: "single-numa-node", TopologyScope: "container"})
		if err != nil {
			t.Fatal(err)
		}
		st := e.NewState()
		add := func(pod string, cpus int64) {
			t.Helper()
			var dec policy.Decision
			st, dec, err = e.Add(st, policy.Request{Pod: pod, Container: "c", QoS: policy.Guaranteed,
				CPURequestMilli: cpus * 1000, CPULimitMilli: cpus * 1000})
			if err != nil || !dec.Exclusive {
				t.Fatalf("add %s: %v %+v", pod, err, dec)
			}
		}
		add("a", 10) // all of node 0's allocatable CPUs: 1-5,13-17
		add("b", 4)  // node 1: 6-7,18-19
		got, err := nrt.Build(nrt.Input{Node: "n", Topology: topo, Reserved: e.Reserved(),
			Exclusive: nrt.ExclusiveCPUs(st.Alloc.Assignments)})
		if err != nil {
			t.Fatal(err)
		}
		if r := got.Zones[0].Resources[0]; r != cpu(12, 10, 0) {
			t.Errorf("strict=%v: node-0 cpu %+v, want 12/10/0", strict, r)
		}
		if r := got.Zones[1].Resources[0]; r != cpu(12, 12, 8) {
			t.Errorf("strict=%v: node-1 cpu %+v, want 12/12/8", strict, r)
		}
	}
}
