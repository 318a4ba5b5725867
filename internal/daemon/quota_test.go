package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
)

// podQuotaFile is the cgroup v1 cpu.cfs_quota_us of pod's cgroup in the
// fake runtime's tree, written with the kubelet's value for a pod limited
// to milli CPUs.
func podQuotaFile(t *testing.T, rt *fakeRuntime, pod *api.PodSandbox, milli int64) string {
	t.Helper()
	dir := filepath.Join(rt.CgroupRoot(), "cpu", pod.GetLinux().GetCgroupParent())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "cpu.cfs_quota_us")
	setFile(t, file, strconv.FormatInt(milli*100, 10))
	return file
}

func setFile(t *testing.T, file, content string) {
	t.Helper()
	if err := os.WriteFile(file, []byte(content+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func fileText(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// quotaOf is the CFS quota an adjustment or update sets, "" when none.
func quotaOf(cpu *api.LinuxCPU) string {
	if cpu.GetQuota() == nil {
		return ""
	}
	return strconv.FormatInt(cpu.GetQuota().GetValue(), 10)
}

// An exclusive container is created with quota -1 and its pod's cgroup
// loses its quota; a shared-pool container of another pod keeps both, as
// the kubelet does with DisableCPUQuotaWithExclusiveCPUs. With the key off
// nothing changes.
func TestExclusiveContainerAndPodHaveNoQuota(t *testing.T) {
	for _, off := range []bool{true, false} {
		t.Run(map[bool]string{true: "key on", false: "key off"}[off], func(t *testing.T) {
			rt := startRuntime(t)
			extra := "reserved_system_cpus = \"0,12\"\n"
			if !off {
				extra += "disable_cpu_quota_with_exclusive_cpus = false\n"
			}
			startDaemon(t, rt, testConfig(t, rt, t.TempDir(), extra), loadFixture(t, "ht-2s-6c"))

			g := rt.addPod(podSpec{uid: "g", name: "g", qos: "guaranteed"})
			gQuota := podQuotaFile(t, rt, g, 2000)
			b := rt.addPod(podSpec{uid: "b", name: "b", qos: "burstable"})
			bQuota := podQuotaFile(t, rt, b, 1500)

			resp, err := rt.CreateContainer(context.Background(), g, rt.newCtr(g, "pinned", 2000, 2000))
			if err != nil {
				t.Fatal(err)
			}
			wantQuota, wantPod := "", "200000"
			if off {
				wantQuota, wantPod = "-1", "-1"
			}
			if got := quotaOf(resp.GetAdjust().GetLinux().GetResources().GetCpu()); got != wantQuota {
				t.Errorf("exclusive container's adjusted quota = %q, want %q", got, wantQuota)
			}
			if got := fileText(t, gQuota); got != wantPod {
				t.Errorf("its pod's cpu.cfs_quota_us = %s, want %s", got, wantPod)
			}

			resp, err = rt.CreateContainer(context.Background(), b, rt.newCtr(b, "shared", 500, 1500))
			if err != nil {
				t.Fatal(err)
			}
			if got := quotaOf(resp.GetAdjust().GetLinux().GetResources().GetCpu()); got != "" {
				t.Errorf("shared-pool container's adjusted quota = %q, want none", got)
			}
			if got := fileText(t, bQuota); got != "150000" {
				t.Errorf("shared pod's cpu.cfs_quota_us = %s, want 150000", got)
			}
		})
	}
}

// A plugin restart: an exclusive container created without the plugin
// (the runtime reports the kubelet's quota 100000) is answered at
// Synchronize with quota -1 and its pod's quota is lifted; a shared-pool
// container gets no quota change.
func TestQuotaLiftedAtSynchronize(t *testing.T) {
	rt := startRuntime(t)
	g := rt.addPod(podSpec{uid: "g", name: "g", qos: "guaranteed"})
	gQuota := podQuotaFile(t, rt, g, 1000)
	pinned := rt.createAway(g, "pinned", 1000, 1000)
	b := rt.addPod(podSpec{uid: "b", name: "b", qos: "burstable"})
	bQuota := podQuotaFile(t, rt, b, 1000)
	shared := rt.createAway(b, "shared", 500, 1000)

	startDaemon(t, rt, testConfig(t, rt, t.TempDir(), "reserved_system_cpus = \"0,12\"\n"), loadFixture(t, "ht-2s-6c"))
	quotas := map[string]string{}
	for _, u := range rt.SyncUpdates() {
		quotas[u.GetContainerId()] = quotaOf(u.GetLinux().GetResources().GetCpu())
	}
	if got := quotas[pinned.Id]; got != "-1" {
		t.Errorf("Synchronize's quota for the exclusive container = %q, want -1 (updates %v)", got, quotas)
	}
	if got := quotas[shared.Id]; got != "" {
		t.Errorf("Synchronize's quota for the shared-pool container = %q, want none", got)
	}
	if got := fileText(t, gQuota); got != "-1" {
		t.Errorf("exclusive pod's cpu.cfs_quota_us = %s, want -1", got)
	}
	if got := fileText(t, bQuota); got != "100000" {
		t.Errorf("shared pod's cpu.cfs_quota_us = %s, want 100000", got)
	}
}

// An in-place resize sends the kubelet's quota again (here a memory-only
// resize of a 1-CPU container, whose CPU values stay 1 CPU): the plugin
// answers with quota -1 for the exclusive container and lifts its pod's
// quota, which the kubelet rewrote; a shared-pool container's resize goes
// through as sent.
func TestQuotaLiftedAtUpdate(t *testing.T) {
	rt := startRuntime(t)
	startDaemon(t, rt, testConfig(t, rt, t.TempDir(), "reserved_system_cpus = \"0,12\"\n"), loadFixture(t, "ht-2s-6c"))
	g := rt.addPod(podSpec{uid: "g", name: "g", qos: "guaranteed"})
	gQuota := podQuotaFile(t, rt, g, 1000)
	pinned, _, err := rt.create(g, "pinned", 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	b := rt.addPod(podSpec{uid: "b", name: "b", qos: "burstable"})
	shared, _, err := rt.create(b, "shared", 500, 1000)
	if err != nil {
		t.Fatal(err)
	}

	setFile(t, gQuota, "100000") // the kubelet's resize writes the pod first
	updates, err := rt.UpdateContainer(context.Background(), pinned, milliCPU(1000, 1000))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, u := range updates {
		got[u.GetContainerId()] = quotaOf(u.GetLinux().GetResources().GetCpu())
	}
	if got[pinned.Id] != "-1" {
		t.Errorf("resize of the exclusive container: quota %q, want -1 (updates %v)", got[pinned.Id], got)
	}
	if q := fileText(t, gQuota); q != "-1" {
		t.Errorf("pod's cpu.cfs_quota_us after the resize = %s, want -1", q)
	}

	updates, err = rt.UpdateContainer(context.Background(), shared, milliCPU(500, 1500))
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range updates {
		if u.GetContainerId() == shared.Id && quotaOf(u.GetLinux().GetResources().GetCpu()) == "-1" {
			t.Errorf("resize of a shared-pool container answered quota -1")
		}
	}
}

// The reconcile pass lifts a pod quota the kubelet wrote back after the
// containers' update (a shrinking resize); pods without exclusive
// containers are left alone.
func TestReconcileLiftsPodQuota(t *testing.T) {
	rt := startRuntime(t)
	r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), "reserved_system_cpus = \"0,12\"\n"), loadFixture(t, "ht-2s-6c"))
	g := rt.addPod(podSpec{uid: "g", name: "g", qos: "guaranteed"})
	gQuota := podQuotaFile(t, rt, g, 2000)
	if _, _, err := rt.create(g, "pinned", 2000, 2000); err != nil {
		t.Fatal(err)
	}
	b := rt.addPod(podSpec{uid: "b", name: "b", qos: "burstable"})
	bQuota := podQuotaFile(t, rt, b, 1000)
	if _, _, err := rt.create(b, "shared", 500, 1000); err != nil {
		t.Fatal(err)
	}
	setFile(t, gQuota, "100000")
	r.d.applier().ReconcileQuota()
	if q := fileText(t, gQuota); q != "-1" {
		t.Errorf("exclusive pod's cpu.cfs_quota_us after reconcile = %s, want -1", q)
	}
	if q := fileText(t, bQuota); q != "100000" {
		t.Errorf("shared pod's cpu.cfs_quota_us after reconcile = %s, want 100000", q)
	}
}
