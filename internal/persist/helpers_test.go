package persist

import (
	"encoding/json"
	"io"
	"math/rand"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy/policytest"
)

// The configuration the store's tests share with the daemon's fuzzers.
const fuzzConfig = policytest.Reserved2BestEffort

// memoryStaticConfig runs the memory manager on ht-2s-6c (16 GiB per
// node, 2 GiB of it in hugepage pools; 1 GiB reserved on node 0).
const memoryStaticConfig = "cpu_manager_policy = \"static\"\nreserved_cpu_count = 2\ntopology_manager_policy = \"best-effort\"\n" +
	"memory_manager_policy = \"Static\"\n[[reserved_memory]]\nnuma_node = 0\nlimits = { memory = \"1Gi\" }\n"

func quietLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// podLevelTOML is pod_level_resource_managers on ht-2s-6c (as
// internal/daemon's pod-level tests run it).
const podLevelTOML = "cpu_manager_policy = \"static\"\nreserved_system_cpus = \"0,12\"\n" +
	"topology_manager_policy = \"single-numa-node\"\ntopology_manager_scope = \"pod\"\npod_level_resource_managers = true\n"

// randomEvent applies one random event for container name of pod to st
// and the index next, and returns the new state: an admission (Guaranteed
// with 1-3 CPUs or Burstable, an init or a regular container; the record
// gets cgroupsPath(id)), a record's mems changed, an in-place resize of
// its exclusive CPUs (to 1-4, refusals change nothing), the container
// removed, or its whole pod.
func randomEvent(rng *rand.Rand, e *policy.Engine, st policy.State, next map[string]ledger.Record, pod, name string, cgroupsPath func(id string) string) policy.State {
	id := pod + "/" + name
	switch rng.Intn(5) {
	case 0, 1:
		qos, milli := policy.Guaranteed, int64(1000*(1+rng.Intn(3)))
		if rng.Intn(3) == 0 {
			qos, milli = policy.Burstable, 500
		}
		req := policy.Request{Pod: pod, Container: name, QoS: qos, CPURequestMilli: milli, CPULimitMilli: milli,
			Type:   allocator.ContainerType(rng.Intn(2)),
			Memory: memorymanager.Request{memorymanager.Memory: uint64(milli) << 20}} // 1000 MiB per CPU
		if e.Config().PodLevelResourceManagers {
			// Every pod a pod-level pod of 4 CPUs: whole-CPU containers
			// take slices, the 500m ones its pool.
			req.QoS, req.PodCPURequestMilli, req.PodCPULimitMilli = policy.Guaranteed, 4000, 4000
		}
		if ns, dec, err := e.Add(st, req); err == nil {
			st = ns
			next[id] = ledger.Record{ID: id, Pod: pod, PodName: "ns/" + pod, Name: name, CgroupsPath: cgroupsPath(id),
				Exclusive: dec.Exclusive, Mems: dec.Mems.String(), Since: []string{"", "2026-11-25T10:00:00Z"}[rng.Intn(2)]}
		}
	case 2:
		if r, ok := next[id]; ok {
			r.Mems = []string{"", "0", "0-1"}[rng.Intn(3)]
			next[id] = r
		}
	case 4:
		if r, ok := next[id]; ok && r.Exclusive {
			milli := int64(1000 * (1 + rng.Intn(4)))
			req := policy.Request{Pod: pod, Container: name, QoS: policy.Guaranteed, CPURequestMilli: milli, CPULimitMilli: milli}
			if ns, dec, err := e.Resize(st, req); err == nil {
				st = ns
				r.Mems = dec.Mems.String()
				next[id] = r
			}
		}
	case 3:
		if rng.Intn(4) == 0 {
			st = e.RemovePod(st, pod)
			for k, r := range next {
				if r.Pod == pod {
					delete(next, k)
				}
			}
		} else {
			st = e.Remove(st, pod, name)
			delete(next, id)
		}
	}
	return st
}

func roundTrip(t *testing.T, p payload) payload {
	t.Helper()
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var out payload
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
