package memorymanager

import (
	"fmt"
	"hash/fnv"
	"reflect"
	"strings"
	"testing"
)

// kubeletV1 is the kubelet's own test checkpoint ("Restore checkpoint from
// v1 (migration)" in state_checkpoint_test.go) with the checksum the
// kubelet computed for it.
const kubeletV1 = `{
	"policyName":"static",
	"machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2048,"systemReserved":512,"allocatable":1536,"reserved":512,"free":1024}},"cells":[]}},
	"entries":{"pod":{"container1":[{"numaAffinity":[0],"type":"memory","size":512}]}},
	"checksum": 4215593881
}`

// kubeletV3 is the newer layout from the same kubelet tests ("Restore
// valid checkpoint"): the outer fields are deliberately wrong, the state
// is in "data" with its own checksum.
const kubeletV3 = `{
	"policyName":"other",
	"machineState":{"0":{"numberOfAssignments":5,"memoryMap":{"memory":{"total":1024,"systemReserved":256,"allocatable":768,"reserved":256,"free":512}},"cells":[]}},
	"entries":{"pod":{"containerX":[{"numaAffinity":[0],"type":"memory","size":128}]}},
	"checksum": 1234,
	"data": "{\"policyName\":\"static\",\"machineState\":{\"0\":{\"numberOfAssignments\":0,\"memoryMap\":{\"memory\":{\"total\":2048,\"systemReserved\":512,\"allocatable\":1536,\"reserved\":512,\"free\":1024}},\"cells\":[]}},\"entries\":{\"pod\":{\"container1\":[{\"numaAffinity\":[0],\"type\":\"memory\",\"size\":512}]}}}",
	"dataChecksum": 1849615440
}`

func TestKubeletChecksums(t *testing.T) {
	ck, err := parseKubelet([]byte(kubeletV1))
	if err != nil {
		t.Fatalf("kubelet's v1 checkpoint: %v", err)
	}
	if ck.PolicyName != "static" || ck.Entries["pod"]["container1"][0].Size != 512 {
		t.Errorf("parsed %+v", ck)
	}
	_, err = parseKubelet([]byte(strings.Replace(kubeletV1, "4215593881", "101010", 1)))
	wantErr(t, err, "checkpoint is corrupted: checksum 101010, the state hashes to 4215593881")
	// A changed value no longer matches.
	_, err = parseKubelet([]byte(strings.Replace(kubeletV1, `"size":512`, `"size":513`, 1)))
	if err == nil || !strings.HasPrefix(err.Error(), "checkpoint is corrupted: checksum 4215593881") {
		t.Errorf("changed size: %v", err)
	}
	// The kubelet accepts a zero checksum.
	if _, err := parseKubelet([]byte(strings.Replace(kubeletV1, "4215593881", "0", 1))); err != nil {
		t.Errorf("zero checksum: %v", err)
	}

	ck, err = parseKubelet([]byte(kubeletV3))
	if err != nil {
		t.Fatalf("kubelet's v3 checkpoint: %v", err)
	}
	if ck.PolicyName != "static" || ck.Entries["pod"]["container1"][0].Size != 512 {
		t.Errorf("v3: the outer fields were used: %+v", ck)
	}
	// The kubelet's test with an unknown field inside data.
	unknown := strings.Replace(strings.Replace(kubeletV3, `"data": "{`, `"data": "{\"unknownField\":\"value\",`, 1), "1849615440", "2100279793", 1)
	if _, err := parseKubelet([]byte(unknown)); err != nil {
		t.Errorf("v3 with an unknown field: %v", err)
	}
	_, err = parseKubelet([]byte(strings.Replace(kubeletV3, "1849615440", "1234", 1)))
	wantErr(t, err, "checkpoint is corrupted: data checksum 1234, the data hashes to 1849615440")
}

