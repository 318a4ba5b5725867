//go:build testhooks

package churn

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/observe"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// opScrape reads the plugin's HTTP endpoints as Prometheus and an operator
// do, in process: /healthz is healthy (connected and synchronized between
// steps), /state shows what the engine holds (the shared pool, every
// exclusive container's CPUs, the pod-level pods' blocks), /metrics serves
// the pool gauges.
func (c *churn) opScrape() {
	c.settle()
	h := c.d.Handler()
	get := func(path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if w.Code != http.StatusOK {
			c.fail("GET %s: %d %s", path, w.Code, w.Body)
		}
		return w
	}
	c.ops["scrape"]++
	c.record("scrape /healthz /state /metrics")
	get("/healthz")
	var sv observe.StateView
	if err := json.Unmarshal(get("/state").Body.Bytes(), &sv); err != nil {
		c.fail("/state: %v", err)
	}
	e, st := c.d.EngineState()
	if !sv.Connected || !sv.Synchronized {
		c.fail("/state: connected %v, synchronized %v between steps", sv.Connected, sv.Synchronized)
	}
	// shared is what shared-pool containers run on (docs/metrics.md): the
	// pool, or the reserved CPUs while it is empty.
	if want := e.SharedMask(st).CPUSet(); !sameList(sv.Shared, want) {
		c.fail("/state: shared %q, the engine's pool %s (empty: the reserved CPUs)", sv.Shared, want)
	}
	for _, cv := range sv.Containers {
		if !cv.Exclusive {
			continue
		}
		if want, ok := e.Assignment(st, cv.PodUID, cv.Container); !ok || !sameList(cv.CPUs, want) {
			c.fail("/state: %s/%s exclusive on %q, the engine's assignment %s (%v)", cv.PodUID, cv.Container, cv.CPUs, want, ok)
		}
	}
	for _, pv := range sv.PodPools {
		if want := st.Alloc.Assignments[pv.PodUID][policy.PodPoolEntry]; !sameList(pv.Block, want) {
			c.fail("/state: pod %s's block %q, the engine's %s", pv.PodUID, pv.Block, want)
		}
	}
	c.checkNRT()
	m := get("/metrics").Body.String()
	if !strings.Contains(m, "nri_cpualign_shared_cpus ") || !strings.Contains(m, "nri_cpualign_connected 1") {
		c.fail("/metrics lacks the pool gauges or nri_cpualign_connected 1")
	}
	c.checkMemoryView(sv, m)
}

// sameList compares a CPU list as /state writes it with a set.
func sameList(s string, want cpuset.CPUSet) bool {
	got, err := cpuset.Parse(s)
	return err == nil && sameSet(got, want)
}

// checkNRT checks the NodeResourceTopology object the exporter publishes
// (docs/node-resource-topology.md): one zone per NUMA node, named
// node-<id>, whose cpu row has the node's CPUs as capacity, those less the
// reserved ones as allocatable, and those less every exclusive assignment
// (CPUs held for exited containers of live pods, pod-level blocks) as
// available.
func (c *churn) checkNRT() {
	obj, err := c.d.NRT("churn-node")
	if err != nil {
		c.fail("NodeResourceTopology: %v", err)
	}
	e, st := c.d.EngineState()
	if obj.Metadata.Name != "churn-node" {
		c.fail("NodeResourceTopology named %q, want the node's name", obj.Metadata.Name)
	}
	exclusive := cpuset.New()
	for _, byName := range st.Alloc.Assignments {
		for _, cpus := range byName {
			exclusive = exclusive.Union(cpus)
		}
	}
	zones := map[string]bool{}
	for _, z := range obj.Zones {
		zones[z.Name] = true
	}
	for _, node := range c.topo.NUMANodes() {
		name := fmt.Sprintf("node-%d", node)
		cpus := c.topo.CPUsInNUMANodes(node)
		if cpus.IsEmpty() {
			continue
		}
		if !zones[name] {
			c.fail("NodeResourceTopology has no zone %s (zones %v)", name, zones)
		}
		alloc := cpus.Difference(e.Reserved())
		want := [3]int64{int64(cpus.Size()), int64(alloc.Size()), int64(alloc.Difference(exclusive).Size())}
		rows := 0
		for _, z := range obj.Zones {
			for _, r := range z.Resources {
				if z.Name != name || r.Name != "cpu" {
					continue
				}
				rows++
				if [3]int64{r.Capacity, r.Allocatable, r.Available} != want {
					c.fail("NodeResourceTopology zone %s cpu: capacity/allocatable/available %d/%d/%d, want %v (reserved %s, exclusive %s)",
						name, r.Capacity, r.Allocatable, r.Available, want, e.Reserved(), exclusive)
				}
			}
		}
		if rows != 1 {
			c.fail("NodeResourceTopology zone %s has %d cpu rows, want 1", name, rows)
		}
	}
}
