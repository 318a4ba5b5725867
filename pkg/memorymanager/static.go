package memorymanager

import (
	"fmt"
	"maps"
	"slices"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
)

// Request is a container's memory and hugepage requests in bytes (equal to
// its limits: only Guaranteed pods are accounted).
type Request map[Resource]uint64

// Container is one container of a pod as the memory manager sees it.
type Container struct {
	Name    string
	Request Request
	// Restartable marks a sidecar init container (restartPolicy: Always):
	// it keeps running, so its memory is never reused.
	Restartable bool
}

// Pod is what the memory manager needs of a pod: its UID, whether its QoS
// class is Guaranteed, and its containers in spec order.
type Pod struct {
	UID            string
	Guaranteed     bool
	InitContainers []Container
	Containers     []Container
}

// find returns the named container and whether it is a regular (not
// restartable) init container.
func (p Pod) find(name string) (Container, bool, error) {
	for _, c := range p.InitContainers {
		if c.Name == name {
			return c, !c.Restartable, nil
		}
	}
	for _, c := range p.Containers {
		if c.Name == name {
			return c, false, nil
		}
	}
	return Container{}, false, fmt.Errorf("pod %s has no container %q", p.UID, name)
}

func checkRequest(r Request) error {
	for _, name := range sortedResources(r) {
		if !name.valid() {
			return fmt.Errorf("resource %q is neither memory nor hugepages-<size>", name)
		}
	}
	return nil
}

// PodRequest returns the pod-scope request of a pod, per resource (the
// kubelet's rule, KEP-753's for sidecars): the larger of the sum of the
// app containers and sidecars and the most any init container needs while
// it runs (itself plus the sidecars started before it). Every resource
// any container requests is counted (kubelet v1.38, #140816); under v1.37
// the resources no app container requests are left out, as that kubelet
// leaves them out.
func PodRequest(p Pod, v kubever.Version) Request {
	initMax := Request{}
	sidecars := Request{}
	for _, c := range p.InitContainers {
		for name, q := range c.Request {
			if c.Restartable {
				sidecars[name] += q
			} else if sidecars[name]+q > initMax[name] {
				initMax[name] = sidecars[name] + q
			}
		}
	}
	apps := Request{}
	for _, c := range p.Containers {
		for name, q := range c.Request {
			apps[name] += q
		}
	}
	names := maps.Clone(apps)
	if v != kubever.V137 {
		for name := range sidecars {
			names[name] = 0
		}
		for name := range initMax {
			names[name] = 0
		}
	}
	out := Request{}
	for name := range names {
		out[name] = max(apps[name]+sidecars[name], initMax[name])
	}
	return out
}

// Hints returns the memory manager's topology hints for one container, per
// resource, in the shape hints.Merger.Merge takes:
//
//  1. a pod that is not Guaranteed gets nil (no preference);
//  2. a container that already has blocks gets them back as its only,
//     preferred, hints, if they match its request, else nil;
//  3. otherwise every mask of nodes that can hold the request (see
//     calculateHints); an empty map when none can, which the merge reads
//     as no preference and Allocate then refuses.
//
// Under kubelet v1.38 every hint carries a Score (score). It does not
// modify st.
func Hints(st State, pod Pod, container string, v kubever.Version) (map[string][]hints.Hint, error) {
	if !pod.Guaranteed {
		return nil, nil
	}
	c, _, err := pod.find(container)
	if err != nil {
		return nil, err
	}
	if err := checkRequest(c.Request); err != nil {
		return nil, fmt.Errorf("pod %s container %q: %w", pod.UID, container, err)
	}
	if blocks, ok := st.Assignments[pod.UID][container]; ok {
		return regenerate(st, blocks, c.Request, v), nil
	}
	return calculateHints(st, pod.UID, c.Request, v), nil
}

