package kubelet

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"

	"github.com/nri-cpualign/nri-cpualign/test/kubeletparity"
)

// BenchmarkDecision is one placement decision, ours against the
// kubelet's code, at 50% occupancy: the container's CPU hints, the best
// preferred one as the affinity, the allocation. The kubelet's decision
// is undone (RemoveContainer) outside the timer; ours leaves its state
// untouched. Logging is discarded on both sides.
func BenchmarkDecision(b *testing.B) {
	if err := EnableOptions(); err != nil {
		b.Fatal(err)
	}
	for _, name := range kubeletparity.BenchMachines {
		m := kubeletparity.MachineNamed(b, name)
		for _, o := range kubeletparity.BenchOptions() {
			f, err := kubeletparity.Fill(m, o, Release, 50, 1)
			if err != nil {
				b.Fatal(err)
			}
			want, err := f.Decide()
			if err != nil {
				b.Fatal(err)
			}
			b.Run(name+"/"+o.String()+"/engine", func(b *testing.B) {
				b.ReportAllocs()
				for range b.N {
					if _, err := f.Decide(); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(name+"/"+o.String()+"/kubelet", func(b *testing.B) {
				k, err := NewKubelet(m.Topo, 2, o)
				if err != nil {
					b.Fatal(err)
				}
				k.st.SetDefaultCPUSet(f.State.Default.CPUSet())
				for p, cs := range f.State.Assignments {
					for c, set := range cs {
						k.st.SetCPUSet(p, c, set)
					}
				}
				pod := Pod(f.Pod)
				ct := &pod.Spec.Containers[0]
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					hs := k.pol.GetTopologyHints(logger, k.st, pod, ct, lifecycle.AddOperation)[string(v1.ResourceCPU)]
					*k.hint = best(hs)
					if err := k.pol.Allocate(logger, k.st, pod, ct, lifecycle.AddOperation); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					if got, _ := k.st.GetCPUSet(f.Pod.UID, "c"); !got.Equals(want) {
						b.Fatalf("kubelet chose %s, engine %s", got, want)
					}
					k.Remove(f.Pod.UID, "c")
					b.StartTimer()
				}
			})
		}
	}
}

// best is the best-effort merge of one provider's hints: the preferred
// hint with the fewest NUMA nodes, the lowest mask among them.
func best(hs []topologymanager.TopologyHint) topologymanager.TopologyHint {
	var out topologymanager.TopologyHint
	for _, h := range hs {
		if !h.Preferred || h.NUMANodeAffinity == nil {
			continue
		}
		if out.NUMANodeAffinity == nil || h.NUMANodeAffinity.IsNarrowerThan(out.NUMANodeAffinity) {
			out = h
		}
	}
	return out
}
