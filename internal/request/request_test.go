package request

import (
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// kubeletCPU builds the LinuxCPU the kubelet (cgroup v1, cpuCFSQuota on)
// writes: the values below are the kubelet's formulas worked out by hand,
// shares = max(2, milli*1024/1000), quota = milli*100000/1000, period
// 100000, quota 0 (unset) without a limit.
func kubeletCPU(shares uint64, quota int64) *api.LinuxCPU {
	return &api.LinuxCPU{
		Shares: &api.OptionalUInt64{Value: shares},
		Quota:  &api.OptionalInt64{Value: quota},
		Period: &api.OptionalUInt64{Value: 100000},
	}
}

func TestRequestFromKubeletValues(t *testing.T) {
	for _, tc := range []struct {
		name        string
		shares      uint64
		quota       int64
		req, lim    int64
		integralCPU bool // request == limit and whole CPUs
	}{
		// 500m: 500*1024/1000 = 512 shares, 500*100 = 50000 quota.
		{"500m", 512, 50000, 500, 500, false},
		// 1 CPU: 1024 shares, 100000 quota.
		{"1", 1024, 100000, 1000, 1000, true},
		// 2 CPUs: 2048 shares, 200000 quota.
		{"2", 2048, 200000, 2000, 2000, true},
		// 3.5 CPUs: 3500*1024/1000 = 3584 shares, 350000 quota.
		{"3.5", 3584, 350000, 3500, 3500, false},
		// 64 CPUs: 65536 shares, 6400000 quota.
		{"64", 65536, 6400000, 64000, 64000, true},
		// 250m request / 500m limit (burstable): 256 shares, 50000 quota.
		{"250m/500m", 256, 50000, 250, 500, false},
		// 333m: 333*1024/1000 = 340 shares -> 340*1000/1024 = 332m, quota 33300 -> 333m: they disagree.
		{"333m", 340, 33300, 332, 333, false},
		// 1 CPU request, no limit: quota 0.
		{"1 no limit", 1024, 0, 1000, 0, false},
		// Unlimited quota -1.
		{"quota -1", 2048, -1, 2000, 0, false},
		// BestEffort: 2 shares, no quota.
		{"besteffort", 2, 0, 0, 0, false},
		// 1m request: max(2, 1) = 2 shares -> no request.
		{"1m", 2, 1000, 0, 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, lim := requestFromCPU(kubeletCPU(tc.shares, tc.quota))
			if req != tc.req || lim != tc.lim {
				t.Errorf("request, limit = %d, %d; want %d, %d", req, lim, tc.req, tc.lim)
			}
			if got := req == lim && req > 0 && req%1000 == 0; got != tc.integralCPU {
				t.Errorf("whole CPUs = %v, want %v", got, tc.integralCPU)
			}
		})
	}
	if req, lim := requestFromCPU(nil); req != 0 || lim != 0 {
		t.Errorf("nil cpu: %d, %d", req, lim)
	}
	// No period: no limit can be derived.
	if _, lim := requestFromCPU(&api.LinuxCPU{Quota: &api.OptionalInt64{Value: 100000}}); lim != 0 {
		t.Errorf("quota without period: limit %d", lim)
	}
}

func TestQoSFromCgroupParent(t *testing.T) {
	for _, tc := range []struct {
		parent string
		want   policy.QoS
	}{
		{"/kubepods/pod1234-abcd", policy.Guaranteed},
		{"/kubepods/burstable/pod1234-abcd", policy.Burstable},
		{"/kubepods/besteffort/pod1234-abcd", policy.BestEffort},
		{"kubepods-pod1234_abcd.slice", policy.Guaranteed},
		{"kubepods-burstable-pod1234_abcd.slice", policy.Burstable},
		{"kubepods-besteffort-pod1234_abcd.slice", policy.BestEffort},
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd.slice", policy.Burstable},
		// A systemd container cgroups path as NRI reports it.
		{"kubepods-besteffort-pod1234_abcd.slice:cri-containerd:0123abcd", policy.BestEffort},
		// Upper case (systemd escaping never produces it, but be lenient).
		{"/KubePods/Burstable/podX", policy.Burstable},
		// The word inside a pod UID does not count.
		{"/kubepods/podburstable1", policy.Guaranteed},
		{"", policy.Guaranteed},
	} {
		t.Run(tc.parent, func(t *testing.T) {
			if got := qosFromCgroupParent(tc.parent); got != tc.want {
				t.Errorf("qosFromCgroupParent(%q) = %q, want %q", tc.parent, got, tc.want)
			}
		})
	}
}

