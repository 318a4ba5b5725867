package memorymanager

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
)

// encodingVersion is the version of Encode's format.
const encodingVersion = 1

// stateJSON is Encode's format: the kubelet's machineState and entries, and
// the reusable init-container memory (which the kubelet keeps in memory
// only) keyed by the affinity as a list ("0-1").
type stateJSON struct {
	Version      int                                       `json:"version"`
	MachineState map[int]NodeState                         `json:"machineState"`
	Entries      map[string]map[string][]Block             `json:"entries,omitempty"`
	Reusable     map[string]map[string]map[Resource]uint64 `json:"reusable,omitempty"`
}

// Encode returns st as JSON.
func Encode(st State) ([]byte, error) {
	out := stateJSON{Version: encodingVersion, MachineState: st.Nodes, Entries: st.Assignments}
	for pod, byMask := range st.Reusable {
		if out.Reusable == nil {
			out.Reusable = map[string]map[string]map[Resource]uint64{}
		}
		m := map[string]map[Resource]uint64{}
		for mask, r := range byMask {
			m[mask.String()] = r
		}
		out.Reusable[pod] = m
	}
	return json.Marshal(out)
}

// Decode reads what Encode wrote and checks that it is consistent (see
// Check); the error names what is wrong and where.
func Decode(data []byte) (State, error) {
	var in stateJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return State{}, fmt.Errorf("memory manager state: %w", err)
	}
	if in.Version != encodingVersion {
		return State{}, fmt.Errorf("memory manager state: version %d, want %d", in.Version, encodingVersion)
	}
	st := State{Nodes: in.MachineState, Assignments: in.Entries}
	for pod, byMask := range in.Reusable {
		if st.Reusable == nil {
			st.Reusable = map[string]map[hints.Mask]map[Resource]uint64{}
		}
		st.Reusable[pod] = map[hints.Mask]map[Resource]uint64{}
		for list, r := range byMask {
			mask, err := parseMask(list)
			if err != nil {
				return State{}, fmt.Errorf("memory manager state: reusable memory of pod %s: %w", pod, err)
			}
			st.Reusable[pod][mask] = r
		}
	}
	if err := Check(st); err != nil {
		return State{}, fmt.Errorf("memory manager state: %w", err)
	}
	return st, nil
}

// parseMask reads a NUMA node list ("0-1,3") of ids below maxNodes.
func parseMask(list string) (hints.Mask, error) {
	var m hints.Mask
	if list == "" {
		return 0, fmt.Errorf("empty NUMA node list")
	}
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := nodeID(lo)
		if err != nil {
			return 0, fmt.Errorf("NUMA node list %q: %w", list, err)
		}
		b := a
		if isRange {
			if b, err = nodeID(hi); err != nil {
				return 0, fmt.Errorf("NUMA node list %q: %w", list, err)
			}
			if b < a {
				return 0, fmt.Errorf("NUMA node list %q: range %q is backwards", list, part)
			}
		}
		for id := a; id <= b; id++ {
			m |= hints.NewMask(id)
		}
	}
	return m, nil
}

func nodeID(s string) (int, error) {
	id, err := strconv.Atoi(s)
	if err != nil || id < 0 || id >= maxNodes || s != strconv.Itoa(id) {
		return 0, fmt.Errorf("%q is not a NUMA node id in [0, %d)", s, maxNodes)
	}
	return id, nil
}

