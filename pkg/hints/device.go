package hints

// Masks returns every non-empty mask over the NUMAInfo's nodes, narrowest
// sizes first and, within a size, in lexicographic order of the node lists
// (the kubelet's enumeration order).
func (n NUMAInfo) Masks() []Mask {
	var out []Mask
	for size := 1; size <= len(n.nodes); size++ {
		out = appendCombinations(out, n.nodes, size, 0, 0)
	}
	return out
}

func appendCombinations(out []Mask, nodes []int, size, start int, acc Mask) []Mask {
	if size == 0 {
		return append(out, acc)
	}
	for i := start; i <= len(nodes)-size; i++ {
		out = appendCombinations(out, nodes, size-1, i+1, acc|NewMask(nodes[i]))
	}
	return out
}

// DeviceHints returns the hints of a container's already-assigned devices
// that sit on the given NUMA nodes: every mask over the machine's nodes that
// covers all of them, preferred only for the narrowest such mask, the union
// of the device nodes itself (so a single device on node k prefers exactly
// {k}, as the kubelet's device manager prefers the narrowest mask that holds
// the devices). Nodes the NUMAInfo does not know are ignored; with no known
// node the result is nil, no preference. The hints carry no Score: the
// kubelet's (v1.38) counts the node's healthy and allocated devices on
// each mask, which a plugin that sees one container's devices cannot.
func DeviceHints(numa NUMAInfo, deviceNodes []int) []Hint {
	var need Mask
	for _, node := range deviceNodes {
		if numa.all.IsSet(node) {
			need |= NewMask(node)
		}
	}
	if need == 0 {
		return nil
	}
	var out []Hint
	for _, m := range numa.Masks() {
		if m&need == need {
			out = append(out, Hint{Affinity: m, Preferred: m == need})
		}
	}
	return out
}
