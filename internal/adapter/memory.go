package adapter

import (
	"slices"

	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// withMemoryReuse lets req's container take over the memory its pod holds
// for exited containers (held.go: an init container has exited before its
// pod's next container is created), as the kubelet's memory manager lets
// a pod's containers take over its init containers' memory: the names of
// the pod's containers with memory blocks and no tracked container, for a
// container that has none yet. tracked says which names of the pod run.
func withMemoryReuse(e *policy.Engine, st policy.State, req policy.Request, tracked func(name string) bool) policy.Request {
	if !e.MemoryStatic() {
		return req
	}
	held := st.Memory.Assignments[req.Pod]
	if _, ok := held[req.Container]; ok || len(held) == 0 {
		return req
	}
	var names []string
	for name := range held {
		if !tracked(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	req.MemoryReuse = names
	return req
}
