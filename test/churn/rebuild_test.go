package churn

import (
	"context"
	"os"
	"path/filepath"
	"testing"

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