// Check verifies that st is consistent in itself: node ids in range, every
// table with Reserved + Free = Allocatable <= TotalMemSize, every node in
// its own group and every group member a node; every block over known
// nodes, ascending and distinct, of a resource each node has; every node's
// NumberOfAssignments equal to the blocks over it; reusable memory on
// nodes of the machine and no more than it has. It does not compare st
// with the machine (see Compare).
func Check(st State) error {
	if len(st.Nodes) == 0 {
		return fmt.Errorf("machine state has no NUMA node")
	}
	counts := map[int]int{}
	for pod, ctrs := range st.Assignments {
		for name, blocks := range ctrs {
			for i, b := range blocks {
				where := fmt.Sprintf("pod %s container %q block %d", pod, name, i)
				if !b.Type.valid() {
					return fmt.Errorf("%s: resource %q is neither memory nor hugepages-<size>", where, b.Type)
				}
				if len(b.NUMAAffinity) == 0 {
					return fmt.Errorf("%s: no NUMA node", where)
				}
				for j, id := range b.NUMAAffinity {
					if j > 0 && id <= b.NUMAAffinity[j-1] {
						return fmt.Errorf("%s: NUMA nodes %v not ascending and distinct", where, b.NUMAAffinity)
					}
					n, ok := st.Nodes[id]
					if !ok {
						return fmt.Errorf("%s: NUMA node %d does not exist", where, id)
					}
					if _, ok := n.MemoryMap[b.Type]; !ok {
						return fmt.Errorf("%s: NUMA node %d has no %s", where, id, b.Type)
					}
					counts[id]++
				}
			}
		}
	}
	// The policy sums sizes over nodes; keep those sums from wrapping.
	totals := map[Resource]uint64{}
	for _, id := range st.NodeIDs() {
		for name, t := range st.Nodes[id].MemoryMap {
			if totals[name]+t.TotalMemSize < totals[name] {
				return fmt.Errorf("NUMA node %d %s: total %d makes the machine's total overflow", id, name, t.TotalMemSize)
			}
			totals[name] += t.TotalMemSize
		}
	}
	var all hints.Mask
	for id := range st.Nodes {
		all |= hints.NewMask(id)
	}
	for pod, byMask := range st.Reusable {
		for m, r := range byMask {
			if m.IsEmpty() || m&all != m {
				return fmt.Errorf("reusable memory of pod %s: NUMA nodes %q are not nodes of the machine", pod, m.String())
			}
			for name, v := range r {
				if v > totals[name] {
					return fmt.Errorf("reusable memory of pod %s on %s: %d of %s, more than the machine has", pod, m, v, name)
				}
			}
		}
	}
	for _, id := range st.NodeIDs() {
		n := st.Nodes[id]
		if id < 0 || id >= maxNodes {
			return fmt.Errorf("NUMA node id %d out of range [0, %d)", id, maxNodes)
		}
		if len(n.MemoryMap) == 0 {
			return fmt.Errorf("NUMA node %d: no memory table", id)
		}
		for _, name := range sortedResources(n.MemoryMap) {
			t := n.MemoryMap[name]
			if !name.valid() {
				return fmt.Errorf("NUMA node %d: resource %q is neither memory nor hugepages-<size>", id, name)
			}
			if t.Reserved > t.Allocatable || t.Free != t.Allocatable-t.Reserved || t.Allocatable > t.TotalMemSize {
				return fmt.Errorf("NUMA node %d %s: total %d, allocatable %d, reserved %d, free %d do not add up", id, name, t.TotalMemSize, t.Allocatable, t.Reserved, t.Free)
			}
		}
		if !slices.Contains(n.Cells, id) {
			return fmt.Errorf("NUMA node %d: group %v does not hold the node", id, n.Cells)
		}
		for _, c := range n.Cells {
			if _, ok := st.Nodes[c]; !ok {
				return fmt.Errorf("NUMA node %d: group %v names NUMA node %d, which does not exist", id, n.Cells, c)
			}
		}
		if n.NumberOfAssignments != counts[id] {
			return fmt.Errorf("NUMA node %d: %d assignments recorded, the blocks count %d", id, n.NumberOfAssignments, counts[id])
		}
	}
	return nil
}

// Compare is the kubelet's start-up check of a restored state against the
// machine (validateState): the assignments of st are replayed on fresh, the
// state NewState gives for the machine and reservations of today, and the
// result must match st: per node, the assignment count, the group, and per
// resource the total, reserved-for-system and allocatable sizes and the
// free and reserved sizes summed over the group. A mismatch (memory added
// or removed, reservations changed) gets the kubelet's text and the first
// difference.
func Compare(st, fresh State) error {
	want := fresh.Clone()
	pods := slices.Sorted(maps.Keys(st.Assignments))
	for _, pod := range pods {
		for _, name := range slices.Sorted(maps.Keys(st.Assignments[pod])) {
			for _, b := range st.Assignments[pod][name] {
				for _, id := range b.NUMAAffinity {
					if _, ok := want.Nodes[id]; !ok {
						return fmt.Errorf("[memorymanager] (pod: %s, container: %s) the memory assignment uses the NUMA that does not exist", pod, name)
					}
					if _, ok := want.Nodes[id].MemoryMap[b.Type]; !ok {
						return fmt.Errorf("[memorymanager] (pod: %s, container: %s) the memory assignment uses memory resource that does not exist", pod, name)
					}
				}
				reserve(&want, b.NUMAAffinity, b.Type, b.Size)
			}
		}
	}
	if diff := stateDiff(st, want); diff != "" {
		return fmt.Errorf("[memorymanager] the expected machine state is different from the real one: %s", diff)
	}
	return nil
}

