//go:build testhooks

package churn

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/cgroups"
	"github.com/nri-cpualign/nri-cpualign/internal/daemon"
	"github.com/nri-cpualign/nri-cpualign/internal/invariant"
	"github.com/nri-cpualign/nri-cpualign/internal/nritest"
	"github.com/nri-cpualign/nri-cpualign/internal/systemd"
)

// The systemd cgroup driver and pod quotas. On the systemd driver systemd
// keeps each scope's AllowedCPUs and each pod slice's CPUQuota and writes
// them back into the files when it re-applies its units (daemon-reload):
// whatever the plugin changes must be in systemd's record too. The fake
// systemd here is the record: the plugin's SetCPUSet and LiftQuota calls,
// and the runtime's own writes (runc's systemd driver sets the unit
// property when it applies a cpuset), but not a write behind everyone's
// back (opDrift). After every step the cpuset systemd holds for a live
// scope must be the one in its cgroup, and a pod with an exclusive
// container must have no quota in its file or in systemd.

// fakeSystemd records what systemd would hold. Its mutex is a leaf.
type fakeSystemd struct {
	mu      sync.Mutex
	allowed map[string]string // scope unit → AllowedCPUs
	quota   map[string]bool   // slice unit → systemd holds a CPU quota
	calls   int
	// behindBack is set while the churn writes a cgroup past systemd.
	behindBack atomic.Bool
}

func (f *fakeSystemd) SetCPUSet(_ context.Context, unit, cpus, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if cpus != "" {
		f.allowed[unit] = cpus
	}
	return nil
}

func (f *fakeSystemd) LiftQuota(_ context.Context, unit string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.quota[unit] = false
	return nil
}

func (f *fakeSystemd) QuotaLifted(_ context.Context, unit string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.quota[unit], nil
}

func (f *fakeSystemd) Version() int { return 252 }

func (f *fakeSystemd) allowedOf(unit string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.allowed[unit]
	return s, ok
}

func (f *fakeSystemd) quotaOf(unit string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.quota[unit]
}

func (f *fakeSystemd) setQuota(unit string) {
	f.mu.Lock()
	f.quota[unit] = true
	f.mu.Unlock()
}

// systemdDriver reports whether the runtime uses the systemd driver.
func (c *churn) systemdDriver() bool { return strings.HasPrefix(c.s.node, "systemd") }

// systemdNode prepares the unified tree under root and returns the
// runtime's options for the systemd driver; with systemd reachable it
// gives the daemon the fake, otherwise a dial that fails as a node
// without the bus socket.
func (c *churn) systemdNode(root string) []nritest.Option {
	if err := os.MkdirAll(root, 0o755); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpuset cpu memory\n"), 0o644); err != nil {
		c.t.Fatal(err)
	}
	// systemd runs the hierarchy, as on a node booted with it: the plugin
	// sees it from the start (its mode does not wait for a first scope).
	if err := os.MkdirAll(filepath.Join(root, "init.scope"), 0o755); err != nil {
		c.t.Fatal(err)
	}
	opts := []nritest.Option{nritest.WithSystemdCgroups()}
	if c.s.node != "systemd" {
		c.opts = append(c.opts, daemon.WithSystemd(func(context.Context) (systemd.Manager, error) {
			return nil, errors.New("dial unix /run/dbus/system_bus_socket: connect: no such file or directory")
		}))
		return opts
	}
	c.sd = &fakeSystemd{allowed: map[string]string{}, quota: map[string]bool{}}
	c.opts = append(c.opts, daemon.WithSystemd(func(context.Context) (systemd.Manager, error) { return c.sd, nil }))
	return opts
}

// runtimeWrote is the runtime's write of a scope's cpuset: runc's systemd
// driver sets the unit's AllowedCPUs with it, unless the churn writes
// behind systemd's back.
func (c *churn) runtimeWrote(ct *api.Container, file, value string) {
	if file != "cpuset.cpus" || c.sd.behindBack.Load() {
		return
	}
	c.sd.mu.Lock()
	c.sd.allowed[scopeUnit(ct)] = value
	c.sd.mu.Unlock()
}

// writeBehindBack writes c's cgroup as an operator would, past systemd.
func (c *churn) writeBehindBack(ct *api.Container, cpus string) {
	if c.sd != nil {
		c.sd.behindBack.Store(true)
		defer c.sd.behindBack.Store(false)
	}
	c.rt.WriteCgroup(ct, cpus)
}

// scopeUnit is the systemd scope of a container on the systemd driver.
func scopeUnit(ct *api.Container) string { return "cri-containerd-" + ct.Id + ".scope" }

// podQuotaFile is the CFS quota file of p's cgroup and the slice unit on
// the systemd driver ("" on cgroupfs).
func (c *churn) podQuotaFile(p *api.PodSandbox) (file, slice string) {
	root := c.cfg.CgroupRoot
	parent := p.GetLinux().GetCgroupParent()
	if c.systemdDriver() {
		return filepath.Join(root, cgroups.ExpandSlice(parent), "cpu.max"), parent
	}
	return filepath.Join(root, "cpu", parent, "cpu.cfs_quota_us"), ""
}

