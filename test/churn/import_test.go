//go:build testhooks

package churn

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/daemon"
	"github.com/nri-cpualign/nri-cpualign/internal/invariant"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubeletstate"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// The migration from the kubelet's static policy (docs/migration.md): the
// node already runs Guaranteed containers on the CPUs the kubelet gave
// them, the kubelet's cpu_manager_state (1.37's V4) lists them, and the
// plugin starts for the first time with --import-kubelet-state
// (daemon.WithKubeletState). It must adopt every exclusive assignment of
// the file: those containers are exclusive on exactly the kubelet's CPUs,
// the others share the rest. The file also has an entry on a reserved CPU
// (refused by the engine and skipped: its container, created while the
// plugin was away, is placed afresh at Synchronize) and one of a pod that
// is gone (released at Synchronize: the leak check of verify). Later
// starts use the plugin's own checkpoint and ignore the file.

// kubeletPods are the containers running before the plugin's first start,
// and their CPUs in the kubelet's state: CPUs of the setup's machine
// (ht-2s-6c) outside its reserved CPUs, and CPU 0, reserved.
var kubeletPods = []struct{ cpus string }{{"1-2"}, {"3,15"}, {"6-9"}, {"0"}}

// importNode runs kubeletPods in the runtime, unpinned as the kubelet with
// the none policy leaves them, writes the kubelet's state under dir and
// returns what the model must find after the first Synchronize.
func (c *churn) importNode(dir string) map[invariant.Key]cpuset.CPUSet {
	want := map[invariant.Key]cpuset.CPUSet{}
	entries := []string{`"gone-pod":{"c1":"10-11"}`}
	for _, kp := range kubeletPods {
		cpus, err := cpuset.Parse(kp.cpus)
		if err != nil {
			c.t.Fatal(err)
		}
		p := c.newPod(framework.Guaranteed)
		c.qos[p.Id] = framework.Guaranteed
		c.rt.RunPodAway(p)
		name := c.nextName(p)
		r := framework.GuaranteedMilli(int64(cpus.Size()) * 1000)
		ct := c.rt.NewContainer(p, name, r)
		c.rt.CreateContainerAway(ct)
		c.res[ct.Id], c.nameRes[c.keyOf(ct)] = r, r
		want[invariant.Key{Pod: p.Uid, Container: name}] = cpus
		entries = append(entries, fmt.Sprintf(`%q:{%q:%q}`, p.Uid, name, kp.cpus))
		c.record("kubelet: %s/%s on %s -> %s", p.Uid, name, cpus, ct.Id)
	}
	data := `{"policyName":"static","defaultCpuSet":"0,4-5,10-14,16-23","entries":{` + strings.Join(entries, ",") + `}}`
	file := `{"policyName":"static","defaultCpuSet":"0-23","checksum":0,"data":` + strconv.Quote(data) +
		`,"dataChecksum":` + strconv.FormatUint(uint64(kubeletstate.StringChecksum(data)), 10) + `}`
	path := filepath.Join(dir, "kubelet-cpu_manager_state")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		c.t.Fatal(err)
	}
	c.opts = append(c.opts, daemon.WithKubeletState(path))
	return want
}

// checkImported checks the first Synchronize after the import: every
// container of the kubelet's file is exclusive on exactly its CPUs and
// runs there; nothing is assigned to the reserved entry.
func (c *churn) checkImported(want map[invariant.Key]cpuset.CPUSet) {
	c.afterSync()
	e, st := c.d.EngineState()
	applied, err := c.tracked()
	if err != nil {
		c.fail("%v", err)
	}
	for k, cpus := range want {
		if cpus.IsSubsetOf(e.Reserved()) {
			// The entry on a reserved CPU: skipped, the container placed
			// afresh.
			if have, _ := e.Assignment(st, k.Pod, k.Container); !have.Intersection(e.Reserved()).IsEmpty() {
				c.fail("%s: the kubelet's entry on reserved CPUs %s was imported: assigned %s", k, cpus, have)
			}
			continue
		}
		if have, ok := e.Assignment(st, k.Pod, k.Container); !ok || !sameSet(have, cpus) || !sameSet(applied[k], cpus) {
			c.fail("%s: the kubelet's state gives it %s; after the import it is assigned %q (%v) and runs on %q", k, cpus, have, ok, applied[k])
		}
	}
	c.check(true)
}