func stateDiff(got, want State) string {
	if len(got.Nodes) != len(want.Nodes) {
		return fmt.Sprintf("%d NUMA nodes, the machine has %d", len(got.Nodes), len(want.Nodes))
	}
	for _, id := range got.NodeIDs() {
		g := got.Nodes[id]
		w, ok := want.Nodes[id]
		if !ok {
			return fmt.Sprintf("NUMA node %d is not on the machine", id)
		}
		if g.NumberOfAssignments != w.NumberOfAssignments {
			return fmt.Sprintf("NUMA node %d: %d assignments, the blocks count %d", id, g.NumberOfAssignments, w.NumberOfAssignments)
		}
		if !slices.Equal(sortedInts(g.Cells), sortedInts(w.Cells)) {
			return fmt.Sprintf("NUMA node %d: group %v, the blocks make %v", id, g.Cells, w.Cells)
		}
		if len(g.MemoryMap) != len(w.MemoryMap) {
			return fmt.Sprintf("NUMA node %d: %d resources, the machine has %d", id, len(g.MemoryMap), len(w.MemoryMap))
		}
		for _, name := range sortedResources(g.MemoryMap) {
			gt := g.MemoryMap[name]
			wt, ok := w.MemoryMap[name]
			if !ok {
				return fmt.Sprintf("NUMA node %d: %s is not on the machine", id, name)
			}
			switch {
			case gt.TotalMemSize != wt.TotalMemSize:
				return fmt.Sprintf("NUMA node %d %s: total %d, the machine has %d", id, name, gt.TotalMemSize, wt.TotalMemSize)
			case gt.SystemReserved != wt.SystemReserved:
				return fmt.Sprintf("NUMA node %d %s: system reserved %d, configured %d", id, name, gt.SystemReserved, wt.SystemReserved)
			case gt.Allocatable != wt.Allocatable:
				return fmt.Sprintf("NUMA node %d %s: allocatable %d, the machine gives %d", id, name, gt.Allocatable, wt.Allocatable)
			}
			var gFree, gRes, wFree, wRes uint64
			for _, c := range g.Cells {
				gFree += got.table(c, name).Free
				gRes += got.table(c, name).Reserved
				wFree += want.table(c, name).Free
				wRes += want.table(c, name).Reserved
			}
			if gFree != wFree || gRes != wRes {
				return fmt.Sprintf("NUMA node %d %s: the group %v has free %d and reserved %d, the blocks make free %d and reserved %d", id, name, g.Cells, gFree, gRes, wFree, wRes)
			}
		}
	}
	return ""
}

