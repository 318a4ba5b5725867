package kubeletparity

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// Generated machines beside the named fixtures: the sizes of the side by
// side benchmark.
var generated = []struct {
	name string
	spec sysfstest.Spec
}{
	{"gen-16", sysfstest.Spec{Description: "1 socket x 8 cores SMT2, 2 NUMA nodes, one L3",
		Sockets: 1, NUMAPerSocket: 2, CoresPerSocket: 8, ThreadsPerCore: 2}},
	{"gen-96-2s", sysfstest.Spec{Description: "2 sockets x 24 cores SMT2, 1 NUMA node per socket, 8 cores per L3",
		Sockets: 2, CoresPerSocket: 24, ThreadsPerCore: 2, CoresPerL3: 8}},
	{"gen-256-4s", sysfstest.Spec{Description: "4 sockets x 32 cores SMT2, 1 NUMA node per socket, 8 cores per L3",
		Sockets: 4, CoresPerSocket: 32, ThreadsPerCore: 2, CoresPerL3: 8}},
}

// Machines are every named fixture of pkg/sysfs/sysfstest and the
// generated ones, read back through the sysfs reader.
func Machines(t testing.TB) []Machine {
	var out []Machine
	for _, n := range sysfstest.Names() {
		out = append(out, Machine{n, sysfstest.Load(t, n)})
	}
	for _, g := range generated {
		out = append(out, Machine{g.name, sysfstest.LoadSpec(t, g.spec)})
	}
	return out
}

// MachineNamed returns one machine of Machines by name.
func MachineNamed(t testing.TB, name string) Machine {
	for _, g := range generated {
		if g.name == name {
			return Machine{name, sysfstest.LoadSpec(t, g.spec)}
		}
	}
	return Machine{name, sysfstest.Load(t, name)}
}

func envInt(t testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a number >= 0", name, v)
	}
	return n
}

// Run runs the check of the engine under rule set v against the kubelet
// newK builds: every machine and option set not excluded, PARITY_SEEDS
// sequences of PARITY_STEPS steps (default 40) each, seeds PARITY_SEED
// (default 1) and up. By default the seeds shrink with the machine (6 up
// to 64 CPUs, 1 from 256: the kubelet's hints and placement cost grow
// with it), so a warm run takes about a minute. A mismatch fails the
// machine's subtest with the seed and step; the rest of that option set
// is skipped, the other option sets go on. Every exclusion is logged, one
// line per machine and reason ("not run:").
func Run(t *testing.T, v kubever.Version, newK NewKubelet) {
	steps := envInt(t, "PARITY_STEPS", 40)
	first := int64(envInt(t, "PARITY_SEED", 1))
	for _, m := range Machines(t) {
		seeds := envInt(t, "PARITY_SEEDS", min(6, max(1, 6*64/m.Topo.NumCPUs())))
		t.Run(m.Name, func(t *testing.T) {
			t.Parallel()
			ran := 0
			excluded := map[string][]string{}
			var whys []string
			defer func() {
				for _, why := range whys {
					t.Logf("%s: not run: %s: %s", m.Name, strings.Join(excluded[why], ", "), why)
				}
			}()
			for _, o := range OptionSets() {
				if ex := Excluded(m, o, v); ex != nil {
					if excluded[ex.Why] == nil {
						whys = append(whys, ex.Why)
					}
					excluded[ex.Why] = append(excluded[ex.Why], o.String())
					continue
				}
				for s := range int64(seeds) {
					c := Case{Machine: m, Options: o, Version: v, Seed: first + s, Steps: steps}
					mm, err := RunCase(c, newK)
					if err != nil {
						t.Fatal(err)
					}
					if mm != nil {
						t.Errorf("mismatch (replay: PARITY_SEED=%d PARITY_SEEDS=1 -run 'TestParity/%s$'): %v", c.Seed, m.Name, mm)
						break
					}
					ran++
				}
			}
			t.Logf("%s: %d sequences of %d steps agree (%d seeds per option set)", m.Name, ran, steps, seeds)
		})
	}
}

// FirstMismatch runs seeds 1..seeds of one machine and option set and
// returns the first mismatch: the negative checks use it to show that the
// check fails when the rule sets do not match.
func FirstMismatch(t testing.TB, m Machine, o OptionSet, v kubever.Version, newK NewKubelet, seeds, steps int) *Mismatch {
	for s := range int64(seeds) {
		mm, err := RunCase(Case{Machine: m, Options: o, Version: v, Seed: 1 + s, Steps: steps}, newK)
		if err != nil {
			t.Fatal(err)
		}
		if mm != nil {
			return mm
		}
	}
	return nil
}
