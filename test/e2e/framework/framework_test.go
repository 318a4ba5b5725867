package framework

import (
	"os"
	"path/filepath"
	"testing"
)

func TestKubeletResources(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		r                    Resources
		qos                  QOS
		shares, quota, memLi int64
	}{
		// 1 CPU: 1000*1024/1000 = 1024 shares, 1000*100000/1000 = 100000 quota.
		{"guaranteed 1 CPU", GuaranteedCPUs(1), Guaranteed, 1024, 100000, 64 << 20},
		// 500m = 500m: 512 shares, 50000 quota.
		{"fractional guaranteed", GuaranteedMilli(500), Guaranteed, 512, 50000, 64 << 20},
		// 250m request / 500m limit: 256 shares, 50000 quota.
		{"burstable 250m/500m", Resources{CPURequestMilli: 250, CPULimitMilli: 500}, Burstable, 256, 50000, 0},
		// a request and no limit: no quota.
		{"burstable request only", Resources{CPURequestMilli: 100}, Burstable, 102, 0, 0},
		// a limit only: the request defaults to it.
		{"limit only", Resources{CPULimitMilli: 2000}, Burstable, 2048, 200000, 0},
		// nothing: the floor of 2 shares, no quota.
		{"besteffort", Resources{}, BestEffort, 2, 0, 0},
		// 1m limit: 100 quota is raised to the 1000 minimum.
		{"tiny limit", Resources{CPULimitMilli: 1}, Burstable, 2, 1000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PodQOS(tc.r); got != tc.qos {
				t.Errorf("PodQOS = %s, want %s", got, tc.qos)
			}
			c := tc.r.CRI(tc.qos)
			if c.CpuShares != tc.shares || c.CpuQuota != tc.quota || c.CpuPeriod != 100000 || c.MemoryLimitInBytes != tc.memLi {
				t.Errorf("CRI = shares %d quota %d period %d mem %d; want %d %d 100000 %d",
					c.CpuShares, c.CpuQuota, c.CpuPeriod, c.MemoryLimitInBytes, tc.shares, tc.quota, tc.memLi)
			}
		})
	}
}

func TestBurstableOOMScoreAdj(t *testing.T) {
	// 1000 - 1000*256Mi/1Gi = 750; a request above the node's memory
	// clamps to 2; unknown node memory gives 999 (1000 clamped).
	r := Resources{CPURequestMilli: 100, MemRequest: 256 << 20}
	if got := r.CRIOnNode(Burstable, 1<<30).OomScoreAdj; got != 750 {
		t.Errorf("oom_score_adj = %d, want 750", got)
	}
	if got := (Resources{MemRequest: 2 << 30}).CRIOnNode(Burstable, 1<<30).OomScoreAdj; got != 2 {
		t.Errorf("oom_score_adj = %d, want 2", got)
	}
	if got := r.CRI(Burstable).OomScoreAdj; got != 999 {
		t.Errorf("oom_score_adj = %d, want 999", got)
	}
	if got := GuaranteedCPUs(1).CRI(Guaranteed).OomScoreAdj; got != -997 {
		t.Errorf("guaranteed oom_score_adj = %d, want -997", got)
	}
}

func TestPodCRIAndCgroupParent(t *testing.T) {
	// A limit on one container only: the pod has no CPU limit; requests add up
	// (250m + 1000m = 1250m -> 1280 shares).
	p := PodCRI(Burstable, Resources{CPURequestMilli: 250}, GuaranteedCPUs(1))
	if p.CpuShares != 1280 || p.CpuQuota != 0 {
		t.Errorf("pod shares %d quota %d, want 1280 0", p.CpuShares, p.CpuQuota)
	}
	for q, want := range map[QOS]string{
		Guaranteed: "/kubepods/podu1",
		Burstable:  "/kubepods/burstable/podu1",
		BestEffort: "/kubepods/besteffort/podu1",
	} {
		if got := CgroupParent(q, "u1"); got != want {
			t.Errorf("CgroupParent(%s) = %s, want %s", q, got, want)
		}
	}
	if err := RemovePodCgroups("/system.slice"); err == nil {
		t.Error("RemovePodCgroups outside /kubepods did not refuse")
	}
}