// PodHints returns the hints for the whole pod (topology manager scope
// pod): those of PodRequest, or, once any container of the pod has blocks,
// the first such container's blocks (init containers first) checked
// against that container's own request (kubelet v1.38, #141070: its node,
// preferred). Under v1.37 they are checked against the pod's request, so
// with several containers the sizes differ and the result is nil, no
// preference. It does not modify st.
func PodHints(st State, pod Pod, v kubever.Version) (map[string][]hints.Hint, error) {
	if !pod.Guaranteed {
		return nil, nil
	}
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		if err := checkRequest(c.Request); err != nil {
			return nil, fmt.Errorf("pod %s container %q: %w", pod.UID, c.Name, err)
		}
	}
	req := PodRequest(pod, v)
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		if blocks, ok := st.Assignments[pod.UID][c.Name]; ok {
			if v == kubever.V137 {
				return regenerate(st, blocks, req, v), nil
			}
			return regenerate(st, blocks, c.Request, v), nil
		}
	}
	return calculateHints(st, pod.UID, req, v), nil
}

// score is kubelet v1.38's Score of a hint for one resource on nodes:
// the share of their summed allocatable memory that is not free; 0 under
// v1.37.
func score(st State, nodes []int, name Resource, v kubever.Version) int64 {
	if v == kubever.V137 {
		return 0
	}
	var alloc, free int64
	for _, id := range nodes {
		t := st.table(id, name)
		alloc += int64(t.Allocatable)
		free += int64(t.Free)
	}
	return hints.UtilizationScore(alloc, alloc-free)
}

func regenerate(st State, blocks []Block, req Request, v kubever.Version) map[string][]hints.Hint {
	if len(blocks) != len(req) {
		return nil
	}
	out := map[string][]hints.Hint{}
	for _, b := range blocks {
		want, ok := req[b.Type]
		if !ok || b.Size != want {
			return nil
		}
		out[string(b.Type)] = append(out[string(b.Type)], hints.Hint{Affinity: hints.NewMask(b.NUMAAffinity...), Preferred: true,
			Score: score(st, b.NUMAAffinity, b.Type, v)})
	}
	return out
}

// calculateHints is the kubelet's hint generation. For every mask of nodes,
// narrowest first:
//
//  1. skip it if its nodes' allocatable, summed, is below the request of
//     some resource; otherwise it counts for the narrowest size that could
//     ever hold the request;
//  2. skip a single node that is in a multi-node group;
//  3. skip a multi-node mask with a node in use that is not in a group
//     equal to the mask (a node alone, or in another group);
//  4. skip it if free plus the pod's reusable init-container memory on
//     exactly this mask is below the request of some resource;
//  5. keep it, for every resource.
//
// A kept mask is preferred when its size is the narrowest of step 1: a
// multi-node mask is not preferred while one node could hold the request
// once emptied.
func calculateHints(st State, podUID string, req Request, v kubever.Version) map[string][]hints.Hint {
	nodes := st.NodeIDs()
	minSize := len(nodes)
	var kept []hints.Mask
	names := sortedResources(req)
	for _, mask := range masksOf(nodes) {
		ids := mask.Nodes()
		// Step 1.
		fits := true
		for _, name := range names {
			var alloc uint64
			for _, id := range ids {
				alloc += st.table(id, name).Allocatable
			}
			if alloc < req[name] {
				fits = false
				break
			}
		}
		if !fits {
			continue
		}
		minSize = min(minSize, len(ids))
		// Steps 2 and 3.
		if violatesGroups(st, mask) {
			continue
		}
		// Step 4.
		for _, name := range names {
			var free uint64
			for _, id := range ids {
				free += st.table(id, name).Free
			}
			if free+reusable(st, podUID, mask, name) < req[name] {
				fits = false
				break
			}
		}
		if fits {
			kept = append(kept, mask)
		}
	}
	out := map[string][]hints.Hint{}
	for _, mask := range kept {
		for _, name := range names {
			out[string(name)] = append(out[string(name)], hints.Hint{Affinity: mask, Preferred: mask.Count() == minSize,
				Score: score(st, mask.Nodes(), name, v)})
		}
	}
	return out
}