// kubeletFile is what a kubelet with the Static policy writes for state2
// after pod1/c got 256Mi of 2Mi pages and 4Gi of memory on node 1.
const kubeletFile = `{"policyName":"Static","machineState":{` +
	`"0":{"numberOfAssignments":0,"memoryMap":{` +
	`"hugepages-1Gi":{"total":2147483648,"systemReserved":0,"allocatable":2147483648,"reserved":0,"free":2147483648},` +
	`"hugepages-2Mi":{"total":1073741824,"systemReserved":0,"allocatable":1073741824,"reserved":0,"free":1073741824},` +
	`"memory":{"total":17179869184,"systemReserved":1073741824,"allocatable":12884901888,"reserved":0,"free":12884901888}},"cells":[0]},` +
	`"1":{"numberOfAssignments":2,"memoryMap":{` +
	`"hugepages-1Gi":{"total":2147483648,"systemReserved":0,"allocatable":2147483648,"reserved":0,"free":2147483648},` +
	`"hugepages-2Mi":{"total":1073741824,"systemReserved":536870912,"allocatable":536870912,"reserved":268435456,"free":268435456},` +
	`"memory":{"total":17179869184,"systemReserved":1073741824,"allocatable":12884901888,"reserved":4294967296,"free":8589934592}},"cells":[1]}},` +
	`"entries":{"pod1":{"c":[{"numaAffinity":[1],"type":"hugepages-2Mi","size":268435456},{"numaAffinity":[1],"type":"memory","size":4294967296}]}},` +
	`"checksum":%d}`

// kubeletFileHashForm is kubeletFile's value as go-spew prints it for the
// kubelet's checksum, written out by hand.
const kubeletFileHashForm = `(*state.MemoryManagerCheckpoint){PolicyName:(string)Static MachineState:(state.NUMANodeMap)map[` +
	`0:<*>{NumberOfAssignments:(int)0 MemoryMap:(map[v1.ResourceName]*state.MemoryTable)map[` +
	`hugepages-1Gi:<*>{TotalMemSize:(uint64)2147483648 SystemReserved:(uint64)0 Allocatable:(uint64)2147483648 Reserved:(uint64)0 Free:(uint64)2147483648} ` +
	`hugepages-2Mi:<*>{TotalMemSize:(uint64)1073741824 SystemReserved:(uint64)0 Allocatable:(uint64)1073741824 Reserved:(uint64)0 Free:(uint64)1073741824} ` +
	`memory:<*>{TotalMemSize:(uint64)17179869184 SystemReserved:(uint64)1073741824 Allocatable:(uint64)12884901888 Reserved:(uint64)0 Free:(uint64)12884901888}] Cells:([]int)[0]} ` +
	`1:<*>{NumberOfAssignments:(int)2 MemoryMap:(map[v1.ResourceName]*state.MemoryTable)map[` +
	`hugepages-1Gi:<*>{TotalMemSize:(uint64)2147483648 SystemReserved:(uint64)0 Allocatable:(uint64)2147483648 Reserved:(uint64)0 Free:(uint64)2147483648} ` +
	`hugepages-2Mi:<*>{TotalMemSize:(uint64)1073741824 SystemReserved:(uint64)536870912 Allocatable:(uint64)536870912 Reserved:(uint64)268435456 Free:(uint64)268435456} ` +
	`memory:<*>{TotalMemSize:(uint64)17179869184 SystemReserved:(uint64)1073741824 Allocatable:(uint64)12884901888 Reserved:(uint64)4294967296 Free:(uint64)8589934592}] Cells:([]int)[1]}] ` +
	`Entries:(state.ContainerMemoryAssignments)map[pod1:map[c:[` +
	`{NUMAAffinity:([]int)[1] Type:(v1.ResourceName)hugepages-2Mi Size:(uint64)268435456} ` +
	`{NUMAAffinity:([]int)[1] Type:(v1.ResourceName)memory Size:(uint64)4294967296}]]] ` +
	`Checksum:(checksum.Checksum)0}`

func kubeletFileBytes() []byte {
	h := fnv.New32a()
	h.Write([]byte(kubeletFileHashForm))
	return fmt.Appendf(nil, kubeletFile, h.Sum32())
}

