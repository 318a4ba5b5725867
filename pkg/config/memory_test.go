package config

import (
	"reflect"
	"strings"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
)

// The kubelet's
//
//	memoryManagerPolicy: Static
//	reservedMemory:
//	- numaNode: 0
//	  limits: {memory: 1Gi}
//	- numaNode: 1
//	  limits: {memory: 512Mi, hugepages-2Mi: 64Mi}
//
// line by line.
func TestReservedMemory(t *testing.T) {
	doc := `memory_manager_policy = "Static"
[[reserved_memory]]
numa_node = 0
limits = { memory = "1Gi" }
[[reserved_memory]]
numa_node = 1
limits = { memory = "512Mi", "hugepages-2Mi" = 67108864 }
`
	c, err := Load([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []memorymanager.Reservation{
		{NUMANode: 0, Limits: map[memorymanager.Resource]uint64{"memory": 1 << 30}},
		{NUMANode: 1, Limits: map[memorymanager.Resource]uint64{"memory": 512 << 20, "hugepages-2Mi": 64 << 20}},
	}
	if got := c.Reservations(); !reflect.DeepEqual(got, want) {
		t.Errorf("Reservations() = %+v, want %+v", got, want)
	}
	p, err := c.Policy()
	if err != nil || !reflect.DeepEqual(p.ReservedMemory, want) || p.MemoryPolicy != "Static" {
		t.Errorf("Policy() = %+v, %v", p, err)
	}
	if c.Line("reserved_memory[1]") != 5 || c.Line("reserved_memory[1].limits") != 7 {
		t.Errorf("lines: entry %d, limits %d; want 5, 7", c.Line("reserved_memory[1]"), c.Line("reserved_memory[1].limits"))
	}
	// Encode writes what Load reads back.
	data, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Load(data)
	if err != nil {
		t.Fatalf("reload of\n%s: %v", data, err)
	}
	if !reflect.DeepEqual(back.Reservations(), want) {
		t.Errorf("reloaded %+v", back.Reservations())
	}
	if !strings.Contains(c.Summary(), `reserved_memory=[0:{memory:1Gi},1:{hugepages-2Mi:67108864,memory:512Mi}]`) {
		t.Errorf("Summary %s", c.Summary())
	}
}

// Under None reserved_memory is accepted and unused, as by the kubelet.
func TestReservedMemoryUnderNone(t *testing.T) {
	if _, err := Load([]byte("[[reserved_memory]]\nnuma_node = 0\nlimits = { memory = \"1Gi\" }\n")); err != nil {
		t.Fatal(err)
	}
}

func TestReservedMemoryErrors(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"memory_manager_policy = \"Static\"\n[[reserved_memory]]\nnuma_node = 0\nlimits = { \"hugepages-2Mi\" = \"2Mi\" }\n",
			`config line 1: key "memory_manager_policy": bad value "Static": Static needs reserved memory`},
		{"[[reserved_memory]]\nnuma_node = 0\nlimits = { memory = \"1Gb\" }\n",
			`config line 3: key "reserved_memory[0].limits.memory": bad value "1Gb": want a Kubernetes quantity`},
		{"[[reserved_memory]]\nnuma_node = 0\nlimits = { memory = \"-1Gi\" }\n",
			`key "reserved_memory[0].limits.memory": bad value "-1Gi": want a quantity >= 0`},
		{"[[reserved_memory]]\nnuma_node = 0\nlimits = { memory = \"0\" }\n",
			`config line 1: key "reserved_memory[0]": invalid configuration: reserved memory may not be zero for NUMA node 0 and resource "memory"`},
		{"[[reserved_memory]]\nnuma_node = 0\nlimits = { cpu = \"1\" }\n",
			`key "reserved_memory[0]": invalid configuration: the limit type "cpu" for NUMA node 0 is not supported`},
		{"[[reserved_memory]]\nnuma_node = 0\nlimits = { memory = \"1Gi\" }\n[[reserved_memory]]\nnuma_node = 0\nlimits = { memory = \"1Gi\" }\n",
			`config line 4: key "reserved_memory[1]": NUMA node 0 resource "memory" is also reserved by reserved_memory[0]`},
		{"[[reserved_memory]]\nlimits = { memory = \"1Gi\" }\n", `config line 1: key "reserved_memory[0]": numa_node is missing`},
		{"[[reserved_memory]]\nnuma_node = 64\nlimits = { memory = \"1Gi\" }\n", `config line 2: key "reserved_memory[0].numa_node": bad value "64": want a NUMA node id 0-63`},
		{"[[reserved_memory]]\nnuma_node = 0\n", `key "reserved_memory[0]": limits is missing or empty`},
		{"[[reserved_memory]]\nnuma_node = 0\nlimits = { memory = 1.5 }\n", `key "reserved_memory[0].limits.memory": bad value "1.5": want a quantity string`},
		{"[[reserved_memory]]\nnuma_node = 0\nnode = 1\n", `key "reserved_memory.node"`},
		{"reserved_memory = 1\n", `key "reserved_memory": wrong type`},
		{"\nreserved_memory = [{ numa_node = 0, limits = { memory = \"1Gb\" } }]\n", `config line 2: key "reserved_memory[0].limits.memory": bad value "1Gb"`},
	} {
		_, err := Load([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%q) = %v, want an error containing %q", tc.doc, err, tc.want)
		}
	}
}