// violatesGroups reports whether memory on mask would break the rule that
// a node is used either alone or within exactly one group: a single node
// must not be in a multi-node group, and every node in use of a multi-node
// mask must be in a group equal to mask.
func violatesGroups(st State, mask hints.Mask) bool {
	ids := mask.Nodes()
	if len(ids) == 1 {
		return len(st.Nodes[ids[0]].Cells) > 1
	}
	for _, id := range ids {
		n := st.Nodes[id]
		if n.NumberOfAssignments == 0 {
			continue
		}
		if len(n.Cells) == 1 || hints.NewMask(n.Cells...) != mask {
			return true
		}
	}
	return false
}

// masksOf returns every non-empty mask over nodes, by size then in
// lexicographic order of the node lists (the kubelet's IterateBitMasks).
func masksOf(nodes []int) []hints.Mask {
	var out []hints.Mask
	var rec func(size, start int, acc hints.Mask)
	rec = func(size, start int, acc hints.Mask) {
		if size == 0 {
			out = append(out, acc)
			return
		}
		for i := start; i <= len(nodes)-size; i++ {
			rec(size-1, i+1, acc|hints.NewMask(nodes[i]))
		}
	}
	for size := 1; size <= len(nodes); size++ {
		rec(size, 0, 0)
	}
	return out
}

func reusable(st State, podUID string, mask hints.Mask, name Resource) uint64 {
	return st.Reusable[podUID][mask][name]
}

// Error is an allocation the memory manager refuses; Error() is the
// memory manager's text in the kubelet.
type Error struct {
	Pod, Container string
	Msg            string
}

func (e *Error) Error() string { return e.Msg }

// Reason is the reason the kubelet gives a pod its memory manager refuses:
// the refusal is not an admission error type of its own.
func (e *Error) Reason() string { return "UnexpectedAdmissionError" }

// AdmitMessage is the message the kubelet gives such a pod.
func (e *Error) AdmitMessage() string {
	return "Allocate failed due to " + e.Msg + ", which is unexpected"
}

// Assignment is what Allocate decided for a container.
type Assignment struct {
	// Blocks are the container's blocks, one per requested resource in
	// resource name order; nil for a container that is not accounted.
	Blocks []Block
	// Mems is the union of the blocks' nodes, the container's cpuset.mems;
	// empty when Blocks is nil (every memory node).
	Mems hints.Mask
}