func sortedInts(s []int) []int {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// KubeletPolicy is the policy name the kubelet writes in its state file for
// the Static policy.
const KubeletPolicy = "Static"

// kubeletTable, kubeletNode, kubeletBlock and kubeletCheckpoint mirror the
// kubelet's state types field for field and in order: the checksum is
// computed over their printed form.
type kubeletTable struct {
	TotalMemSize   uint64 `json:"total"`
	SystemReserved uint64 `json:"systemReserved"`
	Allocatable    uint64 `json:"allocatable"`
	Reserved       uint64 `json:"reserved"`
	Free           uint64 `json:"free"`
}

type kubeletNode struct {
	NumberOfAssignments int                      `json:"numberOfAssignments"`
	MemoryMap           map[string]*kubeletTable `json:"memoryMap"`
	Cells               []int                    `json:"cells"`
}

type kubeletBlock struct {
	NUMAAffinity []int  `json:"numaAffinity"`
	Type         string `json:"type"`
	Size         uint64 `json:"size"`
}

type kubeletCheckpoint struct {
	PolicyName   string                               `json:"policyName"`
	MachineState map[int]*kubeletNode                 `json:"machineState"`
	Entries      map[string]map[string][]kubeletBlock `json:"entries,omitempty"`
	PodEntries   json.RawMessage                      `json:"podEntries,omitempty"`
	Checksum     uint64                               `json:"checksum"`
	// The newest kubelets also write the state as a string with its own
	// checksum; when present it is the one the kubelet reads.
	Data         *string `json:"data,omitempty"`
	DataChecksum *uint64 `json:"dataChecksum,omitempty"`
}

// ImportKubelet reads the kubelet's memory manager state file
// (/var/lib/kubelet/memory_manager_state) and returns it as a State,
// checked as Check does. Both layouts are read: the one of every GA kubelet
// ({policyName, machineState, entries, checksum}) and the newer one that
// adds the state as a string in "data" with "dataChecksum". The checksum is
// verified as the kubelet verifies it (FNV-32a over the Go value as the
// kubelet prints it for hashing); a checksum of 0 is accepted, as the
// kubelet accepts it. The policy must be Static; pod-level entries
// (podEntries, a newer kubelet's pod-level resources) are refused. Every
// error names what is wrong and where; none of this panics.
func ImportKubelet(data []byte) (State, error) {
	ck, err := parseKubelet(data)
	if err != nil {
		return State{}, fmt.Errorf("kubelet memory manager state: %w", err)
	}
	if ck.PolicyName != KubeletPolicy {
		return State{}, fmt.Errorf("kubelet memory manager state: [memorymanager] configured policy %q differs from state checkpoint policy %q", KubeletPolicy, ck.PolicyName)
	}
	if len(ck.PodEntries) > 0 && !isEmptyJSON(ck.PodEntries) {
		return State{}, fmt.Errorf("kubelet memory manager state: podEntries (pod-level resources) are not supported")
	}
	st, err := fromKubelet(ck)
	if err != nil {
		return State{}, fmt.Errorf("kubelet memory manager state: %w", err)
	}
	if err := Check(st); err != nil {
		return State{}, fmt.Errorf("kubelet memory manager state: %w", err)
	}
	return st, nil
}

func isEmptyJSON(raw json.RawMessage) bool {
	s := string(bytes.TrimSpace(raw))
	return s == "{}" || s == "null"
}

func newKubeletCheckpoint() *kubeletCheckpoint {
	return &kubeletCheckpoint{MachineState: map[int]*kubeletNode{}, Entries: map[string]map[string][]kubeletBlock{}}
}

func parseKubelet(data []byte) (*kubeletCheckpoint, error) {
	outer := newKubeletCheckpoint()
	if err := json.Unmarshal(data, outer); err != nil {
		return nil, err
	}
	if outer.Data != nil || outer.DataChecksum != nil {
		if outer.Data == nil {
			return nil, fmt.Errorf(`"dataChecksum" without "data"`)
		}
		if outer.DataChecksum == nil {
			return nil, fmt.Errorf(`"data" without "dataChecksum"`)
		}
		if got := fnv32a("(string)" + *outer.Data); uint64(got) != *outer.DataChecksum {
			return nil, fmt.Errorf("checkpoint is corrupted: data checksum %d, the data hashes to %d", *outer.DataChecksum, got)
		}
		inner := newKubeletCheckpoint()
		if err := json.Unmarshal([]byte(*outer.Data), inner); err != nil {
			return nil, fmt.Errorf("data: %w", err)
		}
		if inner.Data != nil || inner.DataChecksum != nil {
			return nil, fmt.Errorf(`data: nested "data"`)
		}
		return inner, nil
	}
	if outer.Checksum == 0 {
		return outer, nil
	}
	// The GA layout hashes the struct without pod entries; kubelets that
	// know pod entries hash them too, empty.
	v1 := fnv32a(hashForm(outer, false))
	v2 := fnv32a(hashForm(outer, true))
	if uint64(v1) != outer.Checksum && uint64(v2) != outer.Checksum {
		return nil, fmt.Errorf("checkpoint is corrupted: checksum %d, the state hashes to %d", outer.Checksum, v1)
	}
	return outer, nil
}

func fromKubelet(ck *kubeletCheckpoint) (State, error) {
	st := State{Nodes: map[int]NodeState{}}
	if len(ck.MachineState) == 0 {
		return State{}, fmt.Errorf("machineState has no NUMA node")
	}
	for id, n := range ck.MachineState {
		if n == nil {
			return State{}, fmt.Errorf("machineState node %d is null", id)
		}
		ns := NodeState{NumberOfAssignments: n.NumberOfAssignments, Cells: slices.Clone(n.Cells), MemoryMap: map[Resource]MemoryTable{}}
		for name, t := range n.MemoryMap {
			if t == nil {
				return State{}, fmt.Errorf("machineState node %d resource %q is null", id, name)
			}
			ns.MemoryMap[Resource(name)] = MemoryTable(*t)
		}
		st.Nodes[id] = ns
	}
	for pod, ctrs := range ck.Entries {
		if st.Assignments == nil {
			st.Assignments = map[string]map[string][]Block{}
		}
		st.Assignments[pod] = map[string][]Block{}
		for name, blocks := range ctrs {
			out := make([]Block, len(blocks))
			for i, b := range blocks {
				out[i] = Block{NUMAAffinity: slices.Clone(b.NUMAAffinity), Type: Resource(b.Type), Size: b.Size}
			}
			st.Assignments[pod][name] = out
		}
	}
	return st, nil
}

// fnv32a is the kubelet checksum's hash (hash/fnv's 32-bit FNV-1a).
func fnv32a(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// hashForm prints the kubelet's checkpoint value the way its checksum
// reads it: go-spew's "%#v" with sorted keys, as k8s.io/utils/dump.ForHash
// configures it, of a *state.MemoryManagerCheckpoint with Checksum 0 (types
// on struct fields, none on map keys, map values and slice elements; nil
// maps, slices and pointers as <nil>).
func hashForm(ck *kubeletCheckpoint, podEntries bool) string {
	var b bytes.Buffer
	b.WriteString("(*state.MemoryManagerCheckpoint){PolicyName:(string)")
	b.WriteString(ck.PolicyName)
	b.WriteString(" MachineState:(state.NUMANodeMap)")
	writeMap(&b, ck.MachineState, strconv.Itoa, writeNode)
	b.WriteString(" Entries:(state.ContainerMemoryAssignments)")
	writeMap(&b, ck.Entries, identity, func(b *bytes.Buffer, ctrs map[string][]kubeletBlock) {
		writeMap(b, ctrs, identity, writeBlocks)
	})
	if podEntries {
		b.WriteString(" PodEntries:(state.PodMemoryAssignments)map[]")
	}
	b.WriteString(" Checksum:(checksum.Checksum)0}")
	return b.String()
}

func writeNode(b *bytes.Buffer, n *kubeletNode) {
	if n == nil {
		b.WriteString("<nil>")
		return
	}
	b.WriteString("<*>{NumberOfAssignments:(int)")
	b.WriteString(strconv.Itoa(n.NumberOfAssignments))
	b.WriteString(" MemoryMap:(map[v1.ResourceName]*state.MemoryTable)")
	writeMap(b, n.MemoryMap, identity, func(b *bytes.Buffer, t *kubeletTable) {
		if t == nil {
			b.WriteString("<nil>")
			return
		}
		fmt.Fprintf(b, "<*>{TotalMemSize:(uint64)%d SystemReserved:(uint64)%d Allocatable:(uint64)%d Reserved:(uint64)%d Free:(uint64)%d}",
			t.TotalMemSize, t.SystemReserved, t.Allocatable, t.Reserved, t.Free)
	})
	b.WriteString(" Cells:([]int)")
	writeInts(b, n.Cells)
	b.WriteByte('}')
}

// writeMap prints m as spew does with sorted keys: map[k:v k:v], or <nil>.
func writeMap[K cmp.Ordered, V any](b *bytes.Buffer, m map[K]V, key func(K) string, val func(*bytes.Buffer, V)) {
	if m == nil {
		b.WriteString("<nil>")
		return
	}
	b.WriteString("map[")
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(key(k))
		b.WriteByte(':')
		val(b, m[k])
	}
	b.WriteByte(']')
}

func identity(s string) string { return s }

func writeBlocks(b *bytes.Buffer, blocks []kubeletBlock) {
	if blocks == nil {
		b.WriteString("<nil>")
		return
	}
	b.WriteByte('[')
	for i, bl := range blocks {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("{NUMAAffinity:([]int)")
		writeInts(b, bl.NUMAAffinity)
		b.WriteString(" Type:(v1.ResourceName)")
		b.WriteString(bl.Type)
		fmt.Fprintf(b, " Size:(uint64)%d}", bl.Size)
	}
	b.WriteByte(']')
}

func writeInts(b *bytes.Buffer, s []int) {
	if s == nil {
		b.WriteString("<nil>")
		return
	}
	b.WriteByte('[')
	for i, v := range s {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(v))
	}
	b.WriteByte(']')
}
