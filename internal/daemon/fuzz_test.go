package daemon

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/invariant"
	"github.com/nri-cpualign/nri-cpualign/pkg/checkpoint"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy/policytest"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// The fuzzers run on the fixture ht-2s-6c (24 CPUs, siblings N and N+12,
// two NUMA nodes) with two CPUs reserved.
const fuzzConfig = "cpu_manager_policy = \"static\"\nreserved_cpu_count = 2\ntopology_manager_policy = \"best-effort\"\n"

func fuzzEngine(f *testing.F) *policy.Engine { return engineFor(f, "ht-2s-6c", fuzzConfig) }

// engineFor builds the engine of a configuration document on a fixture.
func engineFor(t testing.TB, fixture, doc string) *policy.Engine {
	t.Helper()
	_, e := policytest.Engine(t, fixture, doc)
	return e
}

func quietLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// FuzzRequestFor feeds arbitrary cgroup values (what the runtime reports
// for a pod and a container) to the QoS and request derivation. It must
// never panic and never produce a negative request or limit; the engine's
// check of the result either passes or names the pod and container; and
// for the values the kubelet writes (shares = milli*1024/1000, quota =
// milli*100, period 100000) whole CPUs of a Guaranteed pod come back
// exactly.
func FuzzRequestFor(f *testing.F) {
	e := fuzzEngine(f)
	f.Add("/kubepods/podx", uint64(2048), int64(200000), uint64(100000), uint64(0), int64(2000))
	f.Add("/kubepods/burstable/podx", uint64(512), int64(-1), uint64(100000), uint64(1024), int64(0))
	f.Add("kubepods-besteffort-podx.slice", uint64(2), int64(0), uint64(0), uint64(0), int64(0))
	f.Add("/kubepods/podx", uint64(1<<63), int64(1<<62), uint64(1), uint64(1<<64-1), int64(64000))
	f.Fuzz(func(t *testing.T, parent string, shares uint64, quota int64, period, podShares uint64, milli int64) {
		pod := &api.PodSandbox{Id: "sb", Uid: "uid", Name: "p", Namespace: "ns", Linux: &api.LinuxPodSandbox{CgroupParent: parent}}
		if podShares > 0 {
			pod.Linux.PodResources = &api.LinuxResources{Cpu: &api.LinuxCPU{Shares: api.UInt64(podShares)}}
		}
		ctr := &api.Container{Id: "c1", Name: "c", Linux: &api.LinuxContainer{Resources: &api.LinuxResources{Cpu: &api.LinuxCPU{
			Shares: api.UInt64(shares), Quota: api.Int64(quota), Period: api.UInt64(period)}}}}
		req := requestFor(pod, ctr)
		if req.CPURequestMilli < 0 || req.CPULimitMilli < 0 || req.PodCPURequestMilli < 0 {
			t.Fatalf("parent %q shares %d quota %d period %d pod shares %d: negative values %+v", parent, shares, quota, period, podShares, req)
		}
		switch req.QoS {
		case policy.Guaranteed, policy.Burstable, policy.BestEffort:
		default:
			t.Fatalf("QoS %q", req.QoS)
		}
		if err := e.CheckRequest(req); err != nil && (!strings.Contains(err.Error(), "uid") || !strings.Contains(err.Error(), "c")) {
			t.Fatalf("CheckRequest(%+v) = %q: does not name the pod and container", req, err)
		}
		// The kubelet's own values for a whole number of CPUs.
		n := milli / 1000
		if n < 1 || n > 1<<20 {
			return
		}
		ctr.Linux.Resources.Cpu = &api.LinuxCPU{Shares: api.UInt64(uint64(n * 1024)), Quota: api.Int64(n * 100000), Period: api.UInt64(100000)}
		g := requestFor(&api.PodSandbox{Uid: "uid", Linux: &api.LinuxPodSandbox{CgroupParent: "/kubepods/poduid"}}, ctr)
		if g.QoS != policy.Guaranteed || g.CPURequestMilli != n*1000 || g.CPULimitMilli != n*1000 {
			t.Fatalf("%d CPUs as the kubelet writes them came back as %+v", n, g)
		}
	})
}

// FuzzRestore puts an arbitrary payload in a well-formed checkpoint (valid
// version and checksum: the envelope is FuzzLoad's business in
// pkg/checkpoint) and restores the daemon from it. A payload written under
// other settings, by another version or by a bug must be reconciled, not
// trusted: restore never panics, never fails, and leaves a valid state.
func FuzzRestore(f *testing.F) {
	topo := sysfstest.Load(f, "ht-2s-6c")
	f.Add([]byte(`{"fingerprint":"x","engine":{"shared":"0,2-23","reserved":"0,12","assignments":{"p":{"c":"1,13"}}},"containers":{"id1":{"pod":"p","name":"c","exclusive":true}}}`))
	f.Add([]byte(`{"engine":{"assignments":{"p":{"c":"0-23"},"q":{"d":"1,13"},"r":{"e":"1"}},"reusable_pod":"q","reusable":"1,5","pod_affinity":{"p":{"numa":[7],"preferred":true}}}}`))
	f.Add([]byte(`{"engine":{"assignments":{"p":{"c":"x"}}},"containers":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		if !json.Valid(payload) || len(payload) > 4096 {
			return
		}
		dir := t.TempDir()
		cfg, err := config.Load([]byte(fuzzConfig + "state_dir = \"" + dir + "\"\n" + offHostCgroups(t)))
		if err != nil {
			t.Fatal(err)
		}
		if err := checkpoint.New(dir, CheckpointName).Save(json.RawMessage(payload)); err != nil {
			t.Fatal(err)
		}
		d, err := New(cfg, WithTopology(topo), WithLogger(quietLogger()))
		if err != nil {
			t.Fatal(err)
		}
		if err := d.restore(); err != nil {
			t.Fatalf("restore from %s: %v", payload, err)
		}
		e, st := d.engineState()
		if err := invariant.Check(e, st, nil); err != nil {
			t.Fatalf("restore from %s gave an invalid state: %v", payload, err)
		}
	})
}