// Allocate assigns a container's memory and hugepages given the hint the
// topology manager merged (an empty Affinity: no preference). It returns
// the new state; st is not modified. The rules are the kubelet's:
//
//  1. a pod that is not Guaranteed gets no assignment;
//  2. a container that has blocks keeps them (Allocate is idempotent; the
//     reusable memory is part of the state, so it is not counted again);
//  3. with no affinity, the best of the container's own hints is used
//     (refused if there is none, or if it is not preferred while the
//     merged hint was);
//  4. an affinity whose free memory cannot hold the request is widened to
//     the best hint that contains it (refused if there is none, or if it
//     is not preferred while the merged hint was);
//  5. an affinity that breaks the group rule (see violatesGroups) is
//     refused;
//  6. each resource becomes one block over the affinity; the pod's
//     reusable init-container memory on that affinity is taken first, the
//     rest from the nodes' free memory in node order; every node of the
//     affinity counts one more assignment per block and joins the group;
//  7. a regular init container's blocks become reusable for the pod's
//     later containers; a later container's blocks use that up, and the
//     blocks of the init containers before it shrink by what it took over.
func Allocate(st State, pod Pod, container string, merged hints.Hint) (State, Assignment, error) {
	if !pod.Guaranteed {
		return st, Assignment{}, nil
	}
	c, regularInit, err := pod.find(container)
	if err != nil {
		return st, Assignment{}, err
	}
	if err := checkRequest(c.Request); err != nil {
		return st, Assignment{}, fmt.Errorf("pod %s container %q: %w", pod.UID, container, err)
	}
	refuse := func(msg string) (State, Assignment, error) {
		return st, Assignment{}, &Error{Pod: pod.UID, Container: container, Msg: msg}
	}
	// Step 2.
	if blocks, ok := st.Assignments[pod.UID][container]; ok {
		return st, Assignment{Blocks: cloneBlocks(blocks), Mems: st.Mems(pod.UID, container)}, nil
	}
	for _, id := range merged.Affinity.Nodes() {
		if _, ok := st.Nodes[id]; !ok {
			return st, Assignment{}, fmt.Errorf("pod %s container %q: affinity %s names NUMA node %d, which the memory manager does not know", pod.UID, container, merged.Affinity, id)
		}
	}
	best := merged
	// Step 3.
	if best.Affinity.IsEmpty() {
		// Only affinities matter here, no Score (V137 skips it).
		hs := calculateHints(st, pod.UID, c.Request, kubever.V137)[string(Memory)]
		if len(hs) == 0 {
			return refuse("[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available")
		}
		def := bestHint(hs)
		if !def.Preferred && best.Preferred {
			return refuse("[memorymanager] failed to find the default preferred hint")
		}
		best = def
	}
	// Step 4.
	if !freeHolds(st, best.Affinity, c.Request) {
		var within []hints.Hint
		for _, h := range calculateHints(st, pod.UID, c.Request, kubever.V137)[string(Memory)] {
			if h.Affinity&best.Affinity == best.Affinity {
				within = append(within, h)
			}
		}
		if len(within) == 0 {
			return refuse("[memorymanager] failed to find NUMA nodes to extend the current topology hint")
		}
		ext := bestHint(within)
		if !ext.Preferred && best.Preferred {
			return refuse("[memorymanager] failed to find the extended preferred hint")
		}
		best = ext
	}
	// Step 5.
	if violatesGroups(st, best.Affinity) {
		return refuse("[memorymanager] preferred hint violates NUMA node allocation")
	}
	// Step 6.
	next := st.Clone()
	ids := best.Affinity.Nodes()
	var blocks []Block
	for _, name := range sortedResources(c.Request) {
		size := c.Request[name]
		blocks = append(blocks, Block{NUMAAffinity: slices.Clone(ids), Type: name, Size: size})
		take := size - min(size, reusable(next, pod.UID, best.Affinity, name))
		reserve(&next, ids, name, take)
	}
	// Step 7.
	updateReusable(&next, pod.UID, regularInit, blocks)
	if next.Assignments == nil {
		next.Assignments = map[string]map[string][]Block{}
	}
	if next.Assignments[pod.UID] == nil {
		next.Assignments[pod.UID] = map[string][]Block{}
	}
	next.Assignments[pod.UID][container] = blocks
	shrinkInitBlocks(&next, pod, container, blocks)
	return next, Assignment{Blocks: cloneBlocks(blocks), Mems: best.Affinity}, nil
}

// bestHint returns the first preferred hint of the narrowest size (the
// kubelet's findBestHint); hs is not empty.
func bestHint(hs []hints.Hint) hints.Hint {
	best := hs[0]
	for _, h := range hs[1:] {
		switch {
		case h.Preferred && !best.Preferred:
			best = h
		case h.Preferred == best.Preferred && h.Affinity.IsNarrowerThan(best.Affinity):
			best = h
		}
	}
	return best
}

func freeHolds(st State, mask hints.Mask, req Request) bool {
	for name, want := range req {
		var free uint64
		for _, id := range mask.Nodes() {
			free += st.table(id, name).Free
		}
		if free < want {
			return false
		}
	}
	return true
}

// reserve takes size bytes of a resource from the nodes' free memory in
// node order and puts every node into the group of ids.
func reserve(st *State, ids []int, name Resource, size uint64) {
	for _, id := range ids {
		n := st.Nodes[id]
		n.NumberOfAssignments++
		n.Cells = slices.Clone(ids)
		if size > 0 {
			if t, ok := n.MemoryMap[name]; ok && t.Free > 0 {
				take := min(size, t.Free)
				t.Free -= take
				t.Reserved += take
				size -= take
				n.MemoryMap[name] = t
			}
		}
		st.Nodes[id] = n
	}
}