func TestRequestFor(t *testing.T) {
	pod := &api.PodSandbox{
		Id: "sb1", Uid: "uid-1", Name: "web", Namespace: "ns",
		Linux: &api.LinuxPodSandbox{
			CgroupParent: "/kubepods/poduid-1",
			// Pod-level sum of two containers of 2 CPUs each.
			PodResources: &api.LinuxResources{Cpu: kubeletCPU(4096, 400000)},
		},
	}
	ctr := &api.Container{
		Id: "c1", Name: "app",
		Linux: &api.LinuxContainer{
			CgroupsPath: "/kubepods/poduid-1/c1",
			Resources:   &api.LinuxResources{Cpu: kubeletCPU(2048, 200000)},
		},
	}
	got := For(pod, ctr)
	want := policy.Request{Pod: "uid-1", Container: "app", QoS: policy.Guaranteed, CPURequestMilli: 2000, CPULimitMilli: 2000,
		Type: allocator.App, PodCPURequestMilli: 4000, PodCPULimitMilli: 4000}
	if got.Pod != want.Pod || got.Container != want.Container || got.QoS != want.QoS || got.CPURequestMilli != want.CPURequestMilli ||
		got.CPULimitMilli != want.CPULimitMilli || got.Type != want.Type || got.PodCPURequestMilli != want.PodCPURequestMilli ||
		got.PodCPULimitMilli != want.PodCPULimitMilli {
		t.Errorf("For = %+v, want %+v", got, want)
	}

	// No pod resources and no cgroup parent: the container's cgroups path
	// decides the QoS, the pod request is unknown (0).
	pod2 := &api.PodSandbox{Id: "sb2", Name: "x"}
	ctr2 := &api.Container{Name: "c", Linux: &api.LinuxContainer{CgroupsPath: "kubepods-burstable-podx.slice:cri-containerd:c2",
		Resources: &api.LinuxResources{Cpu: kubeletCPU(512, 0)}}}
	got = For(pod2, ctr2)
	if got.Pod != "sb2" || got.QoS != policy.Burstable || got.CPURequestMilli != 500 || got.CPULimitMilli != 0 || got.PodCPURequestMilli != 0 {
		t.Errorf("For without pod data = %+v", got)
	}
	// pod.Linux.Resources is the sandbox container's own cgroup (shares 2
	// under a real kubelet; any value here): not the pod's request.
	pod2.Linux = &api.LinuxPodSandbox{Resources: &api.LinuxResources{Cpu: kubeletCPU(3072, 300000)}}
	if got := For(pod2, ctr2); got.PodCPURequestMilli != 0 {
		t.Errorf("pod request from the sandbox container's Resources = %d, want 0 (unknown)", got.PodCPURequestMilli)
	}
	// What containerd 2.4 and CRI-O 1.37 sent for a pod with an init
	// container (1 CPU), a sidecar (200m) and an app container (1 CPU):
	// PodResources is max(1, 0.2 + 1) = 1.2 CPUs, Resources the pause's.
	pod3 := &api.PodSandbox{Id: "sb3", Uid: "uid-3", Linux: &api.LinuxPodSandbox{
		CgroupParent: "/kubepods/poduid-3",
		PodResources: &api.LinuxResources{Cpu: kubeletCPU(1228, 120000)},
		Resources:    &api.LinuxResources{Cpu: &api.LinuxCPU{Shares: api.UInt64(2)}},
	}}
	for _, name := range []string{"init", "sidecar", "app"} {
		c := &api.Container{Name: name, Linux: &api.LinuxContainer{CgroupsPath: "/kubepods/poduid-3/" + name,
			Resources: &api.LinuxResources{Cpu: kubeletCPU(1024, 100000)}}}
		if got := For(pod3, c); got.PodCPURequestMilli != 1199 || got.Type != allocator.App || got.CPURequestMilli != 1000 {
			t.Errorf("For(%s) = %+v, want an app container of 1000m in a pod of 1199m", name, got)
		}
	}
	if PodName(pod) != "ns/web" || PodName(pod2) != "x" {
		t.Errorf("PodName: %q %q", PodName(pod), PodName(pod2))
	}
}

func TestGuaranteedAgreement(t *testing.T) {
	for _, tc := range []struct {
		name             string
		req, lim         int64
		wantReq, wantLim int64
		wantQoS          policy.QoS
	}{
		{"agree on 2 CPUs", 2000, 2000, 2000, 2000, policy.Guaranteed},
		{"agree on 500m", 500, 500, 500, 500, policy.Guaranteed},
		// 333m: shares give 332, quota 333; the quota's non-integral value wins, shared pool.
		{"333m", 332, 333, 333, 333, policy.Guaranteed},
		// cpuCFSQuota off: quota 0, limit = request.
		{"no quota 2 CPUs", 2000, 0, 2000, 2000, policy.Guaranteed},
		// quota says 2 CPUs but shares say 1999m: not an agreement on an integer.
		{"shares off by one", 1999, 2000, 1999, 1999, policy.Guaranteed},
		// two different whole numbers: not the kubelet's Guaranteed; Burstable.
		{"two integers", 1000, 2000, 1000, 2000, policy.Burstable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &api.PodSandbox{Uid: "u", Linux: &api.LinuxPodSandbox{CgroupParent: "/kubepods/podu"}}
			ctr := &api.Container{Name: "c", Linux: &api.LinuxContainer{Resources: &api.LinuxResources{Cpu: &api.LinuxCPU{
				Shares: &api.OptionalUInt64{Value: uint64(tc.req) * 1024 / 1000},
				Quota:  &api.OptionalInt64{Value: tc.lim * 100},
				Period: &api.OptionalUInt64{Value: 100000},
			}}}}
			// Shares for 1999m: 1999*1024/1000 = 2046 -> back to 1998m, so
			// feed the exact milli values through guaranteedAgreement too.
			req, lim := guaranteedAgreement(policy.Guaranteed, tc.req, tc.lim)
			qos := policy.Guaranteed
			if lim < 0 {
				qos, lim = policy.Burstable, -lim
			}
			if req != tc.wantReq || lim != tc.wantLim || qos != tc.wantQoS {
				t.Errorf("guaranteedAgreement(%d, %d) = %d, %d, %s; want %d, %d, %s", tc.req, tc.lim, req, lim, qos, tc.wantReq, tc.wantLim, tc.wantQoS)
			}
			r := For(pod, ctr)
			if r.QoS == policy.Guaranteed && r.CPURequestMilli != r.CPULimitMilli {
				t.Errorf("For gives a Guaranteed request %d != limit %d", r.CPURequestMilli, r.CPULimitMilli)
			}
		})
	}
}
