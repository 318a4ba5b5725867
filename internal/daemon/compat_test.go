package daemon

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/observe"
)

// TestCheckpointCompat loads state directories written by the release
// before the ledger/store split (testdata/compat, from commit 40d2205:
// ht-1s-4c with core 0 = {0,4} reserved; shared container be-1, pod g's
// app on core 1 = {1,5} with mems 0, pod g2's app placed on core 2 and
// then stopped and removed). journal/ holds a version 2 snapshot and four
// journal records after it, snapshot/ the version 1 checkpoint of the
// snapshot-only store. Both restore to that state without a fingerprint
// warning, and the next decision is saved on top of them.
func TestCheckpointCompat(t *testing.T) {
	for _, store := range []string{"journal", "snapshot"} {
		t.Run(store, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join("testdata", "compat", store)
			entries, err := os.ReadDir(src)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				b, err := os.ReadFile(filepath.Join(src, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			h := newHandlerDaemon(t, dir, "")
			if store == "journal" && !logged(h.log, logrus.InfoLevel, "journal replayed") {
				t.Error("journal not replayed")
			}
			if logged(h.log, logrus.WarnLevel, "checkpoint was written under another configuration or machine") {
				t.Error("the old checkpoint's fingerprint differs from the one computed now")
			}
			want := map[string]observe.ContainerView{
				"be-1": {ID: "be-1", Pod: "ns/be", PodUID: "be", Container: "be", CPUs: "0,2-4,6-7", NUMA: []int{0}, L3: []int{0}},
				"g-1":  {ID: "g-1", Pod: "ns/g", PodUID: "g", Container: "app", CPUs: "1,5", Mems: "0", Exclusive: true, NUMA: []int{0}, L3: []int{0}},
			}
			check := func(when string, d *Daemon, want map[string]observe.ContainerView, shared string) {
				t.Helper()
				v := d.State()
				if v.Shared != shared || v.Reserved != "0,4" || len(v.Containers) != len(want) {
					t.Fatalf("%s: shared %q reserved %q, %d containers; want %s, 0,4, %d", when, v.Shared, v.Reserved, len(v.Containers), shared, len(want))
				}
				for _, c := range v.Containers {
					w := want[c.ID]
					if c.Pod != w.Pod || c.PodUID != w.PodUID || c.Container != w.Container || c.CPUs != w.CPUs || c.Mems != w.Mems || c.Exclusive != w.Exclusive {
						t.Errorf("%s: %+v, want %+v", when, c, w)
					}
				}
			}
			check("restored", h.d, want, "0,2-4,6-7")

			// The runtime reports both running where they were; the next
			// decision, pod n's app, gets core 2 = {2,6}.
			bePod, gPod := testPod("be"), testPod("g")
			be, g := testCtr("be-1", "be", 0), testCtr("g-1", "app", 2000)
			be.PodSandboxId, g.PodSandboxId = bePod.Id, gPod.Id
			be.State, g.State = api.ContainerState_CONTAINER_RUNNING, api.ContainerState_CONTAINER_RUNNING
			be.Linux.Resources.Cpu.Cpus, g.Linux.Resources.Cpu.Cpus, g.Linux.Resources.Cpu.Mems = "0,2-4,6-7", "1,5", "0"
			// An earlier release left g's CFS quota (the kubelet's 200000):
			// the one update takes it off, the cpusets stay.
			ups, err := h.p.Synchronize(context.Background(), []*api.PodSandbox{bePod, gPod}, []*api.Container{be, g})
			if err != nil || len(ups) != 1 || ups[0].GetContainerId() != "g-1" || ups[0].GetLinux().GetResources().GetCpu().GetQuota().GetValue() != -1 ||
				ups[0].GetLinux().GetResources().GetCpu().GetCpus() != "" {
				t.Fatalf("Synchronize = %v, %v; want one update, g-1's quota -1", ups, err)
			}
			if cpus, _ := h.create(t, testPod("n"), testCtr("n-1", "app", 2000)); cpus != "2,6" {
				t.Fatalf("new container on %q, want 2,6", cpus)
			}
			h.d.store.Reset()
			h2 := newHandlerDaemon(t, dir, "")
			want["be-1"] = observe.ContainerView{ID: "be-1", Pod: "ns/be", PodUID: "be", Container: "be", CPUs: "0,3-4,7"}
			want["n-1"] = observe.ContainerView{ID: "n-1", Pod: "ns/n", PodUID: "n", Container: "app", CPUs: "2,6", Mems: "0", Exclusive: true}
			check("after a decision and a restart", h2.d, want, "0,3-4,7")
		})
	}
}