// quotaOn is whether the plugin takes the quota off pods of exclusive
// containers here.
func (c *churn) quotaOn() bool { return c.static() && c.cfg.DisableCPUQuota }

// writePodQuota gives p's cgroup a CFS quota, as the kubelet writes one
// for a pod whose containers all have CPU limits (systemd holds it too).
func (c *churn) writePodQuota(p *api.PodSandbox) {
	if !c.quotaOn() {
		return
	}
	file, slice := c.podQuotaFile(p)
	value := "400000"
	if c.systemdDriver() {
		value = "400000 100000"
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		c.fail("%v", err)
	}
	if err := os.WriteFile(file, []byte(value+"\n"), 0o644); err != nil {
		c.fail("%v", err)
	}
	if c.sd != nil {
		c.sd.setQuota(slice)
	}
}

// quotaLifted reads whether p's cgroup has no quota; ok false when the
// pod has no quota file (run while the plugin was away: the churn wrote
// none).
func (c *churn) quotaLifted(p *api.PodSandbox) (lifted, ok bool) {
	file, _ := c.podQuotaFile(p)
	b, err := os.ReadFile(file)
	if err != nil {
		return false, false
	}
	s := strings.TrimSpace(string(b))
	return s == "-1" || strings.HasPrefix(s, "max"), true
}

// checkSystemd lists what systemd's record and the quotas get wrong:
// a live scope whose AllowedCPUs is not its cgroup's cpuset, a pod with
// an exclusive container whose quota is in its file or in systemd.
func (c *churn) checkSystemd(applied map[invariant.Key]cpuset.CPUSet) []string {
	var probs []string
	if c.sd != nil {
		for _, ct := range c.live() {
			have, ok := applied[c.keyOf(ct)]
			rec, known := c.sd.allowedOf(scopeUnit(ct))
			if !ok || !known {
				continue
			}
			if set, err := cpuset.Parse(rec); err != nil || !sameSet(set, have) {
				probs = append(probs, fmt.Sprintf("systemd holds AllowedCPUs=%s for %s, its cgroup %s: a daemon-reload would move it", rec, ct.Id, have))
			}
		}
	}
	if !c.quotaOn() {
		return probs
	}
	byID := map[string]*api.Container{}
	for _, ct := range c.rt.Containers() {
		byID[ct.Id] = ct
	}
	for id := range c.admitted {
		ct, ok := byID[id]
		if !ok {
			continue
		}
		p := c.rt.PodOf(ct)
		if lifted, ok := c.quotaLifted(p); ok && !lifted {
			probs = append(probs, fmt.Sprintf("pod %s of exclusive container %s keeps its CFS quota", p.Uid, id))
		}
		if _, slice := c.podQuotaFile(p); c.sd != nil && c.sd.quotaOf(slice) {
			probs = append(probs, fmt.Sprintf("systemd keeps the CPUQuota of %s, pod of exclusive container %s", slice, id))
		}
	}
	return probs
}

// opQuotaCameBack plays a pod quota written back while no event follows
// (systemd re-applied the pod's slice, or the kubelet wrote the pod's
// cgroup again): the reconcile loop's quota pass, run here as its period
// would, must lift it again, with no event.
func (c *churn) opQuotaCameBack() {
	if c.quotaWrittenBack("pod-quota-came-back", "the reconcile loop's quota pass") == nil {
		return
	}
	c.d.ReconcileQuotaNow()
	c.ops["reconcile-quota"]++
	c.check(false)
}

// quotaWrittenBack picks a running exclusive container whose pod cgroup
// has a quota file, writes the pod's quota again and counts fault; what
// follows (then) is logged. With no such container it creates one and
// returns nil.
func (c *churn) quotaWrittenBack(fault, then string) *api.Container {
	var cands []*api.Container
	for _, ct := range c.inState(api.ContainerState_CONTAINER_RUNNING) {
		if _, ok := c.admitted[ct.Id]; ok {
			if _, ok := c.quotaLifted(c.rt.PodOf(ct)); ok {
				cands = append(cands, ct)
			}
		}
	}
	ct := c.pick(cands)
	if ct == nil {
		c.opCreate()
		return nil
	}
	p := c.rt.PodOf(ct)
	c.record("quota of pod %s written again, then %s", p.Uid, then)
	c.writePodQuota(p)
	c.faults[fault]++
	return ct
}

// opQuotaRewrite plays the kubelet's in-place resize of a pod with an
// exclusive container: it writes the pod's quota again (systemd re-applied
// the slice's too) before it updates the container, here with the same
// CPUs and more memory. The container's UpdateContainer must lift the
// pod's quota again.
func (c *churn) opQuotaRewrite() {
	ct := c.quotaWrittenBack("pod-quota-rewritten", "its container resized (memory)")
	if ct == nil {
		return
	}
	res := nritest.ContainerResources(c.res[ct.Id])
	res.Memory.Limit = api.Int64(res.GetMemory().GetLimit().GetValue() + 1<<20)
	if _, err := c.rt.UpdateContainer(context.Background(), ct, res); err != nil {
		c.fail("UpdateContainer %s (memory only): %v", ct.Id, err)
	}
	c.ops["resize"]++
	c.check(false)
}