func TestImportKubelet(t *testing.T) {
	st, err := ImportKubelet(kubeletFileBytes())
	if err != nil {
		t.Fatal(err)
	}
	want := state2(t)
	n := want.Nodes[1]
	n.NumberOfAssignments = 2
	n.MemoryMap[hp2M] = tbl(Gi, 512*Mi, 512*Mi, 256*Mi)
	n.MemoryMap[Memory] = tbl(16*Gi, Gi, 12*Gi, 4*Gi)
	want.Nodes[1] = n
	want.Assignments = map[string]map[string][]Block{"pod1": {"c": {
		{NUMAAffinity: []int{1}, Type: hp2M, Size: 256 * Mi},
		{NUMAAffinity: []int{1}, Type: Memory, Size: 4 * Gi},
	}}}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("imported %+v\nwant %+v", st, want)
	}
	if st.Mems("pod1", "c") != mask(1) {
		t.Errorf("mems = %v", st.Mems("pod1", "c"))
	}
	// It matches this machine with these reservations.
	if err := Compare(st, state2(t)); err != nil {
		t.Errorf("Compare: %v", err)
	}
	// Not with another reservation on node 0.
	other, err := NewState(machine2(), []Reservation{
		{NUMANode: 0, Limits: map[Resource]uint64{Memory: 2 * Gi}},
		{NUMANode: 1, Limits: map[Resource]uint64{Memory: Gi, hp2M: 512 * Mi}},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, Compare(st, other), "[memorymanager] the expected machine state is different from the real one: NUMA node 0 memory: system reserved 1073741824, configured 2147483648")
	// Nor with a machine that lost node 1.
	small, err := NewState(machine2()[:1], []Reservation{{NUMANode: 0, Limits: map[Resource]uint64{Memory: Gi}}})
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, Compare(st, small), "[memorymanager] (pod: pod1, container: c) the memory assignment uses the NUMA that does not exist")
	// Nor with reserved sizes that the blocks do not explain.
	bad := st.Clone()
	n = bad.Nodes[1]
	n.MemoryMap[Memory] = tbl(16*Gi, Gi, 12*Gi, 5*Gi)
	bad.Nodes[1] = n
	wantErr(t, Compare(bad, state2(t)), "[memorymanager] the expected machine state is different from the real one: NUMA node 1 memory: the group [1] has free 7516192768 and reserved 5368709120, the blocks make free 8589934592 and reserved 4294967296")

	// The imported state allocates on: node 1 is used alone, so 2Gi on
	// node 0 is fine, and then 14Gi on the pair is not, though its 10Gi +
	// 8Gi free would hold it.
	next, a := mustAllocate(t, st, guaranteed("p2", ctr("c", Request{Memory: 2 * Gi})), "c", hint(true, 0))
	if a.Mems != mask(0) {
		t.Errorf("mems = %v", a.Mems)
	}
	_, _, err = Allocate(next, guaranteed("p3", ctr("c", Request{Memory: 14 * Gi})), "c", hint(true, 0, 1))
	wantErr(t, err, "[memorymanager] preferred hint violates NUMA node allocation")
}

