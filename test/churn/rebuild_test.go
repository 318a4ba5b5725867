//go:build testhooks

package churn

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-cpualign/nri-cpualign/internal/daemon"
	"github.com/nri-cpualign/nri-cpualign/internal/invariant"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// A corrupt checkpoint is set aside and the state rebuilt from the runtime;
// a running exclusive container must keep the CPUs it runs on rather than
// be admitted afresh (which would move it). Found by TestChurn.
//
// Machine ht-1s-4c (core k = {k, k+4}), core 0 reserved. A takes core 1
// {1,5} (lowest free core), B core 2 {2,6}. A goes away, so core 1 is free
// again: a fresh admission of B would pick core 1; B must stay on {2,6}.
func TestCorruptCheckpointKeepsRunningCPUs(t *testing.T) {
	c := newChurn(t, setup{name: "rebuild", fixture: "ht-1s-4c", toml: "cpu_manager_policy = \"static\"\nreserved_system_cpus = \"0,4\"\n"}, 1, 0)
	pa := c.newPod(framework.Guaranteed)
	pb := c.newPod(framework.Guaranteed)
	for _, p := range []string{pa.Id, pb.Id} {
		c.qos[p] = framework.Guaranteed
	}
	if err := c.rt.RunPod(context.Background(), pa); err != nil {
		t.Fatal(err)
	}
	if err := c.rt.RunPod(context.Background(), pb); err != nil {
		t.Fatal(err)
	}
	a := c.create(pa, "a", framework.GuaranteedCPUs(2))
	b := c.create(pb, "b", framework.GuaranteedCPUs(2))
	if a == nil || b == nil {
		t.Fatal("admission failed")
	}
	if got := b.Linux.Resources.Cpu.Cpus; got != "2,6" {
		t.Fatalf("b on %q, want 2,6", got)
	}
	if _, err := c.rt.StopContainer(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if err := c.rt.RemoveContainer(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	delete(c.admitted, a.Id)

	c.stopDaemon()
	path := filepath.Join(c.stateDir, daemon.CheckpointName)
	if err := os.WriteFile(path, []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.startDaemon()
	if _, err := os.Stat(path + ".corrupt-1"); err != nil {
		t.Errorf("corrupt checkpoint not set aside: %v", err)
	}
	applied, err := c.rt.Running()
	if err != nil {
		t.Fatal(err)
	}
	if got := applied[invariant.Key{Pod: pb.Uid, Container: "b"}].String(); got != "2,6" {
		t.Errorf("b runs on %q after the rebuild, want 2,6 (it must not move)", got)
	}
	if err := c.verify(); err != nil {
		t.Error(err)
	}
}

// The same rebuild under shared_pool_updates = "direct" (the default),
// with one container created while the plugin was away: it runs unpinned,
// and its cgroup (what Synchronize reads under direct) holds every CPU. B
// must still keep {2,6}: an unpinned container shares every CPU with
// everyone, which says nothing about B's CPUs being a shared pool.
// Found by TestChurn (CHURN_SEED=20261121, setup ht-2s-6c_static_direct).
func TestCorruptCheckpointKeepsRunningCPUsBesideUnpinned(t *testing.T) {

	c := newChurn(t, setup{name: "rebuild-unpinned", fixture: "ht-1s-4c", toml: "cpu_manager_policy = \"static\"\nreserved_system_cpus = \"0,4\"\n"}, 1, 0)
	if !c.direct() {
		t.Fatal("the default is not direct")
	}
	ctx := context.Background()
	pa, pb, pu := c.newPod(framework.Guaranteed), c.newPod(framework.Guaranteed), c.newPod(framework.BestEffort)
	c.qos[pa.Id], c.qos[pb.Id], c.qos[pu.Id] = framework.Guaranteed, framework.Guaranteed, framework.BestEffort
	for _, p := range []*api.PodSandbox{pa, pb} {
		if err := c.rt.RunPod(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	a := c.create(pa, "a", framework.GuaranteedCPUs(2))
	b := c.create(pb, "b", framework.GuaranteedCPUs(2))
	if a == nil || b == nil {
		t.Fatal("admission failed")
	}
	if got := b.Linux.Resources.Cpu.Cpus; got != "2,6" {
		t.Fatalf("b on %q, want 2,6", got)
	}
	for _, ct := range []*api.Container{a, b} {
		if err := c.rt.StartContainer(ctx, ct); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.rt.StopContainer(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := c.rt.RemoveContainer(ctx, a); err != nil {
		t.Fatal(err)
	}
	c.forgetCtr(a.Id)

	c.stopDaemon()
	if err := os.WriteFile(filepath.Join(c.stateDir, daemon.CheckpointName), []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.rt.RunPodAway(pu)
	c.rt.CreateContainerAway(c.rt.NewContainer(pu, "u", framework.Resources{}))
	c.startDaemon()
	c.afterSync()
	c.settle()
	applied, err := c.rt.Running()
	if err != nil {
		t.Fatal(err)
	}
	if got := applied[invariant.Key{Pod: pb.Uid, Container: "b"}].String(); got != "2,6" {
		t.Errorf("b runs on %q after the rebuild, want 2,6 (it must not move)", got)
	}
	if err := c.verify(); err != nil {
		t.Error(err)
	}
}