func TestParseStatusCPUs(t *testing.T) {
	got, err := ParseStatusCPUs("Name:\tsh\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1,4\nMems_allowed_list:\t0\n")
	if err != nil || got.String() != "0-1,4" {
		t.Errorf("got %s, %v; want 0-1,4", got, err)
	}
	if _, err := ParseStatusCPUs("Name:\tsh\n"); err == nil {
		t.Error("no error without a Cpus_allowed_list line")
	}
	if _, err := ParseStatusCPUs("Cpus_allowed_list:\tx\n"); err == nil {
		t.Error("no error for a bad list")
	}
}

func TestFindLineFromOffset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("plugin \"90-x\" connected and synchronized\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	off := FileSize(path)
	if _, ok, _ := FindLine(path, off, "90-x", "synchronized"); ok {
		t.Error("found a line before the offset")
	}
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("other\nmsg=\"plugin \\\"90-x\\\" connected and synchronized\"\n")
	f.Close()
	if l, ok, err := FindLine(path, off, "90-x", "synchronized"); !ok || err != nil {
		t.Errorf("line after the offset not found: %q %v %v", l, ok, err)
	}
}

func TestReadHostFixture(t *testing.T) {
	// Two NUMA nodes, CPUs 0-1 on node 0 sharing L3 id 7, CPUs 2-3 on node 1
	// with an L3 that has no id file (falls back to the lowest sharing CPU).
	root := t.TempDir()
	write := func(rel, data string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("devices/system/cpu/online", "0-3\n")
	write("devices/system/node/node0/cpulist", "0-1\n")
	write("devices/system/node/node1/cpulist", "2-3\n")
	write("devices/system/node/node1/meminfo", "Node 1 MemTotal:       0 kB\n")
	for cpu, l3 := range map[int]string{0: "7", 1: "7"} {
		write(filepath.Join("devices/system/cpu", "cpu"+string(rune('0'+cpu)), "cache/index3/level"), "3\n")
		write(filepath.Join("devices/system/cpu", "cpu"+string(rune('0'+cpu)), "cache/index3/id"), l3+"\n")
	}
	for _, cpu := range []string{"2", "3"} {
		write("devices/system/cpu/cpu"+cpu+"/cache/index3/level", "3\n")
		write("devices/system/cpu/cpu"+cpu+"/cache/index3/shared_cpu_list", "2-3\n")
	}
	h, err := ReadHost(root)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := ParseStatusCPUs("Cpus_allowed_list:\t0-3\n")
	if got := h.NUMANodes(all).String(); got != "0-1" {
		t.Errorf("NUMA nodes %s, want 0-1", got)
	}
	if got := h.MemoryNodes.String(); got != "0" {
		t.Errorf("memory nodes %s, want 0 (node 1 has 0 kB)", got)
	}
	if got := h.L3Groups(all); len(got) != 2 || got[0] != 7 || got[1] != 2 {
		t.Errorf("L3 groups %v, want [7 2]", got)
	}
}

func TestSystemdCgroupNames(t *testing.T) {
	for _, c := range []struct {
		q    QOS
		uid  string
		want string
	}{
		{Guaranteed, "a-b-1", "/kubepods.slice/kubepods-poda_b_1.slice"},
		{Burstable, "u", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu.slice"},
		{BestEffort, "u", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podu.slice"},
	} {
		if got := SlicePath(PodSlice(c.q, c.uid)); got != c.want {
			t.Errorf("SlicePath(PodSlice(%s, %s)) = %s, want %s", c.q, c.uid, got, c.want)
		}
	}
	if got := SlicePath("/kubepods/podu"); got != "/kubepods/podu" {
		t.Errorf("a cgroupfs path changed: %s", got)
	}
	for _, c := range []struct {
		runtime string
		driver  CgroupDriver
		want    string
	}{
		{Containerd, Cgroupfs, ""}, {CRIO, Cgroupfs, "crio-x"},
		{Containerd, Systemd, "cri-containerd-x.scope"}, {CRIO, Systemd, "crio-x.scope"},
	} {
		if got := ContainerCgroupName(c.runtime, c.driver, "x"); got != c.want {
			t.Errorf("ContainerCgroupName(%s, %s) = %q, want %q", c.runtime, c.driver, got, c.want)
		}
	}
}