func TestImportKubeletRefuses(t *testing.T) {
	good := string(kubeletFileBytes())
	zero := strings.Replace(good, good[strings.LastIndex(good, `"checksum":`):], `"checksum":0}`, 1)
	for _, tc := range []struct {
		name, data, err string
	}{
		{"truncated", good[:40], "kubelet memory manager state: unexpected end of JSON input"},
		{"not an object", `[1]`, "kubelet memory manager state: json: cannot unmarshal array into Go value of type memorymanager.kubeletCheckpoint"},
		{"policy", strings.Replace(zero, `"Static"`, `"None"`, 1),
			`kubelet memory manager state: [memorymanager] configured policy "Static" differs from state checkpoint policy "None"`},
		{"checksum", strings.Replace(good, `"reserved":4294967296`, `"reserved":4294967295`, 1), ""},
		{"node key", strings.Replace(zero, `"1":{`, `"x":{`, 1), ""},
		{"null node", strings.Replace(zero, `{"policyName":"Static","machineState":{`, `{"policyName":"Static","machineState":{"7":null,`, 1),
			"kubelet memory manager state: machineState node 7 is null"},
		{"null table", strings.Replace(zero, `"hugepages-1Gi":{"total":2147483648`, `"hugepages-4Mi":null,"hugepages-1Gi":{"total":2147483648`, 1),
			`kubelet memory manager state: machineState node 0 resource "hugepages-4Mi" is null`},
		{"no nodes", `{"policyName":"Static","machineState":{},"checksum":0}`, "kubelet memory manager state: machineState has no NUMA node"},
		{"block on a missing node", strings.Replace(zero, `"numaAffinity":[1],"type":"memory"`, `"numaAffinity":[7],"type":"memory"`, 1),
			`kubelet memory manager state: pod pod1 container "c" block 1: NUMA node 7 does not exist`},
		{"count", strings.Replace(zero, `"numberOfAssignments":2`, `"numberOfAssignments":3`, 1),
			"kubelet memory manager state: NUMA node 1: 3 assignments recorded, the blocks count 2"},
		{"free", strings.Replace(zero, `"free":8589934592`, `"free":8589934591`, 1),
			"kubelet memory manager state: NUMA node 1 memory: total 17179869184, allocatable 12884901888, reserved 4294967296, free 8589934591 do not add up"},
		{"pod entries", strings.Replace(zero, `"checksum":0`, `"podEntries":{"pod1":{"memoryBlocks":[]}},"checksum":0`, 1),
			"kubelet memory manager state: podEntries (pod-level resources) are not supported"},
		{"data checksum without data", strings.Replace(zero, `"checksum":0`, `"checksum":0,"dataChecksum":5`, 1),
			`kubelet memory manager state: "dataChecksum" without "data"`},
		{"data without checksum", strings.Replace(zero, `"checksum":0`, `"checksum":0,"data":"{}"`, 1),
			`kubelet memory manager state: "data" without "dataChecksum"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ImportKubelet([]byte(tc.data))
			if err == nil {
				t.Fatal("accepted")
			}
			if tc.err != "" && err.Error() != tc.err {
				t.Errorf("error = %q\nwant    %q", err, tc.err)
			}
			if !strings.HasPrefix(err.Error(), "kubelet memory manager state: ") {
				t.Errorf("error %q does not say what it read", err)
			}
		})
	}
	// Empty pod entries are what a newer kubelet writes when it has none.
	if _, err := ImportKubelet([]byte(strings.Replace(zero, `"checksum":0`, `"podEntries":{},"checksum":0`, 1))); err != nil {
		t.Errorf("empty podEntries: %v", err)
	}
}

func TestEncodeDecode(t *testing.T) {
	st := state2(t)
	pod := Pod{UID: "p", Guaranteed: true,
		InitContainers: []Container{ctr("init", Request{Memory: 6 * Gi})},
		Containers:     []Container{ctr("app", Request{Memory: 4 * Gi, hp1G: 3 * Gi})},
	}
	st, _ = mustAllocate(t, st, pod, "init", hint(true, 0, 1))
	st, _ = mustAllocate(t, st, pod, "app", hint(true, 0, 1))
	data, err := Encode(st)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, st) {
		t.Errorf("decoded %+v\nwant %+v", got, st)
	}
	// init 6Gi over {0,1}, app took 4Gi of it: 2Gi memory reusable there.
	if !strings.Contains(string(data), `"reusable":{"p":{"0-1":{"memory":2147483648}}}`) {
		t.Errorf("encoding lacks the reusable memory: %s", data)
	}
	for _, tc := range []struct{ name, data, err string }{
		{"empty", ``, "memory manager state: EOF"},
		{"version", `{"version":2,"machineState":{}}`, "memory manager state: version 2, want 1"},
		{"unknown field", `{"version":1,"machineState":{},"extra":1}`, `memory manager state: json: unknown field "extra"`},
		{"no nodes", `{"version":1,"machineState":{}}`, "memory manager state: machine state has no NUMA node"},
		{"cells", `{"version":1,"machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2,"allocatable":1,"free":1}},"cells":[1]}}}`,
			"memory manager state: NUMA node 0: group [1] does not hold the node"},
		{"reusable list", `{"version":1,"machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2,"allocatable":1,"free":1}},"cells":[0]}},"reusable":{"p":{"0-99":{}}}}`,
			`memory manager state: reusable memory of pod p: NUMA node list "0-99": "99" is not a NUMA node id in [0, 64)`},
		{"overflow", `{"version":1,"machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":18446744073709551615,"allocatable":1,"free":1}},"cells":[0]},"1":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":1,"allocatable":1,"free":1}},"cells":[1]}}}`,
			"memory manager state: NUMA node 1 memory: total 1 makes the machine's total overflow"},
		{"reusable on a missing node", `{"version":1,"machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2,"allocatable":1,"free":1}},"cells":[0]}},"reusable":{"p":{"0-1":{"memory":1}}}}`,
			`memory manager state: reusable memory of pod p: NUMA nodes "0-1" are not nodes of the machine`},
		{"reusable above the machine", `{"version":1,"machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2,"allocatable":1,"free":1}},"cells":[0]}},"reusable":{"p":{"0":{"memory":3}}}}`,
			`memory manager state: reusable memory of pod p on 0: 3 of memory, more than the machine has`},
		{"block order", `{"version":1,"machineState":{"0":{"numberOfAssignments":2,"memoryMap":{"memory":{"total":2,"allocatable":1,"free":1}},"cells":[0]}},"entries":{"p":{"c":[{"numaAffinity":[0,0],"type":"memory","size":1}]}}}`,
			`memory manager state: pod p container "c" block 0: NUMA nodes [0 0] not ascending and distinct`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.data))
			wantErr(t, err, tc.err)
		})
	}
}