// updateReusable records a regular init container's blocks as reusable by
// the pod (the largest per affinity and resource), or takes a later
// container's blocks off what is reusable.
func updateReusable(st *State, podUID string, regularInit bool, blocks []Block) {
	if st.Reusable == nil {
		st.Reusable = map[string]map[hints.Mask]map[Resource]uint64{}
	}
	if regularInit {
		if st.Reusable[podUID] == nil {
			st.Reusable[podUID] = map[hints.Mask]map[Resource]uint64{}
		}
		for _, b := range blocks {
			m := hints.NewMask(b.NUMAAffinity...)
			if st.Reusable[podUID][m] == nil {
				st.Reusable[podUID][m] = map[Resource]uint64{}
			}
			if b.Size > st.Reusable[podUID][m][b.Type] {
				st.Reusable[podUID][m][b.Type] = b.Size
			}
		}
		return
	}
	for _, b := range blocks {
		m := hints.NewMask(b.NUMAAffinity...)
		have := st.Reusable[podUID][m][b.Type]
		if have == 0 {
			continue
		}
		st.Reusable[podUID][m][b.Type] = have - min(have, b.Size)
	}
}

// shrinkInitBlocks lowers the block sizes of the regular init containers
// before container by what container's blocks took over (same resource,
// same affinity), so that the pod's blocks sum to what it holds.
func shrinkInitBlocks(st *State, pod Pod, container string, blocks []Block) {
	for _, b := range blocks {
		left := b.Size
		for _, ic := range pod.InitContainers {
			if ic.Name == container || left == 0 {
				break
			}
			if ic.Restartable {
				continue
			}
			ibs := st.Assignments[pod.UID][ic.Name]
			for i := range ibs {
				ib := &ibs[i]
				if ib.Size == 0 || ib.Type != b.Type || !slices.Equal(ib.NUMAAffinity, b.NUMAAffinity) {
					continue
				}
				take := min(ib.Size, left)
				ib.Size -= take
				left -= take
			}
		}
	}
}

// Remove frees a container's blocks: per block, each node of its affinity
// counts one assignment less (a node left with none leaves its group) and
// the block's size returns from the nodes' reserved memory to their free
// memory in node order. A container without blocks leaves the state as it
// is. st is not modified.
func Remove(st State, podUID, container string) State {
	blocks, ok := st.Assignments[podUID][container]
	if !ok {
		return st
	}
	next := st.Clone()
	delete(next.Assignments[podUID], container)
	if len(next.Assignments[podUID]) == 0 {
		delete(next.Assignments, podUID)
	}
	for _, b := range blocks {
		size := b.Size
		for _, id := range b.NUMAAffinity {
			n, ok := next.Nodes[id]
			if !ok {
				continue
			}
			if n.NumberOfAssignments > 0 {
				n.NumberOfAssignments--
			}
			if n.NumberOfAssignments == 0 {
				n.Cells = []int{id}
			}
			if t, ok := n.MemoryMap[b.Type]; ok && size > 0 && t.Reserved > 0 {
				give := min(size, t.Reserved)
				t.Reserved -= give
				t.Free += give
				size -= give
				n.MemoryMap[b.Type] = t
			}
			next.Nodes[id] = n
		}
	}
	return next
}

// RemovePod removes every container of a pod and forgets its reusable
// init-container memory. st is not modified.
func RemovePod(st State, podUID string) State {
	names := make([]string, 0, len(st.Assignments[podUID]))
	for name := range st.Assignments[podUID] {
		names = append(names, name)
	}
	slices.Sort(names)
	next := st
	for _, name := range names {
		next = Remove(next, podUID, name)
	}
	if _, ok := next.Reusable[podUID]; ok {
		next = next.Clone()
		delete(next.Reusable, podUID)
	}
	return next
}
