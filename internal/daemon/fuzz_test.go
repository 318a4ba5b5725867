package daemon

import (
	"encoding/json"
	"io"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/invariant"
	"github.com/nri-cpualign/nri-cpualign/pkg/checkpoint"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy/policytest"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// FuzzRestore runs on the fixture ht-2s-6c (24 CPUs, siblings N and N+12,
// two NUMA nodes) with two CPUs reserved.
const fuzzConfig = policytest.Reserved2BestEffort

func quietLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
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
