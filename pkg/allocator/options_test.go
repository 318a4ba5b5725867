package allocator

import (
	"errors"
	"strings"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
)

func TestParseOptions(t *testing.T) {
	tests := []struct {
		name    string
		in      map[string]string
		want    Options
		wantErr string // substring; "" = no error
	}{
		{"empty", nil, Options{}, ""},
		{"all on", map[string]string{
			OptFullPCPUsOnly: "true", OptDistributeCPUsAcrossNUMA: "true", OptAlignBySocket: "true",
			OptDistributeCPUsAcrossCores: "true", OptPreferAlignByUncoreCache: "true", OptStrictCPUReservation: "true",
		}, Options{true, true, true, true, true, true, UncoreStrictOff, kubever.V138}, ""},
		{"false is off", map[string]string{OptFullPCPUsOnly: "false"}, Options{}, ""},
		{"strconv bools", map[string]string{OptFullPCPUsOnly: "1", OptStrictCPUReservation: "True"}, Options{FullPCPUsOnly: true, StrictCPUReservation: true}, ""},
		{"bad value", map[string]string{OptFullPCPUsOnly: "yes"}, Options{}, `bad value for option "full-pcpus-only": strconv.ParseBool: parsing "yes": invalid syntax`},
		{"empty value", map[string]string{OptAlignBySocket: ""}, Options{}, `bad value for option "align-by-socket"`},
		{"unknown", map[string]string{"full-pcpu-only": "true"}, Options{}, `unknown CPU Manager Policy option: "full-pcpu-only"`},
		// Several bad entries: the alphabetically first is reported.
		{"first of several", map[string]string{"zzz": "true", "aaa": "x"}, Options{}, `"aaa"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseOptions(tc.in)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got != tc.want {
					t.Errorf("got %+v, want %+v", got, tc.want)
				}
				// Round trip through Map.
				back, err := ParseOptions(got.Map())
				if err != nil || back != got {
					t.Errorf("Map round trip: %+v, %v", back, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got error %v, want one containing %s", err, tc.wantErr)
			}
			var oe *OptionsError
			if !errors.As(err, &oe) || oe.Reason() != "InvalidConfig" {
				t.Errorf("got %T, want *OptionsError with reason InvalidConfig", err)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		s    spec
		want []string // substrings of the error; nil = valid
	}{
		{"full-pcpus-only + uncore", Options{FullPCPUsOnly: true, PreferAlignByUncoreCache: true}, specHT1S4C, nil},
		{"full-pcpus-only + across numa", Options{FullPCPUsOnly: true, DistributeCPUsAcrossNUMA: true}, specHT1S4C, nil},
		{"full-pcpus-only + across cores", Options{FullPCPUsOnly: true, DistributeCPUsAcrossCores: true}, specHT1S4C, []string{OptFullPCPUsOnly, OptDistributeCPUsAcrossCores}},
		{"across numa + across cores", Options{DistributeCPUsAcrossNUMA: true, DistributeCPUsAcrossCores: true}, specHT1S4C, []string{OptDistributeCPUsAcrossNUMA, OptDistributeCPUsAcrossCores}},
		{"uncore + across cores", Options{PreferAlignByUncoreCache: true, DistributeCPUsAcrossCores: true}, specHT1S4C, []string{OptPreferAlignByUncoreCache, OptDistributeCPUsAcrossCores}},
		{"uncore + across numa", Options{PreferAlignByUncoreCache: true, DistributeCPUsAcrossNUMA: true}, specHT1S4C, []string{OptPreferAlignByUncoreCache, OptDistributeCPUsAcrossNUMA}},
		{"align-by-socket, 2 sockets 4 nodes", Options{AlignBySocket: true}, specHT2S4NUMA, nil},
		{"align-by-socket, 1 socket 1 node", Options{AlignBySocket: true}, specHT1S4C, nil},
		// 2 sockets sharing one NUMA node (NPS0-like): sockets outnumber nodes.
		{"align-by-socket, 2 sockets 1 node", Options{AlignBySocket: true}, spec{}, []string{OptAlignBySocket, "sockets (2)", "NUMA nodes (1)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.s == (spec{}) {
				topo := build(t, spec{sockets: 2, coresPerSocket: 2, threads: 1})
				// Rebuild with both sockets in NUMA node 0.
				d := topo.Details()
				for i := range d {
					d[i].NUMA = 0
				}
				topo = mustTopo(t, d)
				err = tc.o.Validate(topo)
			} else {
				err = tc.o.Validate(build(t, tc.s))
			}
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if reasonOf(err) != "InvalidConfig" {
				t.Errorf("reason %q", reasonOf(err))
			}
			// NewStatic refuses the same options.
			if _, nerr := NewStatic(build(t, specHT1S4C), tc.o, mustParse(t, "")); tc.s != (spec{}) && nerr == nil {
				t.Errorf("NewStatic accepted %+v", tc.o)
			}
		})
	}
}
